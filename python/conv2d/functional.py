"""conv2d(x, w, bias, stride, padding, dilation, groups): torch.nn.functional.conv2d through
libconv2d, registered as the PyTorch custom op conv2d::conv2d.

Two ways in, one kernel call:
- the op (torch.library.custom_op), with a fake implementation (shapes for torch.compile,
  torch.export and meta tensors) and an autograd formula: the library's dgrad and wgrad
  through conv2d.grad's ops, each only where a gradient is asked for;
  taken whenever torch.compile traces, a tensor needs a gradient, or a tensor subclass or a
  dispatch mode (FakeTensor, functorch, make_fx) is in play;
- otherwise the direct path: one dictionary lookup per call signature, y from PyTorch's caching
  allocator, the workspace (if any) as a raw block of it on the current stream, one call of the
  library, which enqueues the call's kernels as one CUDA graph launch where it can. The op's
  Python dispatch alone would cost more than the whole call (docs/PERF.md, rounds 90-93).
  Where the package's fast path (python/fast_path.cc, the module _fast_torch<major>_<minor>)
  was built for the running PyTorch and Python, it does the rest in C++ after the lookup, for
  the plain case (contiguous tensors; an `out` of y's shape and kind), and once a signature has
  run so, its entry conv2d does the whole call (the dispatcher test and the lookup too) before
  any Python here; otherwise, or with $CONV2D_FAST_PATH=0, Python does it and calls the library
  by ctypes.
Both are safe under CUDA graph capture (no synchronisation, no allocation outside PyTorch's
allocator) once the plan exists: a plan is made on the first call of a signature, which must be
outside capture (a warm-up call, as CUDA graphs need anyway); a first call during capture
raises and leaves the capture intact.
"""
import ctypes
import importlib
import os
import threading
import types
import warnings
from typing import List, Optional

import torch

from . import _native

_ALGORITHM = os.environ.get("CONV2D_ALGORITHM", "auto")
# Eager training through _Train (below) rather than the op; 0: through the op, as compiled code.
_EAGER_TRAIN = os.environ.get("CONV2D_EAGER_TRAIN", "1") != "0"
# The backward's (dgrad, wgrad; conv2d.grad): auto unless named, since an algorithm named for
# the forward may compute neither.
_BACKWARD_ALGORITHM = os.environ.get("CONV2D_BACKWARD_ALGORITHM", "auto")
_F32 = torch.float32
_current_stream = torch._C._cuda_getCurrentRawStream
_current_device = torch._C._cuda_getDevice
_increment_version = torch.autograd.graph.increment_version
_empty_strided = torch.empty_strided
# The workspace as a raw block of the caching allocator on the call's stream: 0.7 us where a
# uint8 tensor took 1.9 (docs/PERF.md, round 93); through the public wrappers (the same
# allocator, more Python) where these private entry points are missing.
_raw_alloc = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_alloc", None) or (
    lambda nbytes, stream: torch.cuda.caching_allocator_alloc(nbytes, stream=stream))
_raw_delete = (getattr(torch._C, "_cuda_cudaCachingAllocator_raw_delete", None) or
               torch.cuda.caching_allocator_delete)
# The kernels read x, w and bias while they write y: out= may not share their memory (a view of
# the input as out would be read after it was partly written: a wrong result, not an error).
_OUT_OVERLAP = ("conv2d: out shares memory with the input, weight or bias; an in-place "
                "convolution is not supported (give out= memory of its own)")
_OUT_GRAD = ("conv2d(): functions with out=... arguments don't support automatic "
             "differentiation, but one of the arguments requires grad")


