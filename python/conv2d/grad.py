"""conv2d.grad: the gradients of a convolution from the library, with torch.nn.grad's signatures.

    dx = conv2d.grad.conv2d_input(input_size, weight, grad_output, stride, padding, dilation,
                                  groups)
    dw = conv2d.grad.conv2d_weight(input, weight_size, grad_output, stride, padding, dilation,
                                   groups)

The same computations serve conv2d.conv2d's autograd (functional.py): its backward asks for
dx only when the input needs a gradient (not for a network's first layer), dw only when the
weight does (not for frozen weights), and db with dw in the library's one wgrad call. Each is
within |g - g64| <= 1e-3 + 1e-3 |g64| of float64 truth and bitwise the same on every call with
the same inputs (the library's backward has no atomics: conv/conv.h), so training under
torch.use_deterministic_algorithms(True) runs through it with nothing to fall back to.

Two custom ops carry them, so that torch.compile, torch.export and AOTAutograd see the backward
(fake implementations give the shapes): conv2d::conv2d_input_grad (dy, w -> dx) and
conv2d::conv2d_weight_grad (x, dy -> dw and db, db empty when not asked for). Both are linear in
each argument, and their own gradients (double backward) are convolutions of the same geometry:
for dx = dgrad(dy, w) and an incoming g (shaped as x), d/d(dy) = conv2d(g, w) and
d/dw = wgrad(g, dy); for (dw, db) = wgrad(x, dy) and incoming (gw, gb), d/dx = dgrad(dy, gw) and
d/d(dy) = conv2d(x, gw, bias=gb). So double backward runs through the library as well.
"""
import threading
from typing import List, Tuple

import torch

from . import _native
from . import functional as _f

__all__ = ["conv2d_input", "conv2d_weight"]

_F32 = torch.float32
_calls = {}
_calls_lock = threading.Lock()
_RUN = {}  # operation -> the library's run function, once loaded


def _call(op, x_shape, w_shape, has_bias, device, stride, pad, dilation, groups):
    """The cached functional._Call of a backward signature (per-side geometry)."""
    key = (op, tuple(x_shape), tuple(w_shape), has_bias, device.type, device.index, stride, pad,
           dilation, groups)
    call = _calls.get(key)
    if call is None:
        call = _f._Call(tuple(x_shape), tuple(w_shape), has_bias, device, stride, pad, dilation,
                        groups, op)
        with _calls_lock:
            call = _calls.setdefault(key, call)
    return call


def _enqueue(call, ptrs):
    """The library's run of call's operation (functional._enqueue: the current stream, a
    workspace from the caching allocator); a failure raises the library's error."""
    handle, nbytes = call.run if call.run is not None else call.make_plan()
    run = _RUN.get(call.op)
    if run is None:
        run = _RUN.setdefault(call.op, _native.run_function(call.op))
    rc = _f._enqueue(run, handle, ptrs, nbytes, call.index)
    if rc != 0:
        name = "conv2d_plan_run_dgrad" if call.op == _native.DGRAD else "conv2d_plan_run_wgrad"
        raise _native.Error(name, rc, _native.last_error())


def _check(**tensors):
    """Float32 4-D tensors on one CUDA device (TypeError, ValueError, as conv2d.conv2d)."""
    device = None
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"conv2d.grad: {name} must be a tensor, got {type(t).__name__}")
        if t.dtype != _F32 or not (t.is_cuda or t.is_meta):
            raise TypeError(f"conv2d.grad: {name} must be a float32 CUDA tensor, got {t.dtype} "
                            f"on {t.device}")
        if t.dim() != 4:
            raise ValueError(f"conv2d.grad: {name} must be 4-D, got {tuple(t.shape)}")
        if device is not None and t.device != device:
            raise ValueError(f"conv2d.grad: {name} is on {t.device}, the others on {device}")
        device = t.device


def _check_dy(call, grad_output):
    if tuple(grad_output.shape) != call.out_shape:
        raise ValueError(f"conv2d.grad: grad_output must be {call.out_shape} (the output's "
                         f"shape), got {tuple(grad_output.shape)}")


def _dgrad(call, dy, w):
    """dx of a dgrad _Call from dy (shaped as its output) and w: the one place a dgrad runs."""
    dx = _f._empty_strided(call.x_shape, _strides(call.x_shape), dtype=_F32,
                           device=call.device)
    if call.kind != "run":  # a zero size: no term reaches dx
        return dx.zero_()
    dy, w = _f._dense(dy), _f._dense(w)
    _enqueue(call, (dy.data_ptr(), w.data_ptr(), dx.data_ptr()))
    return dx


