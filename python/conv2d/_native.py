"""libconv2d.so through ctypes: the problem descriptor, F.conv2d's argument rules, plans.

torch-free, so that the package imports (and says "no CUDA device") where PyTorch is absent.
The library is lib/libconv2d.so inside this package (its Abseil libraries beside it, found
through its RUNPATH, $ORIGIN), or $CONV2D_LIB.
"""
import ctypes
import os
import threading

CONV2D_UNIMPLEMENTED = 12  # conv/conv2d_c.h's error codes that this layer acts on
CONV2D_FAILED_PRECONDITION = 9
# conv2d_operation (conv/conv2d_c.h): which convolution of training a problem is.
FPROP, DGRAD, WGRAD = 0, 1, 2
_INT32_LIMIT = 2**31

# conv2d_problem's int64 fields, in order (conv/conv2d_c.h).
PROBLEM_FIELDS = ("batch", "in_channels", "out_channels", "height", "width", "kernel_h",
                  "kernel_w", "pad_top", "pad_bottom", "pad_left", "pad_right", "stride_h",
                  "stride_w", "dilation_h", "dilation_w", "groups")


class _Problem(ctypes.Structure):
    """conv2d_problem as this binding knows it: struct_size is ctypes.sizeof(_Problem), this
    binding's own size (conv2d_problem_init is inline in the header, not in the library)."""
    _fields_ = ([("struct_size", ctypes.c_size_t)] +
                [(name, ctypes.c_int64) for name in PROBLEM_FIELDS] +
                [("has_bias", ctypes.c_int32), ("operation", ctypes.c_int64)])


class Error(RuntimeError):
    """A libconv2d call failed: `code` is the C ABI's error code, the message its reason."""

    def __init__(self, what, code, message):
        super().__init__(f"{what}: {message} (code {code})")
        self.code = code
        self.reason = message


_lib = None
_lib_lock = threading.Lock()


def library_path():
    return os.environ.get("CONV2D_LIB") or os.path.join(os.path.dirname(__file__), "lib",
                                                        "libconv2d.so")