class _Call:
    """What every call of one signature (shapes, dtypes, devices, geometry, operation) needs,
    made once. op: the forward (_native.FPROP), or the backward's DGRAD or WGRAD (conv2d.grad),
    whose has_bias says whether the call writes db."""
    __slots__ = ("out_shape", "out_strides", "fields", "has_bias", "device", "index", "plan",
                 "run", "kind", "fast", "op", "x_shape", "w_shape", "grads", "train",
                 "op_known")

    def __init__(self, x_shape, w_shape, has_bias, device, stride, pad, dilation, groups,
                 op=_native.FPROP):
        unbatched = len(x_shape) == 3
        x4 = (1, *x_shape) if unbatched else tuple(x_shape)
        self.fields, (oh, ow) = _native.problem(x4, tuple(w_shape), stride, pad, dilation, groups)
        b, c, o = self.fields[:3]
        self.out_shape = (o, oh, ow) if unbatched else (b, o, oh, ow)
        self.out_strides = (oh * ow, ow, 1) if unbatched else (o * oh * ow, oh * ow, ow, 1)
        self.has_bias = has_bias
        self.device, self.index = device, device.index
        self.op = op
        self.x_shape, self.w_shape = tuple(x_shape), tuple(w_shape)
        self.grads = {}  # a forward's backward _Calls, (op, has_bias) -> _Call (conv2d.grad)
        self.train = None  # the fast path's TrainCall once made, False where there is none
        self.op_known = False  # whether the op's C++ kernel has this call (_remember_op)
        self.plan = None
        self.run = None  # (plan handle, workspace bytes), published together once made
        self.fast = None  # the fast path's Call for the plan, once made (where it loads)
        # "empty": nothing to compute; "bias": no input channels, y = bias (or 0); "run". The
        # backward with a zero size anywhere: "empty" (conv2d.grad computes it without a plan).
        if op != _native.FPROP:
            self.kind = "run" if b and c and o else "empty"
        else:
            self.kind = "empty" if b == 0 or o == 0 else "bias" if c == 0 else "run"

    def make_plan(self):
        """Makes the plan once, whichever thread asks first; returns self.run."""
        with _plan_lock:
            if self.run is None:
                self._make_plan()
        return self.run

    def _make_plan(self):
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                "conv2d: the first call of a problem made its plan during CUDA graph capture; "
                "run it once before capturing (a warm-up call), as CUDA graphs require")
        algorithm = _ALGORITHM if self.op == _native.FPROP else _BACKWARD_ALGORITHM
        with torch.cuda.device(self.index):
            try:
                plan = _native.Plan(self.fields, self.has_bias, algorithm, self.op)
            except _native.Error as e:
                if e.code != _native.CONV2D_UNIMPLEMENTED or algorithm != "auto":
                    raise
                # No algorithm auto may pick takes this geometry: the library's direct oracle
                # (every geometry, fp64 accumulation; slow) rather than no result.
                plan = _native.Plan(self.fields, self.has_bias, "direct", self.op)
                warnings.warn(f"conv2d: no fast algorithm takes this problem ({e.reason}); "
                              f"running the 'direct' oracle", RuntimeWarning, stacklevel=4)
        global _run_ex, _fast, _fast_conv2d
        if _run_ex is None:  # before any plan is published: a call that sees one can run it
            _run_ex = _native.run_function()
            _fast = _load_fast_path()
            _fast_conv2d = None if _fast is None else _fast.conv2d
        self.plan = plan
        self.run = (plan.handle, plan.workspace_bytes)
        if _fast is not None and self.op == _native.FPROP:
            self.fast = _fast.Call(plan.handle, plan.workspace_bytes, self.index,
                                   list(self.out_shape))


_calls = {}
_calls_lock = threading.Lock()
_plan_lock = threading.Lock()
_run_ex = None
_fast = None
# The fast path's own entry (conv2d.conv2d's whole call, for the signatures it remembers), once
# the fast path is loaded.
_fast_conv2d = None


def _run_error(rc):
    return _native.Error("conv2d_plan_run_ex", rc, _native.last_error())


