"""A torchvision model's training step (batch 32, fp32, TF32 off, SGD), plain and converted:
wall time per step with and without a sync per step, the host's time to enqueue a step, and
torch.profiler's top ops by device and by host time over five steps (its "Self CUDA time
total" / 5 is the GPU's kernel time a step). docs/PERF.md round 106.

    python3 tools/step_profile.py [efficientnet_b0]
"""
import copy, sys, time
import torch, torchvision
from torch.profiler import profile, ProfilerActivity
import conv2d

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
name_model = sys.argv[1] if len(sys.argv) > 1 else "efficientnet_b0"
base = torchvision.models.get_model(name_model).cuda().train()
for label in ["plain", "converted"]:
    model = copy.deepcopy(base)
    if label == "converted":
        print(conv2d.convert(model))
    torch.manual_seed(0)
    x = torch.randn(32, 3, 224, 224, device="cuda")
    target = torch.randint(0, 1000, (32,), device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), target)
        loss.backward()
        opt.step()
    for _ in range(15):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        step()
        torch.cuda.synchronize()
    synced = (time.perf_counter() - t0) / 20 * 1e3
    t0 = time.perf_counter()
    for _ in range(20):
        step()
    host = (time.perf_counter() - t0) / 20 * 1e3
    torch.cuda.synchronize()
    unsynced = (time.perf_counter() - t0) / 20 * 1e3
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    ka = prof.key_averages()
    dev = sum(getattr(e, "self_device_time_total", 0) or 0 for e in ka) / 5 / 1e3
    print(f"{name_model} {label}: step synced {synced:.2f} ms, unsynced {unsynced:.2f} ms, host "
          f"enqueue {host:.2f} ms/step, device self time {dev:.2f} ms/step")
    for key in ("self_device_time_total", "self_cpu_time_total"):
        try:
            print(ka.table(sort_by=key, row_limit=18, max_name_column_width=60))
        except Exception as e:  # noqa
            print("table", key, e)