def lib():
    """The loaded library, its prototypes declared (loaded on first use)."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                l = ctypes.CDLL(library_path())
                vp, i64, sz = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t
                l.conv2d_plan_create.argtypes = [i64] * 7 + [ctypes.c_char_p, ctypes.POINTER(vp)]
                l.conv2d_plan_create_ex.argtypes = [ctypes.POINTER(_Problem), ctypes.c_char_p,
                                                    ctypes.POINTER(vp)]
                l.conv2d_plan_workspace_size.argtypes = [vp, ctypes.POINTER(sz)]
                l.conv2d_plan_run.argtypes = [vp, vp, vp, vp, vp, sz, vp]
                l.conv2d_plan_run_ex.argtypes = [vp, vp, vp, vp, vp, vp, sz, vp]
                l.conv2d_plan_run_dgrad.argtypes = [vp, vp, vp, vp, vp, sz, vp]
                l.conv2d_plan_run_wgrad.argtypes = [vp, vp, vp, vp, vp, vp, sz, vp]
                l.conv2d_plan_destroy.argtypes = [vp]
                l.conv2d_plan_destroy.restype = None
                l.conv2d_plan_algorithm.argtypes = [vp]
                l.conv2d_plan_algorithm.restype = ctypes.c_char_p
                l.conv2d_algorithm_name.argtypes = [ctypes.c_int]
                l.conv2d_algorithm_name.restype = ctypes.c_char_p
                l.conv2d_last_error.restype = ctypes.c_char_p
                _lib = l
    return _lib


def last_error():
    return lib().conv2d_last_error().decode()


def algorithms():
    """The registered algorithm names (any of them, or "auto", may be $CONV2D_ALGORITHM)."""
    l = lib()
    return [l.conv2d_algorithm_name(i).decode() for i in range(l.conv2d_algorithm_count())]


class Plan:
    """One conv2d_plan: made once per (problem, algorithm, device), run many times. Plans live
    until the process exits: destroying them at interpreter teardown could race the CUDA
    context's own. A plan is safe to run from several threads and streams at once, each call
    with its own workspace."""
    __slots__ = ("handle", "workspace_bytes", "algorithm")

    def __init__(self, fields, has_bias, algorithm, operation=FPROP):
        """operation: FPROP (has_bias: the call takes a bias), DGRAD (no bias) or WGRAD
        (has_bias: the call writes db as well as dw)."""
        l, handle = lib(), ctypes.c_void_p()
        p = _Problem()  # zeroed by ctypes, padding included
        p.struct_size = ctypes.sizeof(_Problem)
        for name, value in zip(PROBLEM_FIELDS, fields):
            setattr(p, name, value)
        p.has_bias = 1 if has_bias else 0
        p.operation = operation
        rc = l.conv2d_plan_create_ex(ctypes.byref(p), algorithm.encode(), ctypes.byref(handle))
        if rc != 0:
            raise Error(f"conv2d_plan_create_ex({dict(zip(PROBLEM_FIELDS, fields))}, "
                        f"has_bias={bool(has_bias)}, operation={operation}, {algorithm!r})", rc,
                        last_error())
        size = ctypes.c_size_t()
        rc = l.conv2d_plan_workspace_size(handle, ctypes.byref(size))
        if rc != 0:
            message = last_error()
            l.conv2d_plan_destroy(handle)
            raise Error("conv2d_plan_workspace_size", rc, message)
        self.handle = handle.value
        self.workspace_bytes = size.value
        self.algorithm = l.conv2d_plan_algorithm(handle).decode()


def run_function(operation=FPROP):
    """The operation's run: conv2d_plan_run_ex(plan, x, w, bias, y, ...), or
    conv2d_plan_run_dgrad(plan, dy, w, dx, ...), or conv2d_plan_run_wgrad(plan, x, dy, dw, db,
    ...), each ending (workspace, workspace_bytes, stream) and returning an error code."""
    l = lib()
    return (l.conv2d_plan_run_ex, l.conv2d_plan_run_dgrad, l.conv2d_plan_run_wgrad)[operation]


def device_status():
    """"ok" when the library can make a plan on the current CUDA device, else its reason (e.g.
    "no CUDA device"). Makes one tiny plan."""
    try:
        plan = Plan((1, 1, 1, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1), False, "auto")
    except Error as e:
        return e.reason
    lib().conv2d_plan_destroy(ctypes.c_void_p(plan.handle))
    return "ok"


# F.conv2d's argument rules, torch-free.

def pair(v, name):
    """An int or a sequence of one or two ints (as F.conv2d takes them) as a pair."""
    if isinstance(v, bool) or not isinstance(v, (int, tuple, list)):
        raise TypeError(f"conv2d: {name} must be an int or a pair of ints, got {v!r}")
    if isinstance(v, int):
        return (v, v)
    if len(v) not in (1, 2) or any(isinstance(e, bool) or not isinstance(e, int) for e in v):
        raise ValueError(f"conv2d: {name} must be an int or a pair of ints, got {v!r}")
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def geometry(w_shape, stride, padding, dilation, groups):
    """F.conv2d's stride, padding, dilation and groups as ((sh, sw), (top, bottom, left, right),
    (dh, dw), groups), checked as F.conv2d checks them (ValueError, TypeError).

    padding: an int or a pair (top = bottom, left = right), "valid" (none) or "same" (stride 1
    only; the output as large as the input): F.conv2d pads each dimension by
    total = dilation * (k - 1), total // 2 before and the rest after, so an odd total puts the
    extra row at the bottom and the extra column at the right (PyTorch's
    aten/src/ATen/native/Convolution.cpp, _convolution_mode with padding "same").
    """
    kh, kw = w_shape[2], w_shape[3]
    sh, sw = pair(stride, "stride")
    dh, dw = pair(dilation, "dilation")
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
            pad = (0, 0, 0, 0)
        elif padding == "same":
            if (sh, sw) != (1, 1):
                raise ValueError("conv2d: padding='same' is not supported for strided "
                                 "convolutions")
            th, tw = dh * (kh - 1), dw * (kw - 1)
            pad = (th // 2, th - th // 2, tw // 2, tw - tw // 2)
        else:
            raise ValueError(f"conv2d: invalid padding string {padding!r}, should be one of "
                             f"'valid', 'same'")
    else:
        ph, pw = pair(padding, "padding")
        if ph < 0 or pw < 0:
            raise ValueError(f"conv2d: negative padding is not supported, got {(ph, pw)}")
        pad = (ph, ph, pw, pw)
    return (sh, sw), pad, (dh, dw), groups


def out_size(n, before, after, dilation, k, stride):
    """F.conv2d's output length along one dimension (also for the op's fake implementation,
    where n may be a symbolic size)."""
    return (n + before + after - dilation * (k - 1) - 1) // stride + 1


def per_side_geometry(stride, padding, dilation, groups):
    """The op's own form (stride and dilation pairs, padding (top, bottom, left, right), groups),
    checked as geometry() checks F.conv2d's: for calls of torch.ops.conv2d.conv2d itself."""
    def ints(v, n, name):
        v = tuple(v) if isinstance(v, (list, tuple)) else v
        if (not isinstance(v, tuple) or len(v) != n or
                any(isinstance(e, bool) or not isinstance(e, int) for e in v)):
            raise TypeError(f"conv2d: {name} must be {n} ints, got {v!r}")
        return v
    stride, padding = ints(stride, 2, "stride"), ints(padding, 4, "padding")
    dilation = ints(dilation, 2, "dilation")
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError(f"conv2d: groups must be an int, got {groups!r}")
    if min(stride) <= 0 or min(dilation) <= 0 or groups <= 0 or min(padding) < 0:
        raise ValueError(f"conv2d: stride {stride}, dilation {dilation} and groups {groups} "
                         f"must be positive and padding {padding} non-negative")
    return stride, padding, dilation, groups


