"""GPU MODE KernelBot conv2d entry point backed by libconv2d.so (the C ABI of conv/conv2d_c.h).

    custom_kernel((input, kernel, output)) -> output   # KernelBot's interface, torch CUDA tensors
    conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1) -> y
                                                       # torch.nn.functional.conv2d's signature
                                                       # and semantics, float32 CUDA tensors
    python3 tools/kernelbot.py [--seeds N]             # check against float64 F.conv2d (GPU host)

The library is $CONV2D_LIB, else libconv2d.so next to this file; $CONV2D_ALGORITHM names the
variant (default "auto"). torch is imported where it is used, so that the ctypes layer loads (and
reports "no CUDA device") on machines without PyTorch.
"""
import ctypes
import os
import sys
import warnings

_lib = None
# (B, Cin, Cout, H, W, Kh, Kw, algorithm, device index) -> (plan, workspace bytes), and for
# conv2d: ("problem", the conv2d_problem's fields, algorithm, device index) -> (plan, bytes).
_plans = {}

# conv2d_problem's int64 fields, in order (conv/conv2d_c.h).
_PROBLEM_FIELDS = ("batch", "in_channels", "out_channels", "height", "width", "kernel_h",
                   "kernel_w", "pad_top", "pad_bottom", "pad_left", "pad_right", "stride_h",
                   "stride_w", "dilation_h", "dilation_w", "groups")
CONV2D_UNIMPLEMENTED = 12


class _Problem(ctypes.Structure):
    """conv2d_problem as this file knows it: struct_size is ctypes.sizeof(_Problem), this
    binding's own size (conv2d_problem_init is inline in the header, not in the library)."""
    _fields_ = ([("struct_size", ctypes.c_size_t)] +
                [(name, ctypes.c_int64) for name in _PROBLEM_FIELDS] +
                [("has_bias", ctypes.c_int32)])


def _make_problem(fields, has_bias):
    """A _Problem with conv2d_problem_init's defaults under the given fields (a dict by name)."""
    p = _Problem()  # zeroed by ctypes, padding included
    p.struct_size = ctypes.sizeof(_Problem)
    p.stride_h = p.stride_w = p.dilation_h = p.dilation_w = p.groups = 1
    for name, value in fields.items():
        setattr(p, name, value)
    p.has_bias = 1 if has_bias else 0
    return p


def _load():
    global _lib
    if _lib is None:
        here = os.path.dirname(os.path.abspath(__file__))
        lib = ctypes.CDLL(os.environ.get("CONV2D_LIB") or os.path.join(here, "libconv2d.so"))
        vp, i64 = ctypes.c_void_p, ctypes.c_int64
        lib.conv2d_plan_create.argtypes = [i64] * 7 + [ctypes.c_char_p, ctypes.POINTER(vp)]
        lib.conv2d_plan_workspace_size.argtypes = [vp, ctypes.POINTER(ctypes.c_size_t)]
        lib.conv2d_plan_run.argtypes = [vp, vp, vp, vp, vp, ctypes.c_size_t, vp]
        lib.conv2d_plan_destroy.argtypes = [vp]
        lib.conv2d_plan_destroy.restype = None
        lib.conv2d_plan_algorithm.argtypes = [vp]
        lib.conv2d_plan_algorithm.restype = ctypes.c_char_p
        lib.conv2d_last_error.restype = ctypes.c_char_p
        lib.conv2d_plan_create_ex.argtypes = [ctypes.POINTER(_Problem), ctypes.c_char_p,
                                              ctypes.POINTER(vp)]
        lib.conv2d_plan_run_ex.argtypes = [vp, vp, vp, vp, vp, vp, ctypes.c_size_t, vp]
        _lib = lib
    return _lib


def _check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: {_load().conv2d_last_error().decode()} (code {rc})")


def _create_plan(dims, algorithm):
    lib, plan = _load(), ctypes.c_void_p()
    _check(lib.conv2d_plan_create(*dims, algorithm.encode(), ctypes.byref(plan)),
           f"conv2d_plan_create{tuple(dims)}")
    size = ctypes.c_size_t()
    rc = lib.conv2d_plan_workspace_size(plan, ctypes.byref(size))
    if rc != 0:
        lib.conv2d_plan_destroy(plan)
        _check(rc, "conv2d_plan_workspace_size")
    return plan, size.value


def _plan(dims, device):
    algorithm = os.environ.get("CONV2D_ALGORITHM", "auto")
    key = (*dims, algorithm, device.index)
    if key not in _plans:
        # Plans live until the process exits: destroying them during interpreter teardown could
        # race the CUDA context's own teardown. A plan is safe to run from several threads and
        # streams at once; each call brings its own workspace.
        _plans[key] = _create_plan(dims, algorithm)
    return _plans[key]


