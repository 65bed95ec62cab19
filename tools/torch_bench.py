"""The conv2d package from PyTorch on a GPU host: host time per call, KernelBot's protocol through
the package, and torchvision's ResNet-50 converted. Needs torch, torchvision, a GPU and the
installed wheel. Prints tables; --json_out writes every number.

    python3 tools/torch_bench.py [--steps overhead,pieces,kernelbot,resnet50,compile] [--json_out F]

overhead: host time per call, measured while the GPU is held busy by a long kernel queued first
(torch.cuda._sleep), so that the time to enqueue N calls is the host's alone; N calls, median of
5 repeats, per entry point, every entry --overhead_rounds times over (interleaved; the best
round reported beside each round's value): conv2d.conv2d (the fast path's conv2d entry), KernelBot's
custom_kernel with its output given, both again with the entry off (Python's lookup, then the
fast path's Call) and with the fast path off (the Python path, ctypes), the registered op
torch.ops.conv2d.conv2d (the dispatcher's path), and F.conv2d.
pieces: the same measurement of each piece of conv2d.conv2d's direct path alone (the signature
lookup, the allocation of y, the pointer and stream reads, a trivial ctypes call).
kernelbot: KernelBot's five cases under its eval.py's benchmark protocol (inputs drawn once; per
call a 256 MB int64 tensor filled to flush L2, CUDA events around one call; mean of --calls
calls) through conv2d.conv2d(x, w, out=y), KernelBot's custom_kernel; compare with
`bin/benchmark --variants=auto` (C++, a 256 MB memset before each call) run beside it.
resnet50: batch 32, 224x224, eval, no_grad, TF32 off, cudnn.benchmark on: the forward of the
unconverted fp32 model, the converted one, and the converted one with BatchNorm folded, median
of 20 timed forwards (CUDA events) after warm-up; logits against the model in float64.
compile: the same under torch.compile(fullgraph=True) (inductor).
"""
import argparse
import contextlib
import copy
import json
import statistics
import time

import torch
import torch.nn.functional as F

import conv2d

KERNELBOT_CASES = [(128, 8, 64, 4), (128, 16, 64, 4), (256, 16, 128, 2), (256, 16, 128, 2),
                   (256, 32, 128, 1)]  # (size, kernel size, channels, batch)


def host_us_per_call(fn, calls=200, repeats=5):
    """Host time per call (us): fn enqueued `calls` times behind a kernel that keeps the GPU
    busy, so no call waits on the device."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time: longer than the enqueueing
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        times.append((t1 - t0) / calls * 1e6)
    return statistics.median(times)


def _overhead_entries(x, w, out):
    """The entry points timed on one problem (x, w, and y's shape in out), each bound to its own
    tensors."""
    from conv2d import functional
    for _ in range(3):  # the plan, the fast path's first call, the entry's
        conv2d.conv2d(x, w)
        conv2d.conv2d(x, w, out=out)
    call = functional._call_for(x, w, None, 1, 0, 1, 1, False)
    handle, nbytes = call.run
    ws = torch.empty(max(nbytes, 1), dtype=torch.uint8, device="cuda")
    run_ex, stream = functional._native.run_function(), torch.cuda.current_stream().cuda_stream
    args = (handle, x.data_ptr(), w.data_ptr(), None, out.data_ptr(), ws.data_ptr(), nbytes,
            stream)

    @contextlib.contextmanager
    def paths_off(fast_path, run_ex=None):
        """The fast path's conv2d entry off (Python's signature lookup, then the fast path's
        Call); the fast path off as well if not fast_path (the Python path and ctypes); the
        library's call replaced by run_ex if given; for this problem."""
        saved = call.fast, functional._fast_conv2d, functional._run_ex
        functional._fast_conv2d = None
        if not fast_path:
            call.fast = None
        if run_ex is not None:
            functional._run_ex = run_ex
        try:
            yield
        finally:
            call.fast, functional._fast_conv2d, functional._run_ex = saved

    def without(fn, fast_path):
        def measure():
            with paths_off(fast_path):
                return host_us_per_call(fn)
        return measure

    def python_only():
        with paths_off(False, run_ex=lambda *a: 0):
            return host_us_per_call(lambda: conv2d.conv2d(x, w))

    timed = lambda fn: (lambda: host_us_per_call(fn))
    return {
        "conv2d.conv2d": timed(lambda: conv2d.conv2d(x, w)),
        "conv2d.conv2d(out=) (custom_kernel)": timed(lambda: conv2d.conv2d(x, w, out=out)),
        "conv2d.conv2d, Python's lookup, then C++": without(lambda: conv2d.conv2d(x, w), True),
        "conv2d.conv2d(out=), Python's lookup, then C++": without(
            lambda: conv2d.conv2d(x, w, out=out), True),
        "conv2d.conv2d, Python path (ctypes)": without(lambda: conv2d.conv2d(x, w), False),
        "conv2d.conv2d(out=), Python path (ctypes)": without(
            lambda: conv2d.conv2d(x, w, out=out), False),
        "torch.ops.conv2d.conv2d (dispatcher)": timed(lambda: torch.ops.conv2d.conv2d(
            x, w, None, [1, 1], [0, 0, 0, 0], [1, 1], 1)),
        "F.conv2d (cuDNN)": timed(lambda: F.conv2d(x, w)),
        "  of which: conv2d_plan_run_ex by ctypes": timed(lambda: run_ex(*args)),
        "  of which: the Python path's Python (run_ex a no-op)": python_only,
        "  torch.empty(y) alone": timed(lambda: torch.empty(out.shape, dtype=torch.float32,
                                                            device="cuda")),
    }