def _wgrad(call, x, dy):
    """(dw, db) of a wgrad _Call (db None unless call.has_bias): the one place a wgrad runs."""
    dw = _f._empty_strided(call.w_shape, _strides(call.w_shape), dtype=_F32, device=call.device)
    db = _f._empty_strided((call.w_shape[0],), (1,), dtype=_F32,
                           device=call.device) if call.has_bias else None
    if call.kind != "run":  # a zero size: dw has no terms; db is dy's sum (zeros if empty)
        dw.zero_()
        if db is not None:
            db.copy_(dy.sum((0, 2, 3), dtype=torch.float64))
        return dw, db
    x, dy = _f._dense(x), _f._dense(dy)
    _enqueue(call, (x.data_ptr(), dy.data_ptr(), dw.data_ptr(),
                    None if db is None else db.data_ptr()))
    return dw, db


def _input_grad(dy, w, input_size, stride, pad, dilation, groups):
    _check(grad_output=dy, weight=w)
    call = _call(_native.DGRAD, input_size, w.shape, False, dy.device, stride, pad, dilation,
                 groups)
    _check_dy(call, dy)
    dx = _dgrad(call, dy, w)
    _f._remember_op(call, call.x_shape, dy, w, input_size, stride, pad, dilation, groups)
    return dx


def _weight_grad(x, dy, weight_size, stride, pad, dilation, groups, bias):
    _check(input=x, grad_output=dy)
    call = _call(_native.WGRAD, x.shape, weight_size, bias, x.device, stride, pad, dilation,
                 groups)
    _check_dy(call, dy)
    dw, db = _wgrad(call, x, dy)
    _f._remember_op(call, call.w_shape, x, dy, weight_size, stride, pad, dilation, groups, bias)
    return dw, db if bias else dw.new_empty((0,))  # the op's schema: db empty when not asked


def weight_grad_pair(dw_db, bias):
    """The weight-gradient op's (dw, db) as autograd takes them: db None when not asked for."""
    return dw_db[0], dw_db[1] if bias else None


def _backward_call(fcall, op, has_bias):
    """The _Call of a forward _Call's dgrad or wgrad, kept on it (no key to build per call)."""
    call = fcall.grads.get((op, has_bias))
    if call is None:
        stride, pad, dilation, groups = _f._per_side(fcall)
        call = _call(op, fcall.x_shape, fcall.w_shape, has_bias, fcall.device, tuple(stride),
                     tuple(pad), tuple(dilation), groups)
        fcall.grads[(op, has_bias)] = call
    return call


def input_grad_of(fcall, dy, w):
    """dx of the forward call `fcall` (functional._Train's backward: dy from autograd, shaped as
    y and on its device; w the forward's), without the public entry's checks."""
    return _dgrad(_backward_call(fcall, _native.DGRAD, False), dy, w)


def weight_grad_of(fcall, x, dy, bias):
    """(dw, db or None) of the forward call `fcall`, as input_grad_of."""
    return _wgrad(_backward_call(fcall, _native.WGRAD, bias), x, dy)


def _strides(shape):
    b, c, h, w = shape
    return (c * h * w, h * w, w, 1)


# The ops: geometry per side, as conv2d::conv2d takes it (stride and dilation pairs, padding
# (top, bottom, left, right)).

@torch.library.custom_op("conv2d::conv2d_input_grad", mutates_args=(), device_types="cuda")
def conv2d_input_grad_op(grad_output: torch.Tensor, weight: torch.Tensor,
                         input_size: List[int], stride: List[int], padding: List[int],
                         dilation: List[int], groups: int) -> torch.Tensor:
    """dx (input_size) from grad_output (B, Cout, out_h, out_w) and weight."""
    return _input_grad(grad_output, weight, tuple(input_size), tuple(stride), tuple(padding),
                       tuple(dilation), groups)


@conv2d_input_grad_op.register_fake
def _(grad_output, weight, input_size, stride, padding, dilation, groups):
    torch._check(grad_output.dim() == 4 and weight.dim() == 4 and len(input_size) == 4,
                 lambda: "conv2d::conv2d_input_grad takes 4-D tensors and a 4-D input_size")
    _native.per_side_geometry(stride, padding, dilation, groups)
    return grad_output.new_empty(input_size)


