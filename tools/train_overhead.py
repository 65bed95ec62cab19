"""Host time per training call of one convolution (forward with a gradient to record, then its
backward: dx and dw), conv2d.conv2d against F.conv2d, on problems so small that the GPU waits
for the host: the wall time of many calls, synchronised once, divided by their count.

    python3 tools/train_overhead.py [--calls 2000]
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F

import conv2d

SHAPES = [  # (B, Cin, Cout, H, W, K), padding K // 2
    (1, 8, 8, 8, 8, 3),
    (2, 32, 32, 14, 14, 1),
]


def per_call_us(fn, x, w, g, calls):
    for _ in range(20):  # plans, allocator blocks, the fast path's signature
        fn(x, w).backward(g)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(x, w).backward(g)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    for b, cin, cout, h, wd, k in SHAPES:
        x = torch.randn(b, cin, h, wd, device="cuda", requires_grad=True)
        w = torch.randn(cout, cin, k, k, device="cuda", requires_grad=True)
        g = torch.randn(b, cout, h, wd, device="cuda")
        ours = per_call_us(lambda x, w: conv2d.conv2d(x, w, padding=k // 2), x, w, g, args.calls)
        torch_us = per_call_us(lambda x, w: F.conv2d(x, w, padding=k // 2), x, w, g, args.calls)
        print(f"{(b, cin, cout, h, wd, k)}: host time per training call (forward + dx + dw): "
              f"conv2d {ours:.1f} us, F.conv2d {torch_us:.1f} us")
    # After the calls: the fast path loads with a signature's first plan.
    print(f"CONV2D_EAGER_TRAIN={os.environ.get('CONV2D_EAGER_TRAIN', '1')} fast path: "
          f"{conv2d.functional.fast_path()}")


if __name__ == "__main__":
    main()
