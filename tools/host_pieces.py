"""Host time per call, in pieces, on problems so small that the GPU waits for the host:
F.conv2d / nn.Conv2d against conv2d.conv2d / a converted Conv2d, forward without a gradient,
forward recording one, forward + backward (one .backward() a call: mostly the autograd
engine's own start, which a model's one backward pays once). The best of three runs of 3000
calls, in microseconds. docs/PERF.md round 106.

    python3 tools/host_pieces.py
"""
import time, copy
import torch, torch.nn.functional as F
import conv2d

def per_call(fn, calls=3000):
    for _ in range(50): fn()
    torch.cuda.synchronize()
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(calls): fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best

for (b, cin, cout, h, k, groups) in [(2, 32, 32, 14, 1, 1), (2, 32, 32, 14, 3, 32)]:
    pad = k // 2
    x = torch.randn(b, cin, h, h, device="cuda", requires_grad=True)
    w = torch.randn(cout, cin // groups, k, k, device="cuda", requires_grad=True)
    g = torch.randn(b, cout, h, h, device="cuda")
    xn, wn = x.detach(), w.detach()
    m = torch.nn.Conv2d(cin, cout, k, padding=pad, groups=groups, bias=False).cuda()
    mc = copy.deepcopy(m); conv2d.convert(mc)
    r = {}
    with torch.no_grad():
        r["fwd nograd F"] = per_call(lambda: F.conv2d(xn, wn, None, 1, pad, 1, groups))
        r["fwd nograd ours"] = per_call(lambda: conv2d.conv2d(xn, wn, None, 1, pad, 1, groups))
        r["fwd nograd module plain"] = per_call(lambda: m(xn))
        r["fwd nograd module conv"] = per_call(lambda: mc(xn))
    r["fwd grad F"] = per_call(lambda: F.conv2d(x, w, None, 1, pad, 1, groups))
    r["fwd grad ours"] = per_call(lambda: conv2d.conv2d(x, w, None, 1, pad, 1, groups))
    r["train F"] = per_call(lambda: F.conv2d(x, w, None, 1, pad, 1, groups).backward(g))
    r["train ours"] = per_call(lambda: conv2d.conv2d(x, w, None, 1, pad, 1, groups).backward(g))
    xm = x.detach().requires_grad_(True)
    r["train module plain"] = per_call(lambda: m(xm).backward(g))
    r["train module conv"] = per_call(lambda: mc(xm).backward(g))
    print((b, cin, cout, h, k, groups), " ".join(f"{k_}={v:.1f}" for k_, v in r.items()), flush=True)
print("fast path:", conv2d.functional.fast_path())