def _load_fast_path():
    """The fast path's module, initialised with the library ctypes loaded, or None: where
    $CONV2D_FAST_PATH is 0, where the wheel has none for this Python and PyTorch minor version,
    and under any PyTorch but the release it was compiled against (a C++ extension shares
    PyTorch's inline code and structure layouts, which another release, a pre-release or a
    source build of the same version may change; its module is loaded, but not used)."""
    if os.environ.get("CONV2D_FAST_PATH", "1") == "0":
        return None
    release = torch.__version__.split("+")[0]  # "2.11.0+cu130" -> "2.11.0"
    major, minor = release.split(".")[:2]
    try:
        module = importlib.import_module(f"._fast_torch{major}_{minor}", __package__)
    except ImportError:
        return None  # none built for this Python and PyTorch
    except Exception as e:  # noqa: BLE001  (a broken module: ctypes serves every call)
        warnings.warn(f"conv2d: the fast path did not load ({e!r}); calls go through ctypes",
                      RuntimeWarning, stacklevel=2)
        return None
    if module.TORCH_VERSION != release:
        return None
    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value
    module.init(address(_run_ex), _run_error, address(_native.run_function(_native.DGRAD)),
                address(_native.run_function(_native.WGRAD)),
                address(_native.lib().conv2d_last_error), _train_double_backward)
    if hasattr(module, "register_ops"):  # the ops' kernels in C++ from now (fast_path_ops.cc)
        module.register_ops()
    return module


def _remember_op(call, out_shape, *args):
    """After the op `call.op`'s Python kernel first ran `call` with these arguments (the op's
    own, in its schema's order): the fast path's C++ kernel of the op runs them from now."""
    if call.op_known or _fast is None or call.run is None or not hasattr(_fast, "remember_op"):
        return
    handle, nbytes = call.run
    _fast.remember_op(call.op, handle, nbytes, call.index, list(out_shape), *args)
    call.op_known = True


def fast_path():
    """The fast path's module name once calls take it (after a first plan), else None."""
    return None if _fast is None else _fast.__name__


def _check_tensors(x, w, bias):
    for name, t in (("input", x), ("weight", w), ("bias", bias)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"conv2d: {name} must be a tensor, got {type(t).__name__}")
        if t.dtype != _F32 or not (t.is_cuda or t.is_meta):
            raise TypeError(f"conv2d: {name} must be a float32 CUDA tensor, got {t.dtype} on "
                            f"{t.device}")
        if t.device != x.device:
            raise ValueError(f"conv2d: {name} is on {t.device}, the input on {x.device}")
    if x.dim() not in (3, 4) or w.dim() != 4:
        raise ValueError(f"conv2d: input must be (B, C, H, W) or (C, H, W) and weight "
                         f"(Cout, C / groups, Kh, Kw); got {tuple(x.shape)} and "
                         f"{tuple(w.shape)}")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != w.shape[0]):
        raise ValueError(f"conv2d: bias must be ({w.shape[0]},), got {tuple(bias.shape)}")


def _call_for(x, w, bias, stride, padding, dilation, groups, per_side):
    """The cached _Call of this signature, made (and checked as F.conv2d checks) on a miss.
    per_side: padding is (top, bottom, left, right) and stride, dilation pairs (the op's form).
    The key holds the arguments' types as well as their values (1 == 1.0 == True), so that a
    value F.conv2d refuses is refused on every call, not only on the first."""
    # Devices as (is_cuda, ordinal), cheaper than torch.device objects; is_cuda because an
    # ordinal alone does not tell a CUDA device from another accelerator's (or CPU from meta).
    key = (x.shape, x.dtype, x.is_cuda, x.get_device(), w.shape, w.dtype, w.is_cuda,
           w.get_device(),
           None if bias is None else (bias.shape, bias.dtype, bias.is_cuda, bias.get_device()),
           stride, padding, dilation, groups, type(stride), type(padding), type(dilation),
           type(groups), per_side)
    try:
        return _calls[key]
    except TypeError:  # an unhashable argument: lists as tuples, anything else refused below
        if any(isinstance(v, list) for v in (stride, padding, dilation)):
            t = lambda v: tuple(v) if isinstance(v, list) else v
            return _call_for(x, w, bias, t(stride), t(padding), t(dilation), groups, per_side)
        _native.geometry(w.shape, stride, padding, dilation, groups)  # raises TypeError
        raise TypeError(f"conv2d: unsupported argument types: stride {type(stride).__name__}, "
                        f"padding {type(padding).__name__}, dilation "
                        f"{type(dilation).__name__}, groups {type(groups).__name__}")
    except KeyError:
        pass
    _check_tensors(x, w, bias)
    if per_side:
        geometry = _native.per_side_geometry(stride, padding, dilation, groups)
    else:
        geometry = _native.geometry(w.shape, stride, padding, dilation, groups)
    call = _Call(x.shape, w.shape, bias is not None, x.device, *geometry)
    with _calls_lock:
        return _calls.setdefault(key, call)


