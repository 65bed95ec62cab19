"""conv2d: fp32 2D convolution on NVIDIA GPUs, fast and within fp32 summation's accuracy.

    import conv2d
    y = conv2d.conv2d(x, w, bias, stride=1, padding=0, dilation=1, groups=1)  # F.conv2d's call
    model = conv2d.convert(model).model   # every nn.Conv2d the library serves, swapped in place
    conv2d.nn.Conv2d(...)                 # a drop-in torch.nn.Conv2d
    conv2d.grad.conv2d_input(...), conv2d.grad.conv2d_weight(...)  # torch.nn.grad's

Gradients (autograd through conv2d.conv2d, and conv2d.grad) come from the library's own data
and weight gradients, within the same bar and bitwise reproducible.

Every result is within |y - y64| <= 1e-3 + 1e-3·|y64| of float64 truth. The library is
lib/libconv2d.so inside this package (its Abseil libraries beside it); it needs the CUDA
driver and cuBLAS (PyTorch's, once torch is imported, or the CUDA toolkit's).

PyTorch is imported if it is installed: without it the package still imports, and
device_status() and algorithms() answer (e.g. "no CUDA device" on a machine without a GPU), but
conv2d(), nn and convert need it.
"""
from ._native import Error, algorithms, device_status, library_path

__version__ = "0.1.0"

try:
    import torch as _torch  # noqa: F401  (loads cuBLAS before libconv2d.so asks for it)
except ImportError as _missing:
    _torch_error = _missing

    def _needs_torch(*args, **kwargs):
        raise ImportError(f"conv2d: this needs PyTorch, which is not importable here "
                          f"({_torch_error})")

    conv1d = conv2d = conv_transpose2d = convert = plan_algorithm = _needs_torch
    __all__ = ["Error", "algorithms", "conv1d", "conv2d", "conv_transpose2d", "convert",
               "device_status", "library_path", "plan_algorithm"]
else:
    from . import grad, nn
    from .functional import conv1d, conv2d, conv_transpose2d, plan_algorithm
    from .nn import convert
    __all__ = ["Error", "algorithms", "conv1d", "conv2d", "conv_transpose2d", "convert",
               "device_status", "grad", "library_path", "nn", "plan_algorithm"]
