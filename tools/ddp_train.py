"""Data-parallel training through torch.distributed with the conv2d package (issue 24): one
process per GPU (NCCL), a small CNN whose convolutions are converted to the library (forward and
backward), wrapped in DistributedDataParallel.

    python3 tools/ddp_train.py [--gpus N] [--steps S] [--batch B]

1. Gradients: one step of the DDP model on N GPUs over a global batch split evenly must give the
   gradients of the same model on one GPU over the whole batch (float32 tolerance).
2. Determinism: under torch.use_deterministic_algorithms(True) the step's gradients are bitwise
   the same when it runs again (the library's backward has no atomics; nothing falls back).
3. Throughput: images/s of S training steps at B images per GPU on one GPU and on N, and the
   ratio. The host's NCCL environment is left as it is (NVLink multicast stays off there).
With --gpus 1 (one process on one GPU) it checks 2 and measures one GPU's throughput; with more,
all three. Needs torch and the installed wheel.
"""
import argparse
import copy
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import conv2d


def small_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 5, padding=2, groups=64), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 128, 1), torch.nn.ReLU(),
        GlobalMean(), torch.nn.Linear(128, 10))


class GlobalMean(torch.nn.Module):
    """The spatial mean (AdaptiveAvgPool2d(1)'s value; its CUDA backward has no deterministic
    implementation, which torch.use_deterministic_algorithms refuses)."""

    def forward(self, x):
        return x.mean((2, 3))


def data(batch, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, 64, 64, generator=g), torch.randint(0, 10, (batch,), generator=g)


def step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    opt.step()


def worker(rank, world, args, result):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    device = torch.device("cuda", rank)
    torch.manual_seed(0)
    base = small_cnn()
    # BatchNorm in eval mode: its batch statistics would differ between one GPU's whole batch
    # and each rank's half; the convolutions and the rest still train.
    model = copy.deepcopy(base).to(device).eval()
    report = conv2d.convert(model)
    assert not report.left, report
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    x, y = data(world * args.batch, seed=1)
    shard = slice(rank * args.batch, (rank + 1) * args.batch)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.0)  # lr 0: gradients only
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(ddp(x[shard].to(device)), y[shard].to(device)).backward()
    grads = [p.grad.detach().clone() for p in ddp.module.parameters()]
    torch.use_deterministic_algorithms(True)
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(ddp(x[shard].to(device)), y[shard].to(device)).backward()
    result[f"bitwise_{rank}"] = all(torch.equal(g, p.grad) for g, p in
                                    zip(grads, ddp.module.parameters()))
    torch.use_deterministic_algorithms(False)
    if rank == 0:
        single = copy.deepcopy(base).to(device).eval()
        conv2d.convert(single)
        F.cross_entropy(single(x.to(device)), y.to(device)).backward()
        worst = 0.0
        for g, p in zip(grads, single.parameters()):
            err = (g - p.grad).abs().max().item() / (1e-12 + p.grad.abs().max().item())
            worst = max(worst, err)
        result["grad_worst_relative"] = worst
    # Throughput: S steps at args.batch per GPU.
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    xs, ys = x[shard].to(device), y[shard].to(device)
    for _ in range(3):
        step(ddp, opt, xs, ys)
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step(ddp, opt, xs, ys)
    torch.cuda.synchronize()
    dist.barrier()
    if rank == 0:
        result["images_per_s"] = world * args.batch * args.steps / (time.perf_counter() - t0)
    dist.destroy_process_group()


def run(world, args):
    import torch.multiprocessing as mp
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(29500 + world)
    manager = mp.Manager()
    result = manager.dict()
    mp.spawn(worker, args=(world, args, result), nprocs=world, join=True)
    return dict(result)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    if not 1 <= args.gpus <= torch.cuda.device_count():
        print(f"FAILED: --gpus {args.gpus}, {torch.cuda.device_count()} GPUs here")
        return 1
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    one = run(1, args)
    bitwise = one["bitwise_0"]
    print(f"one GPU: gradients bitwise the same when the step runs again under "
          f"torch.use_deterministic_algorithms(True): {bitwise}; "
          f"{one['images_per_s']:.0f} images/s")
    if args.gpus == 1:
        print("PASS" if bitwise else "FAIL (the gradients differ from run to run)")
        return 0 if bitwise else 1
    many = run(args.gpus, args)
    bitwise = bitwise and all(v for k, v in many.items() if k.startswith("bitwise_"))
    ratio = many["images_per_s"] / one["images_per_s"]
    print(f"gradients, {args.gpus} GPUs vs one: worst relative difference "
          f"{many['grad_worst_relative']:.2e}")
    print(f"throughput: 1 GPU {one['images_per_s']:.0f} images/s, {args.gpus} GPUs "
          f"{many['images_per_s']:.0f} images/s ({ratio:.2f}x)")
    ok = many["grad_worst_relative"] <= 1e-4 and ratio >= 1.8 and bitwise
    print("PASS" if ok else "FAIL (targets: gradients within 1e-4, bitwise reproducible, "
          ">= 1.8x)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