def step_overhead(results, rounds):
    """Every entry on both problems, `rounds` times over, the entries interleaved so that a host
    whose speed drifts (the lent hosts' does, PERF.md round 93) slows them alike; the best round
    of each entry is reported beside every round's value."""
    problems = []
    for name, dims in (("tiny (1,8,8,16,16,3,3)", (1, 8, 8, 16, 3)),
                       ("KernelBot case 1", (4, 64, 64, 128, 8))):
        b, c, o, s, k = dims
        x = torch.randn(b, c, s, s, device="cuda")
        w = torch.randn(o, c, k, k, device="cuda")
        out = torch.empty(b, o, s - k + 1, s - k + 1, device="cuda")
        problems.append((name, _overhead_entries(x, w, out)))
    from conv2d import functional
    print(f"fast path: {functional.fast_path()}", flush=True)
    results["fast_path"] = functional.fast_path()
    every = {}
    with torch.no_grad():
        for r in range(rounds):
            for name, entries in problems:
                for entry, measure in entries.items():
                    us = measure()
                    every.setdefault((name, entry), []).append(us)
                    print(f"host time per call  round {r + 1}  {name:24s} {entry:46s} "
                          f"{us:7.2f} us", flush=True)
    for (name, entry), values in every.items():
        print(f"host time per call  best of {rounds}  {name:24s} {entry:46s} "
              f"{min(values):7.2f} us", flush=True)
    results["overhead_us"] = [dict(problem=p, entry=e, us=min(v), rounds_us=v)
                              for (p, e), v in every.items()]


