"""Train a torchvision model converted with conv2d.convert for a few steps on random data, and
the plain model beside it, and print each one's step time (forward, backward, SGD; fp32 with
TF32 off, as the library's accuracy bar asks).

    python3 examples/train.py [--model resnet50] [--steps 20] [--batch 32] [--compile]
"""
import argparse
import copy
import sys

import torch
import torchvision

import conv2d


def train(model, steps, batch, label, compile_step):
    torch.manual_seed(0)
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    target = torch.randint(0, 1000, (batch,), device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    forward = torch.compile(model) if compile_step else model
    times = []
    for i in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(x), target)
        loss.backward()
        opt.step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
        done = (i + 1) * 30 // steps
        sys.stdout.write(f"\r{label:>9} [{'#' * done}{'.' * (30 - done)}] step {i + 1}/{steps} "
                         f"loss {loss.item():.3f} {times[-1]:7.1f} ms")
        sys.stdout.flush()
    print()
    warm = sorted(times[steps // 2:])  # the second half: past warm-up, plans and compilation
    return warm[len(warm) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    plain = torchvision.models.get_model(args.model).cuda().train()
    converted = copy.deepcopy(plain)
    print(conv2d.convert(converted))
    t_plain = train(plain, args.steps, args.batch, "plain", args.compile)
    t_conv = train(converted, args.steps, args.batch, "converted", args.compile)
    print(f"{args.model}: plain {t_plain:.2f} ms/step, converted {t_conv:.2f} ms/step: "
          f"{t_plain / t_conv:.2f}x")


if __name__ == "__main__":
    main()