def _pair(v, name):
    """An int or a sequence of one or two ints (as F.conv2d takes them) as a pair."""
    if isinstance(v, bool) or not isinstance(v, (int, tuple, list)):
        raise TypeError(f"conv2d: {name} must be an int or a pair of ints, got {v!r}")
    if isinstance(v, int):
        return (v, v)
    if len(v) not in (1, 2) or any(isinstance(e, bool) or not isinstance(e, int) for e in v):
        raise ValueError(f"conv2d: {name} must be an int or a pair of ints, got {v!r}")
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _problem_fields(x_shape, w_shape, stride, padding, dilation, groups):
    """The conv2d_problem fields (a dict) and the output's (H, W) for a batched input of
    x_shape = (B, Cin, H, W) and a filter of w_shape = (Cout, Cin / groups, Kh, Kw), with
    F.conv2d's arguments. Raises as F.conv2d refuses (ValueError, TypeError). torch-free.

    padding: an int or a pair (top = bottom, left = right), "valid" (none) or "same" (stride 1
    only; the output as large as the input): F.conv2d pads each dimension by
    total = dilation * (k - 1), total // 2 before and the rest after, so an odd total puts the
    extra row at the bottom and the extra column at the right (PyTorch's
    aten/src/ATen/native/Convolution.cpp, _convolution_mode with padding "same", and
    _pooling_same_mode_padding_lr in Pool.h, whose stride > 2 adjustment cannot apply at stride 1).
    """
    (b, c, h, wd), (o, cg, kh, kw) = x_shape, w_shape
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError(f"conv2d: groups must be an int, got {groups!r}")
    if sh <= 0 or sw <= 0:
        raise ValueError(f"conv2d: non-positive stride is not supported, got {(sh, sw)}")
    if dh <= 0 or dw <= 0:
        raise ValueError(f"conv2d: dilation must be positive, got {(dh, dw)}")
    if groups <= 0:
        raise ValueError(f"conv2d: non-positive groups is not supported, got {groups}")
    if isinstance(padding, str):
        if padding == "valid":
            pt = pb = pl = pr = 0
        elif padding == "same":
            if (sh, sw) != (1, 1):
                raise ValueError("conv2d: padding='same' is not supported for strided "
                                 "convolutions")
            th, tw = dh * (kh - 1), dw * (kw - 1)
            pt, pb, pl, pr = th // 2, th - th // 2, tw // 2, tw - tw // 2
        else:
            raise ValueError(f"conv2d: invalid padding string {padding!r}, should be one of "
                             f"'valid', 'same'")
    else:
        ph, pw = _pair(padding, "padding")
        if ph < 0 or pw < 0:
            raise ValueError(f"conv2d: negative padding is not supported, got {(ph, pw)}")
        pt, pb, pl, pr = ph, ph, pw, pw
    if c % groups or o % groups:
        raise ValueError(f"conv2d: groups = {groups} must divide the input channels ({c}) and "
                         f"the output channels ({o})")
    if cg * groups != c:
        raise ValueError(f"conv2d: weight {tuple(w_shape)} with groups = {groups} expects "
                         f"{cg * groups} input channels, the input has {c}")
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(f"conv2d: the kernel {kh}x{kw} (dilation {(dh, dw)}) is larger than "
                         f"the padded input {h + pt + pb}x{wd + pl + pr}: output size "
                         f"{oh}x{ow} is too small")
    fields = dict(zip(_PROBLEM_FIELDS, (b, c, o, h, wd, kh, kw, pt, pb, pl, pr, sh, sw, dh, dw,
                                        groups)))
    return fields, (oh, ow)


def _create_plan_ex(fields, has_bias, algorithm):
    lib, plan = _load(), ctypes.c_void_p()
    problem = _make_problem(fields, has_bias)
    rc = lib.conv2d_plan_create_ex(ctypes.byref(problem), algorithm.encode(), ctypes.byref(plan))
    if rc != 0:
        return rc, None
    size = ctypes.c_size_t()
    rc = lib.conv2d_plan_workspace_size(plan, ctypes.byref(size))
    if rc != 0:
        lib.conv2d_plan_destroy(plan)
        _check(rc, "conv2d_plan_workspace_size")
    return 0, (plan, size.value)


_fallbacks = set()