def _overlap(out, *inputs):
    """Whether out's memory overlaps that of any input (dense float32 tensors, or None)."""
    o0 = out.data_ptr()
    o1 = o0 + 4 * out.numel()
    for t in inputs:
        if t is not None:
            t0 = t.data_ptr()
            if t0 < o1 and o0 < t0 + 4 * t.numel():
                return True
    return False


def _dense(t):
    """Dense memory holding t's values (negative views resolved)."""
    return t if t.is_contiguous() and not t.is_neg() else t.resolve_neg().contiguous()


def _enqueue(run, handle, ptrs, nbytes, index):
    """run(handle, *ptrs, workspace, nbytes, stream), a library call of any operation, on the
    current stream of device `index` (made current for the call if it is not), with a
    workspace of nbytes from PyTorch's caching allocator on that stream: a call on another stream
    or thread gets its own, and it is not reused before this call's kernels are done. Freed only
    once the call is enqueued: freed earlier, its block could go to another allocation on this
    stream whose work is enqueued before ours. Under CUDA graph capture the allocator serves it
    from the graph's private pool, as it does tensors. Returns the library's error code."""
    if _current_device() != index:
        with torch.cuda.device(index):
            return _enqueue(run, handle, ptrs, nbytes, index)
    stream = _current_stream(index)
    if not nbytes:
        return run(handle, *ptrs, None, 0, stream)
    ws = _raw_alloc(nbytes, stream)
    try:
        return run(handle, *ptrs, ws, nbytes, stream)
    finally:
        _raw_delete(ws)


def _direct(x, w, bias, stride, padding, dilation, groups, per_side, out=None):
    """The call itself: y (or out) = conv2d(x, w, bias) on the current stream. The hot path of
    every call outside the dispatcher: the signature lookup, then the fast path's one C++ call
    where it loaded and takes the case; else attribute reads, two allocations and one ctypes
    call (docs/PERF.md, rounds 90-94, measure each)."""
    call = _call_for(x, w, bias, stride, padding, dilation, groups, per_side)
    return _direct_call(call, x, w, bias, (stride, padding, dilation, groups), per_side, out)


def _direct_call(call, x, w, bias, args, per_side, out=None):
    """_direct after its lookup (args: conv2d's stride, padding, dilation, groups as given)."""
    fast = call.fast
    if fast is not None:
        y = fast(x, w, bias, out)
        if y is not None:
            if not per_side:  # conv2d's next call with these arguments: the C++ entry's alone
                _fast.remember(fast, x, w, bias, *args)
            return y
    if out is not None:
        if out.requires_grad and torch.is_grad_enabled():
            raise RuntimeError(_OUT_GRAD)
        if (out.shape != call.out_shape or out.dtype != _F32 or not out.is_cuda or
                out.get_device() != call.index):
            raise ValueError(f"conv2d: out must be float32 {call.out_shape} on {call.device}, "
                             f"got {out.dtype} {tuple(out.shape)} on {out.device}")
        if not out.is_contiguous() or out.is_neg():
            out.copy_(_direct_call(call, x, w, bias, args, per_side))
            return out
        y = out
    else:
        y = _empty_strided(call.out_shape, call.out_strides, dtype=_F32, device=call.device)
    run = call.run
    if run is None:
        if call.kind != "run":
            if call.kind == "bias":
                y.zero_()
                if bias is not None:
                    y += bias.view(-1, 1, 1)
            return y
        run = call.make_plan()
    x, w = _dense(x), _dense(w)
    bias_ptr = None
    if bias is not None:
        bias = _dense(bias)
        bias_ptr = bias.data_ptr()
    if y is out and _overlap(out, x, w, bias):
        raise ValueError(_OUT_OVERLAP)
    handle, nbytes = run
    rc = _enqueue(_run_ex, handle, (x.data_ptr(), w.data_ptr(), bias_ptr, y.data_ptr()), nbytes,
                  call.index)
    if rc != 0:
        raise _run_error(rc)
    if y is out:  # written behind autograd's back: what saved it for a backward must know
        _increment_version(out)
    return y


