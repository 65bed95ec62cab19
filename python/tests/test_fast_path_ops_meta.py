"""The custom ops' C++ kernels (python/fast_path_ops.cc) on any machine with PyTorch (no GPU
needed), in a process of their own (the swap is for the process's life): once the fast path
loads they are the ops' CUDA and Autograd kernels; with no gradient to record the Autograd one
dispatches below autograd in C++ (meta and fake tensors reach the fake implementations), with
one it hands the call to custom_op's autograd formula, whose backward runs; remember_op keys a
call by the op's own arguments and refuses a wrong count."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

SCRIPT = r'''
import torch
from conv2d import _native, functional
if functional._run_ex is None:
    functional._run_ex = _native.run_function()
module = functional._load_fast_path()
assert module is not None and hasattr(module, "register_ops")
module.register_ops()  # a second time: nothing more
for op in ("conv2d", "conv2d_input_grad", "conv2d_weight_grad"):
    dump = torch._C._dispatch_dump("conv2d::" + op).splitlines()
    for key in ("CUDA:", "Autograd[alias]:"):
        line = next(l for l in dump if l.startswith(key))
        assert "fast_path_ops.cc" in line, line
geometry = ([1, 1], [1, 1, 1, 1], [1, 1], 1)
x = torch.empty(2, 4, 8, 8, device="meta")
w = torch.empty(6, 4, 3, 3, device="meta")
y = torch.ops.conv2d.conv2d.default(x, w, None, *geometry)
assert y.shape == (2, 6, 8, 8) and y.grad_fn is None
xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
y = torch.ops.conv2d.conv2d.default(xr, wr, None, *geometry)
assert y.grad_fn is not None
gx, gw = torch.autograd.grad(y, (xr, wr), torch.empty_like(y))
assert gx.shape == x.shape and gw.shape == w.shape
dw, db = torch.ops.conv2d.conv2d_weight_grad.default(x, y.detach(), [6, 4, 3, 3], *geometry, True)
assert dw.shape == (6, 4, 3, 3) and db.shape == (6,)
from torch.fx.experimental.proxy_tensor import make_fx
graph = make_fx(lambda a, b: torch.ops.conv2d.conv2d.default(a, b, None, *geometry),
                tracing_mode="fake")(torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3))
assert "conv2d.conv2d" in str(graph.graph)
assert module.remember_op(1, 0, 0, 0, [2, 4, 8, 8], y.detach(), w, [2, 4, 8, 8], *geometry)
try:
    module.remember_op(2, 0, 0, 0, [6, 4, 3, 3], x, y.detach())
    raise AssertionError("a wrong argument count was taken")
except RuntimeError as e:
    assert "arguments" in str(e)
print("OK")
'''


def test_the_ops_c_kernels_swap_in_and_dispatch(fast_module):
    del fast_module  # the fixture skips (loudly) where no fast path was built for this PyTorch
    # The module under test loads in the child whatever this run's CONV2D_FAST_PATH says (the
    # suite runs again with it 0, where the package itself keeps the fast path off).
    env = {k: v for k, v in os.environ.items() if k != "CONV2D_FAST_PATH"}
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0 and run.stdout.strip().endswith("OK"), run.stdout + run.stderr