def _plan_ex(fields, has_bias, device):
    algorithm = os.environ.get("CONV2D_ALGORITHM", "auto")
    key = ("problem", tuple(fields.values()), bool(has_bias), algorithm, device.index)
    if key not in _plans:
        rc, made = _create_plan_ex(fields, has_bias, algorithm)
        if rc == CONV2D_UNIMPLEMENTED and algorithm == "auto":
            # No algorithm auto may pick computes this geometry yet: the library's direct oracle
            # (which takes every geometry, accumulating in fp64; slow) rather than no result.
            reason = _load().conv2d_last_error().decode()
            rc, made = _create_plan_ex(fields, has_bias, "direct")
            if rc == 0 and key not in _fallbacks:
                _fallbacks.add(key)
                warnings.warn(f"conv2d: no fast algorithm takes this problem ({reason}); "
                              f"running the 'direct' oracle", RuntimeWarning, stacklevel=3)
        _check(rc, f"conv2d_plan_create_ex({fields}, has_bias={bool(has_bias)}, {algorithm})")
        _plans[key] = made  # lives until the process exits, as _plan's
    return _plans[key]


def plan_algorithm(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """The algorithm conv2d(...) with these arguments runs (its plan, made if need be)."""
    unbatched = x.dim() == 3
    xs = (1, *x.shape) if unbatched else tuple(x.shape)
    fields, _ = _problem_fields(xs, tuple(w.shape), stride, padding, dilation, groups)
    import torch
    with torch.cuda.device(x.device):
        plan, _ = _plan_ex(fields, bias is not None, x.device)
    return _load().conv2d_plan_algorithm(plan).decode()


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv2d for float32 CUDA tensors, through libconv2d.

    x (B, Cin, H, W) or unbatched (Cin, H, W); w (Cout, Cin / groups, Kh, Kw); bias (Cout,) or
    None; stride, dilation: an int or a pair; padding: an int, a pair, "valid" or "same" (see
    _problem_fields); groups divides Cin and Cout. Returns a new contiguous tensor
    (B, Cout, out_h, out_w) (unbatched: (Cout, out_h, out_w)), computed on the current stream.
    Within the library's accuracy contract against float64 (|y - y64| <= 1e-3 + 1e-3 |y64|).
    """
    import torch
    tensors = [("input", x), ("weight", w)] + ([("bias", bias)] if bias is not None else [])
    for name, t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"conv2d: {name} must be a tensor, got {type(t).__name__}")
        if t.dtype != torch.float32 or not t.is_cuda:
            raise TypeError(f"conv2d: {name} must be a float32 CUDA tensor, got {t.dtype} on "
                            f"{t.device}")
        if t.device != x.device:
            raise ValueError(f"conv2d: {name} is on {t.device}, the input on {x.device}")
    unbatched = x.dim() == 3
    if unbatched:
        x = x.unsqueeze(0)
    if x.dim() != 4 or w.dim() != 4:
        raise ValueError(f"conv2d: input must be (B, C, H, W) or (C, H, W) and weight "
                         f"(Cout, C / groups, Kh, Kw); got {tuple(x.shape)} and "
                         f"{tuple(w.shape)}")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != w.shape[0]):
        raise ValueError(f"conv2d: bias must be ({w.shape[0]},), got {tuple(bias.shape)}")
    fields, (oh, ow) = _problem_fields(tuple(x.shape), tuple(w.shape), stride, padding,
                                       dilation, groups)
    b, c, o = fields["batch"], fields["in_channels"], fields["out_channels"]
    y = torch.empty((b, o, oh, ow), dtype=torch.float32, device=x.device)
    if b == 0 or o == 0:
        pass  # nothing to compute
    elif c == 0:
        y.zero_()
        if bias is not None:
            y += bias.view(1, o, 1, 1)
    else:
        x, w = _plain(x), _plain(w)
        bias = _plain(bias) if bias is not None else None
        with torch.cuda.device(x.device):
            plan, nbytes = _plan_ex(fields, bias is not None, x.device)
            # From PyTorch's caching allocator on the current stream, as custom_kernel's.
            ws = torch.empty(nbytes, dtype=torch.uint8, device=x.device) if nbytes else None
            stream = torch.cuda.current_stream(x.device).cuda_stream
            _check(_load().conv2d_plan_run_ex(
                plan, x.data_ptr(), w.data_ptr(), bias.data_ptr() if bias is not None else None,
                y.data_ptr(), ws.data_ptr() if ws is not None else None, nbytes, stream),
                "conv2d_plan_run_ex")
    return y.squeeze(0) if unbatched else y


def _plain(t):
    """t as a dense tensor whose memory holds its values (negative and conjugate views resolved)."""
    return t.resolve_neg().resolve_conj().contiguous()


def custom_kernel(data):
    import torch
    x, w = data[0], data[1]
    y = data[2] if len(data) > 2 else None
    if x.dtype != torch.float32 or w.dtype != torch.float32 or not (x.is_cuda and w.is_cuda):
        raise TypeError("conv2d: input and kernel must be float32 CUDA tensors")
    if w.device != x.device or (y is not None and y.device != x.device):
        raise ValueError(f"conv2d: input, kernel and output must be on one device "
                         f"(input on {x.device}, kernel on {w.device}"
                         f"{'' if y is None else f', output on {y.device}'})")
    unbatched = x.dim() == 3  # (C, H, W), as F.conv2d takes it
    if unbatched:
        x = x.unsqueeze(0)
    if x.dim() != 4 or w.dim() != 4:
        raise ValueError(f"conv2d: input must be (B, C, H, W) or (C, H, W) and kernel "
                         f"(Cout, C, Kh, Kw); got {tuple(data[0].shape)} and {tuple(w.shape)}")
    (b, c, h, wd), (o, c2, kh, kw) = x.shape, w.shape
    if c2 != c or kh > h or kw > wd:
        raise ValueError(f"conv2d: input {tuple(data[0].shape)} and kernel {tuple(w.shape)} "
                         f"mismatch")
    out_shape = (b, o, h - kh + 1, wd - kw + 1)
    want = out_shape[1:] if unbatched else out_shape
    if y is None:
        y = torch.empty(want, dtype=torch.float32, device=x.device)
    if tuple(y.shape) != want or y.dtype != torch.float32:
        raise ValueError(f"conv2d: output must be float32 {want} on {x.device}")
    if b == 0 or o == 0 or kh == 0 or kw == 0:
        return y  # nothing to compute, as F.conv2d
    if c == 0:
        return y.zero_()
    x, w = _plain(x), _plain(w)
    direct = y.is_contiguous() and not y.is_neg() and not y.is_conj()
    dst = y if direct else torch.empty(want, dtype=torch.float32, device=x.device)
    with torch.cuda.device(x.device):
        plan, nbytes = _plan((b, c, o, h, wd, kh, kw), x.device)
        # From PyTorch's caching allocator on the current stream: a call on another stream or
        # thread gets its own, and it is not reused before this call's kernels are done.
        ws = torch.empty(nbytes, dtype=torch.uint8, device=x.device) if nbytes else None
        stream = torch.cuda.current_stream(x.device).cuda_stream
        _check(_load().conv2d_plan_run(plan, x.data_ptr(), w.data_ptr(), dst.data_ptr(),
                                       ws.data_ptr() if ws is not None else None, nbytes, stream),
               "conv2d_plan_run")
    if dst is not y:
        y.copy_(dst)
    return y


def _main():
    import argparse
    import torch
    import torch.nn.functional as F
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=1,
                        help="seeds per benchmark case (the test shapes run once)")
    args = parser.parse_args()
    # (size, kernelsize, channels, batch, seed): KernelBot's five benchmark cases, then its tests.
    bench = [(128, 8, 64, 4, 1), (128, 16, 64, 4, 2), (256, 16, 128, 2, 3), (256, 16, 128, 2, 4),
             (256, 32, 128, 1, 5)]
    cases = [(s, k, c, b, seed + 1000 * i) for i in range(args.seeds) for s, k, c, b, seed in bench]
    cases += [(32, 4, 16, 1, 4242), (32, 4, 16, 2, 5236), (64, 4, 32, 1, 1001),
              (64, 8, 32, 2, 5531), (128, 8, 64, 1, 9173)]
    failed = 0
    worst_by_shape = {}
    for size, k, ch, batch, seed in cases:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(batch, ch, size, size, device="cuda", generator=gen)
        w = torch.randn(ch, ch, k, k, device="cuda", generator=gen)
        ref = F.conv2d(x.double(), w.double())
        y = torch.empty_like(ref, dtype=torch.float32)
        max_err = worst = 0.0
        for _ in range(2):  # the second call runs the cached plan
            y.fill_(float("nan"))
            custom_kernel((x, w, y))
            torch.cuda.synchronize()
            err = (y.double() - ref).abs()
            ratio = err / (1e-3 + 1e-3 * ref.abs())
            finite = bool(torch.isfinite(y).all())
            max_err = max(max_err, err.max().item() if finite else float("inf"))
            worst = max(worst, ratio.max().item() if finite else float("inf"))
        ok = worst <= 1.0
        failed += not ok
        key = (size, k, ch, batch)
        worst_by_shape[key] = max(worst_by_shape.get(key, 0.0), worst)
        algo = _load().conv2d_plan_algorithm(
            _plan((batch, ch, ch, size, size, k, k), x.device)[0]).decode()
        print(f"size={size:3d} k={k:2d} channels={ch:3d} batch={batch} {algo:>14s}: "
              f"seed={seed:5d} max_abs_err={max_err:.3e} worst_ratio={worst:.4f} "
              f"{'PASS' if ok else 'FAIL'}")
    for (size, k, ch, batch), worst in worst_by_shape.items():
        print(f"worst over seeds: size={size} k={k} channels={ch} batch={batch}: {worst:.4f}")
    print(f"{len(cases) - failed}/{len(cases)} shapes pass |y - y64| <= 1e-3 + 1e-3|y64|")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_main())