# The custom op: padding per side (top, bottom, left, right), stride and dilation as pairs.

@torch.library.custom_op("conv2d::conv2d", mutates_args=(), device_types="cuda")
def conv2d_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
              stride: List[int], padding: List[int], dilation: List[int],
              groups: int) -> torch.Tensor:
    """x (B, Cin, H, W), weight (Cout, Cin / groups, Kh, Kw), bias (Cout,) or None."""
    geometry = (tuple(stride), tuple(padding), tuple(dilation), groups)
    call = _call_for(x, weight, bias, *geometry, True)
    y = _direct_call(call, x, weight, bias, geometry, True)
    _remember_op(call, call.out_shape, x, weight, bias, stride, padding, dilation, groups)
    return y


@conv2d_op.register_fake
def _(x, weight, bias, stride, padding, dilation, groups):
    torch._check(x.dim() == 4 and weight.dim() == 4,
                 lambda: "conv2d::conv2d takes a (B, C, H, W) input and an OIHW weight")
    torch._check(x.dtype == _F32 and weight.dtype == _F32,
                 lambda: "conv2d::conv2d takes float32 tensors")
    _native.per_side_geometry(stride, padding, dilation, groups)
    kh, kw = weight.shape[2], weight.shape[3]
    oh = _native.out_size(x.shape[2], padding[0], padding[1], dilation[0], kh, stride[0])
    ow = _native.out_size(x.shape[3], padding[2], padding[3], dilation[1], kw, stride[1])
    return x.new_empty((x.shape[0], weight.shape[0], oh, ow))


def _setup_context(ctx, inputs, output):
    x, weight, bias, stride, padding, dilation, groups = inputs
    ctx.save_for_backward(x, weight)
    ctx.has_bias = bias is not None
    ctx.geometry = (list(stride), list(padding), list(dilation), groups)


def _gradients(ctx, grad, dgrad, wgrad):
    """The backward's gradients, each only where it is asked for: dx = dgrad(grad, w, x) for an
    input that needs one, (dw, db) = wgrad(x, grad, w, bias_wanted) for a weight that does (db
    in the same wgrad call); a bias needing a gradient whose weight does not gets dy's sum in
    float64."""
    x, weight = ctx.saved_tensors
    want_x, want_w, want_b = ctx.needs_input_grad[:3]
    want_b = want_b and ctx.has_bias
    gx = dgrad(grad, weight, x) if want_x else None
    gw = gb = None
    if want_w:
        gw, gb = wgrad(x, grad, weight, want_b)
    elif want_b:
        gb = grad.sum((0, 2, 3), dtype=torch.float64).to(_F32)
    return gx, gw, gb, None, None, None, None


def _backward(ctx, grad):
    """The op's backward: the library's, through conv2d.grad's ops (which record their own
    gradients: double backward)."""
    geometry = ctx.geometry
    return _gradients(ctx, grad, lambda dy, w, x: _grad.conv2d_input_grad_op(
        dy, w, list(x.shape), *geometry), lambda x, dy, w, bias: _grad.weight_grad_pair(
            _grad.conv2d_weight_grad_op(x, dy, list(w.shape), *geometry, bias), bias))


conv2d_op.register_autograd(_backward, setup_context=_setup_context)
from . import grad as _grad  # noqa: E402  (its ops call back into this module's _Call)

def _per_side(call):
    """The op's geometry lists (stride, padding per side, dilation, groups) of a _Call."""
    f = call.fields
    return [f[11], f[12]], list(f[7:11]), [f[13], f[14]], f[15]