@torch.library.custom_op("conv2d::conv2d_weight_grad", mutates_args=(), device_types="cuda")
def conv2d_weight_grad_op(input: torch.Tensor, grad_output: torch.Tensor,
                          weight_size: List[int], stride: List[int], padding: List[int],
                          dilation: List[int], groups: int,
                          bias: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """(dw (weight_size), db ((Cout,), or (0,) when bias is False)) from input and
    grad_output."""
    return _weight_grad(input, grad_output, tuple(weight_size), tuple(stride), tuple(padding),
                        tuple(dilation), groups, bias)


@conv2d_weight_grad_op.register_fake
def _(input, grad_output, weight_size, stride, padding, dilation, groups, bias):
    torch._check(input.dim() == 4 and grad_output.dim() == 4 and len(weight_size) == 4,
                 lambda: "conv2d::conv2d_weight_grad takes 4-D tensors and a 4-D weight_size")
    _native.per_side_geometry(stride, padding, dilation, groups)
    return (input.new_empty(weight_size),
            input.new_empty((weight_size[0],) if bias else (0,)))


def _input_grad_setup(ctx, inputs, output):
    dy, w, _, stride, padding, dilation, groups = inputs
    ctx.save_for_backward(dy, w)
    ctx.geometry = (list(stride), list(padding), list(dilation), groups)


def _input_grad_backward(ctx, g):
    dy, w = ctx.saved_tensors
    stride, padding, dilation, groups = ctx.geometry
    want_dy, want_w = ctx.needs_input_grad[:2]
    g_dy = _f.conv2d_op(g, w, None, stride, padding, dilation, groups) if want_dy else None
    g_w = conv2d_weight_grad_op(g, dy, list(w.shape), stride, padding, dilation, groups,
                                False)[0] if want_w else None
    return g_dy, g_w, None, None, None, None, None


def _weight_grad_setup(ctx, inputs, output):
    x, dy, _, stride, padding, dilation, groups, bias = inputs
    ctx.save_for_backward(x, dy)
    ctx.geometry = (list(stride), list(padding), list(dilation), groups)
    ctx.bias = bias


def _weight_grad_backward(ctx, gw, gb):
    x, dy = ctx.saved_tensors
    stride, padding, dilation, groups = ctx.geometry
    want_x, want_dy = ctx.needs_input_grad[:2]
    g_x = conv2d_input_grad_op(dy, gw, list(x.shape), stride, padding, dilation,
                               groups) if want_x else None
    g_dy = _f.conv2d_op(x, gw, gb if ctx.bias else None, stride, padding, dilation,
                        groups) if want_dy else None
    return g_x, g_dy, None, None, None, None, None, None


conv2d_input_grad_op.register_autograd(_input_grad_backward, setup_context=_input_grad_setup)
conv2d_weight_grad_op.register_autograd(_weight_grad_backward, setup_context=_weight_grad_setup)


def _size(v, name):
    if isinstance(v, torch.Tensor) or not hasattr(v, "__len__") or len(v) != 4 or any(
            isinstance(e, bool) or not isinstance(e, int) for e in v):
        raise TypeError(f"conv2d.grad: {name} must be 4 ints (B, C, H, W) or (Cout, C / groups, "
                        f"Kh, Kw), got {v!r}")
    return tuple(v)


def _op_geometry(x_shape, w_shape, stride, padding, dilation, groups):
    geometry = _native.geometry(w_shape, stride, padding, dilation, groups)
    _native.problem(tuple(x_shape), tuple(w_shape), *geometry)  # F.conv2d's refusals
    (sh, sw), pad, (dh, dw), g = geometry
    return [sh, sw], list(pad), [dh, dw], g


def conv2d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.grad.conv2d_input: the gradient of conv2d(input, weight, ...) with respect to its
    input (shaped input_size, (B, Cin, H, W)), given grad_output, the gradient of its output.
    float32 CUDA tensors; arguments as conv2d.conv2d takes them (padding "same" and "valid"
    too). Raises TypeError or ValueError on tensors or sizes that do not fit, writing
    nothing."""
    input_size = _size(input_size, "input_size")
    _check(grad_output=grad_output, weight=weight)
    geometry = _op_geometry(input_size, weight.shape, stride, padding, dilation, groups)
    return conv2d_input_grad_op(grad_output, weight, list(input_size), *geometry)


def conv2d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.grad.conv2d_weight: the gradient of conv2d(input, weight, ...) with respect to
    its weight (shaped weight_size, (Cout, Cin / groups, Kh, Kw)), given grad_output. As
    conv2d_input otherwise."""
    weight_size = _size(weight_size, "weight_size")
    _check(input=input, grad_output=grad_output)
    geometry = _op_geometry(input.shape, weight_size, stride, padding, dilation, groups)
    return conv2d_weight_grad_op(input, grad_output, list(weight_size), *geometry, False)[0]