def step_pieces(results):
    """Host time of each piece of conv2d.conv2d's direct path on the tiny problem (us; the same
    200-call measurement): where the Python layer's time goes."""
    from conv2d import functional
    x = torch.randn(1, 8, 16, 16, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    conv2d.conv2d(x, w)
    dims = (1, 8, 14, 14)
    pieces = {
        "torch.compiler.is_compiling()": torch.compiler.is_compiling,
        "the fast path's conv2d entry, declining (no key)": lambda: functional._fast_conv2d(
            x, w, None, True, 0, 1, 1, None),
        "_needs_op (dispatcher needed?)": lambda: functional._needs_op(x, w, None),
        "_call_for (signature lookup)": lambda: functional._call_for(x, w, None, 1, 0, 1, 1,
                                                                      False),
        "x.new_empty(y) (caching allocator)": lambda: x.new_empty(dims),
        "torch.empty_strided(y) (as the direct path)": lambda: torch.empty_strided(
            dims, (8 * 14 * 14, 14 * 14, 14, 1), dtype=torch.float32, device=x.device),
        "workspace: a raw block, allocated and freed": lambda: functional._raw_delete(
            functional._raw_alloc(100_000, functional._current_stream(0))),
        "workspace: a uint8 tensor, allocated and freed": lambda: x.new_empty(
            100_000, dtype=torch.uint8),
        "x.is_contiguous()": x.is_contiguous,
        "x.is_neg()": x.is_neg,
        "x.data_ptr()": x.data_ptr,
        "current stream": lambda: functional._current_stream(0),
        "current device": functional._current_device,
        "ctypes call, trivial (conv2d_algorithm_count)":
            functional._native.lib().conv2d_algorithm_count,
    }
    rows = []
    with torch.no_grad():
        for name, fn in pieces.items():
            us = host_us_per_call(fn)
            rows.append(dict(piece=name, us=us))
            print(f"host time per piece  {name:46s} {us:7.3f} us", flush=True)
    results["pieces_us"] = rows


def clear_l2():
    """KernelBot's eval.py flush: a fresh 256 MB int64 tensor (from the caching allocator),
    filled, dropped."""
    dummy = torch.empty((32, 1024, 1024), dtype=torch.int64, device="cuda")
    dummy.fill_(42)
    del dummy


def step_kernelbot(results, calls):
    """KernelBot's eval.py, benchmark mode, for custom_kernel = conv2d.conv2d(x, w, out=y): per
    call a synchronize, new events, the flush, start, the call, end, synchronize; the mean. On
    the default stream and again on a side stream."""
    rows = []
    for stream_name in ("default stream", "side stream"):
        stream = torch.cuda.current_stream() if stream_name == "default stream" \
            else torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for i, (size, k, ch, batch) in enumerate(KERNELBOT_CASES):
                g = torch.Generator(device="cuda").manual_seed(i + 1)
                x = torch.randn(batch, ch, size, size, device="cuda", generator=g)
                w = torch.randn(ch, ch, k, k, device="cuda", generator=g)
                out = torch.empty(batch, ch, size - k + 1, size - k + 1, device="cuda")
                conv2d.conv2d(x, w, out=out)  # eval.py's correctness call makes the plan
                ref = F.conv2d(x.double(), w.double())
                worst = ((out.double() - ref).abs() / (1e-3 + 1e-3 * ref.abs())).max().item()
                times = []
                for _ in range(calls):
                    torch.cuda.synchronize()
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    clear_l2()
                    start.record()
                    conv2d.conv2d(x, w, out=out)
                    end.record()
                    torch.cuda.synchronize()
                    times.append(start.elapsed_time(end))
                mean = sum(times) / len(times)
                rows.append(dict(stream=stream_name, case=i + 1, size=size, k=k, channels=ch,
                                 batch=batch, ms=mean, worst_ratio=worst,
                                 algorithm=conv2d.plan_algorithm(x, w)))
                print(f"KernelBot ({stream_name}) case {i + 1} {size},{k},{ch},{batch}: "
                      f"{mean:.4f} ms  worst {worst:.3f}  {rows[-1]['algorithm']}", flush=True)
        geo = statistics.geometric_mean([r["ms"] for r in rows if r["stream"] == stream_name])
        print(f"KernelBot geomean through the package ({stream_name}): {geo:.4f} ms", flush=True)
    results["kernelbot"] = rows


def forward_ms(model, x, iters=20):
    with torch.no_grad():
        for _ in range(5):
            model(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(x)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def worst_ratio(y, ref):
    return ((y.double() - ref).abs() / (1e-3 + 1e-3 * ref.abs())).max().item()


def step_resnet50(results, compile_too):
    import torchvision
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    base = torchvision.models.resnet50().cuda().eval()
    x = torch.randn(32, 3, 224, 224, device="cuda")
    with torch.no_grad():
        ref = copy.deepcopy(base).double()(x.double())
    converted = copy.deepcopy(base)
    conv2d.convert(converted)
    folded = copy.deepcopy(base)
    report = conv2d.convert(folded, fold_batchnorm=True)
    print(report, flush=True)
    models = {"PyTorch fp32 (cuDNN)": base, "converted": converted,
              "converted, BN folded": folded}
    rows = []
    for compiled in ([False, True] if compile_too else [False]):
        for name, m in models.items():
            run = m
            if compiled:
                torch._dynamo.reset()
                t0 = time.perf_counter()
                run = torch.compile(m, fullgraph=True)
                with torch.no_grad():
                    run(x)
                print(f"  compiled {name} in {time.perf_counter() - t0:.0f} s", flush=True)
            ms = forward_ms(run, x)
            with torch.no_grad():
                worst = worst_ratio(run(x), ref)
            rows.append(dict(model=name, compiled=compiled, ms=ms, worst_ratio=worst))
            print(f"ResNet-50 b32 {'compiled ' if compiled else 'eager    '} {name:22s} "
                  f"{ms:8.3f} ms  worst ratio to the fp64 bar {worst:.4f}", flush=True)
    for compiled in sorted({r["compiled"] for r in rows}):
        base_ms = next(r["ms"] for r in rows if r["compiled"] == compiled
                       and r["model"].startswith("PyTorch"))
        for r in rows:
            if r["compiled"] == compiled:
                r["speedup"] = base_ms / r["ms"]
                print(f"  {'compiled' if compiled else 'eager'} {r['model']:22s} "
                      f"{r['speedup']:.2f}x the unconverted model", flush=True)
    results["resnet50"] = rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="overhead,pieces,kernelbot,resnet50,compile")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--overhead_rounds", type=int, default=3,
                    help="times the overhead step measures every entry (interleaved)")
    ap.add_argument("--json_out")
    args = ap.parse_args()
    steps = args.steps.split(",")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, conv2d "
          f"{conv2d.__version__} ({conv2d.library_path()})", flush=True)
    results = dict(device=torch.cuda.get_device_name(), torch=torch.__version__)
    try:
        if "overhead" in steps:
            step_overhead(results, args.overhead_rounds)
        if "pieces" in steps:
            step_pieces(results)
        if "kernelbot" in steps:
            step_kernelbot(results, args.calls)
        if "resnet50" in steps:
            step_resnet50(results, "compile" in steps)
    finally:
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