class _Train(torch.autograd.Function):
    """Eager training's path (a gradient to record and nothing else in play: no mode, subclass,
    functorch transform or forward AD): the direct path's forward, the library's backward called
    straight from the autograd node. The custom op's Python dispatch took ~3 of its own
    microseconds and more in its autograd wrapper on every layer, forward and backward; on
    EfficientNet-B0's 81 small layers that host time outran the GPU (issue 42: converted 0.66x
    the plain model's step on an H100). Double backward (create_graph) goes through
    conv2d.grad's ops, which record their own gradients."""

    @staticmethod
    def forward(ctx, x, w, bias, stride, padding, dilation, groups):
        call = _call_for(x, w, bias, stride, padding, dilation, groups, False)
        ctx.save_for_backward(x, w)
        ctx.has_bias = bias is not None
        ctx.call = call
        return _direct_call(call, x, w, bias, (stride, padding, dilation, groups), False)

    @staticmethod
    def backward(ctx, grad):
        if torch.is_grad_enabled():  # create_graph: the ops, whose own gradients autograd records
            ctx.geometry = _per_side(ctx.call)
            return _backward(ctx, grad)
        call = ctx.call
        return _gradients(ctx, grad, lambda dy, w, x: _grad.input_grad_of(call, dy, w),
                          lambda x, dy, w, bias: _grad.weight_grad_of(call, x, dy, bias))


_dispatch_stack = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)
_function_mode = getattr(torch._C, "_is_torch_function_mode_enabled", lambda: False)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_forward_ad = torch.autograd.forward_ad
# Plain tensors: a Parameter is one (a converted layer's weight), a subclass is not.
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _needs_op(x, w, bias, out=None):
    """Whether this call must go through the dispatcher (autograd, forward-mode AD, functorch
    transforms, subclasses, modes, meta tensors) or be refused there (non-tensors, tensors on
    the CPU)."""
    if type(x) not in _PLAIN or type(w) not in _PLAIN or (
            bias is not None and type(bias) not in _PLAIN) or not x.is_cuda or (
            out is not None and type(out) not in _PLAIN):
        return True
    return _context_needs_op(x, w, bias)


def _make_train(call):
    """The fast path's TrainCall of a forward _Call (its plans and its dgrad's and wgrad's, all
    made now: the C++ backward runs without Python), or False where there is none (no fast
    path, or nothing to compute)."""
    if call.kind != "run":
        call.train = False
        return False
    call.make_plan()
    if _fast is None or not hasattr(_fast, "TrainCall"):
        call.train = False
        return False
    runs = [call.run]
    try:
        for op, bias in ((_native.DGRAD, False), (_native.WGRAD, False), (_native.WGRAD, True)):
            if bias and not call.has_bias:
                runs.append((0, 0))
                continue
            back = _grad._backward_call(call, op, bias)
            runs.append(back.run if back.run is not None else back.make_plan())
    except _native.Error:  # a backward the library refuses: _Train's path raises it if asked
        call.train = False
        return False
    call.train = _fast.TrainCall([r[0] for r in runs], [r[1] for r in runs], call.index,
                                 list(call.x_shape), list(call.w_shape), list(call.out_shape),
                                 _per_side(call))
    return call.train


def _train_node(call):
    """The fast path's TrainCall for a forward _Call (made on its first training call), or
    False: _Train's Python node then takes the call."""
    return _make_train(call) if call.train is None else call.train


def _train_double_backward(x, w, has_bias, grad, geometry, needs):
    """The fast path's training node under create_graph: the op's backward (conv2d.grad's ops,
    which record their own gradients: double backward)."""
    ctx = types.SimpleNamespace(saved_tensors=(x, w), needs_input_grad=needs, has_bias=has_bias,
                                geometry=geometry)
    return _backward(ctx, grad)[:3]


def _trains_eagerly(x, w, bias, out):
    """Whether _Train takes this call: plain CUDA tensors needing a gradient, no out=, and
    nothing in play that needs the dispatcher (a mode, a functorch transform, forward AD)."""
    return (out is None and torch.is_grad_enabled() and type(x) in _PLAIN and type(w) in _PLAIN
            and (bias is None or type(bias) in _PLAIN) and x.is_cuda and x.dim() == 4
            and (x.requires_grad or w.requires_grad or (bias is not None and bias.requires_grad))
            and not (_dispatch_stack() or _function_mode() or _functorch_active()
                     or _forward_ad._current_level >= 0))