def problem(x_shape, w_shape, stride, pad, dilation, groups):
    """The conv2d_problem fields (a tuple in PROBLEM_FIELDS' order) and the output's (H, W) for
    x_shape = (B, Cin, H, W) and w_shape = (Cout, Cin / groups, Kh, Kw) under a geometry()
    result; ValueError where F.conv2d refuses."""
    (b, c, h, wd), (o, cg, kh, kw) = x_shape, w_shape
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = stride, pad, dilation
    for name, v in (("stride", sh), ("stride", sw), ("padding", pt), ("padding", pb),
                    ("padding", pl), ("padding", pr), ("dilation", dh), ("dilation", dw),
                    ("groups", groups)):
        if v >= _INT32_LIMIT:  # the descriptor's int64 would wrap, the library refuses past 2^31
            raise ValueError(f"conv2d: {name} {v} is out of range (at most {_INT32_LIMIT - 1})")
    if c % groups or o % groups:
        raise ValueError(f"conv2d: groups = {groups} must divide the input channels ({c}) and "
                         f"the output channels ({o})")
    if cg * groups != c:
        raise ValueError(f"conv2d: weight {tuple(w_shape)} with groups = {groups} expects "
                         f"{cg * groups} input channels, the input has {c}")
    oh, ow = out_size(h, pt, pb, dh, kh, sh), out_size(wd, pl, pr, dw, kw, sw)
    if oh <= 0 or ow <= 0:
        raise ValueError(f"conv2d: the kernel {kh}x{kw} (dilation {(dh, dw)}) is larger than "
                         f"the padded input {h + pt + pb}x{wd + pl + pr}: output size "
                         f"{oh}x{ow} is too small")
    return (b, c, o, h, wd, kh, kw, pt, pb, pl, pr, sh, sw, dh, dw, groups), (oh, ow)