def _context_needs_op(x, w, bias):
    """_needs_op's verdict beyond the tensors' types and devices: a gradient to record, a mode,
    a functorch transform, forward-mode AD (the fast path's conv2d entry decides the same in
    C++: python/tests/test_fast_path_loading.py holds the two together)."""
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or (
            bias is not None and bias.requires_grad)):
        return True
    return (bool(_dispatch_stack()) or _function_mode() or _functorch_active()
            or _forward_ad._current_level >= 0)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, out=None):
    """torch.nn.functional.conv2d for float32 CUDA tensors, within the library's contract
    against float64 (|y - y64| <= 1e-3 + 1e-3 |y64| on every output).

    input (B, Cin, H, W) or unbatched (Cin, H, W); weight (Cout, Cin / groups, Kh, Kw); bias
    (Cout,) or None; stride, dilation: an int or a pair; padding: an int, a pair, "valid" or
    "same"; groups divides Cin and Cout. Returns a new contiguous tensor (B, Cout, out_h, out_w)
    (unbatched: (Cout, out_h, out_w)) computed on the current stream; out=, a float32 tensor of
    that shape, gets the result instead. Raises TypeError or ValueError where F.conv2d would,
    for tensors that are not float32 on a CUDA device (conv2d.nn.Conv2d falls back to PyTorch
    for those), and for an out= sharing memory with input, weight or bias; nothing is written
    then.
    """
    if not torch.compiler.is_compiling():
        if _fast_conv2d is not None:  # the whole call in C++ for a signature run before
            y = _fast_conv2d(input, weight, bias, stride, padding, dilation, groups, out)
            if y is not None:
                return y
        if not _needs_op(input, weight, bias, out):
            return _direct(input, weight, bias, stride, padding, dilation, groups, False, out)
        if _EAGER_TRAIN and _trains_eagerly(input, weight, bias, out):
            call = _call_for(input, weight, bias, stride, padding, dilation, groups, False)
            train = _train_node(call)
            if train:
                y = train(input, weight, bias)
                if y is not None:  # plain tensors: the C++ entry takes this signature from now
                    _fast.remember(train, input, weight, bias, stride, padding, dilation, groups)
                    return y
            return _Train.apply(input, weight, bias, stride, padding, dilation, groups)
    _check_tensors(input, weight, bias)
    if out is not None and not isinstance(out, torch.Tensor):
        raise TypeError(f"conv2d: out must be a tensor, got {type(out).__name__}")
    if out is not None and torch.is_grad_enabled() and (
            input.requires_grad or weight.requires_grad or out.requires_grad or
            (bias is not None and bias.requires_grad)):
        raise RuntimeError(_OUT_GRAD)
    geometry = _native.geometry(weight.shape, stride, padding, dilation, groups)
    unbatched = input.dim() == 3
    x = input.unsqueeze(0) if unbatched else input
    _native.problem(tuple(x.shape), tuple(weight.shape), *geometry)  # F.conv2d's refusals
    (sh, sw), pad, (dh, dw), g = geometry
    y = conv2d_op(x, weight, bias, [sh, sw], list(pad), [dh, dw], g)
    if unbatched:
        y = y.squeeze(0)
    if out is not None:
        if out.shape != y.shape or out.dtype != _F32 or out.device != y.device:
            raise ValueError(f"conv2d: out must be float32 {tuple(y.shape)} on {y.device}, "
                             f"got {out.dtype} {tuple(out.shape)} on {out.device}")
        return out.copy_(y)
    return y


def plan_algorithm(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """The algorithm conv2d(...) with these arguments runs (its plan made if need be)."""
    call = _call_for(input, weight, bias, stride, padding, dilation, groups, False)
    if call.kind != "run":
        return None
    if call.run is None:
        call.make_plan()
    return call.plan.algorithm


def _one(v, name):
    """conv1d's int or sequence of one int."""
    if isinstance(v, (tuple, list)) and len(v) == 1:
        v = v[0]
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"conv1d: {name} must be an int or a sequence of one int, got {v!r}")
    return v


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv1d for float32 CUDA tensors: conv2d of height 1 (input
    (B, Cin, L) or unbatched (Cin, L), weight (Cout, Cin / groups, K)), within the same bar,
    with its gradients through the library."""
    for name, t in (("input", input), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"conv1d: {name} must be a tensor, got {type(t).__name__}")
    if input.dim() not in (2, 3) or weight.dim() != 3:
        raise ValueError(f"conv1d: input must be (B, C, L) or (C, L) and weight (Cout, C / groups, "
                         f"K); got {tuple(input.shape)} and {tuple(weight.shape)}")
    pad = padding if isinstance(padding, str) else (0, _one(padding, "padding"))
    y = conv2d(input.unsqueeze(-2), weight.unsqueeze(2), bias, (1, _one(stride, "stride")), pad,
               (1, _one(dilation, "dilation")), groups)
    return y.squeeze(-2)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """torch.nn.functional.conv_transpose2d for float32 CUDA tensors (its argument order):
    the data gradient of the convolution whose output is `input`, which the library computes
    (conv2d.grad's input-gradient op, so its own gradients come from the library too), plus the
    bias. input (B, Cin, H, W) or unbatched; weight (Cin, Cout / groups, Kh, Kw); output
    (B, Cout, (H-1)*stride - 2*padding + dilation*(Kh-1) + output_padding + 1, ...)."""
    _check_tensors(input, weight, None)
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.dtype != _F32 or bias.device != input.device:
            raise TypeError(f"conv_transpose2d: bias must be a float32 tensor on {input.device}")
        if bias.dim() != 1 or bias.shape[0] != weight.shape[1] * groups:
            raise ValueError(f"conv_transpose2d: bias must be ({weight.shape[1] * groups},), "
                             f"got {tuple(bias.shape)}")
    unbatched = input.dim() == 3
    x = input.unsqueeze(0) if unbatched else input
    (sh, sw), (dh, dw) = _native.pair(stride, "stride"), _native.pair(dilation, "dilation")
    (ph, pw), (oph, opw) = _native.pair(padding, "padding"), _native.pair(output_padding,
                                                                          "output_padding")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
        raise ValueError(f"conv_transpose2d: groups must be a positive int, got {groups!r}")
    if min(sh, sw, dh, dw) <= 0 or min(ph, pw) < 0:
        raise ValueError(f"conv_transpose2d: stride {(sh, sw)} and dilation {(dh, dw)} must be "
                         f"positive and padding {(ph, pw)} non-negative")
    if not (0 <= oph < max(sh, dh) and 0 <= opw < max(sw, dw)):
        raise ValueError(f"conv_transpose2d: output padding {(oph, opw)} must be smaller than "
                         f"either stride {(sh, sw)} or dilation {(dh, dw)}")
    b, cin, h, wd = x.shape
    if weight.shape[0] != cin or cin % groups:
        raise ValueError(f"conv_transpose2d: weight {tuple(weight.shape)} with groups = {groups} "
                         f"expects {weight.shape[0]} input channels (a multiple of groups), the "
                         f"input has {cin}")
    kh, kw = weight.shape[2], weight.shape[3]
    # The convolution whose data gradient this is: x shaped as this output, less the rows of
    # output_padding past a stride (they receive no term: zeros, padded on below).
    full = [(h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1,
            (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1]
    extra = [oph - oph % sh, opw - opw % sw]
    size = [b, weight.shape[1] * groups, full[0] - extra[0], full[1] - extra[1]]
    if min(full) <= 0 or min(size[2:]) <= 0:
        raise ValueError(f"conv_transpose2d: the output size {tuple(full)} is not positive")
    y = _grad.conv2d_input_grad_op(x, weight, size, [sh, sw], [ph, ph, pw, pw], [dh, dw], groups)
    if extra[0] or extra[1]:
        y = torch.nn.functional.pad(y, (0, extra[1], 0, extra[0]))
    if bias is not None:
        y = y + bias.view(1, -1, 1, 1)
    return y.squeeze(0) if unbatched else y
