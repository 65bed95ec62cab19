"""What python/tests' fast-path tests share (tools/deps.bzl: the fast path is built for PyTorch
2.11 and Python 3.12)."""
import importlib

import pytest

FAST_PATH_MODULE = "conv2d._fast_torch2_11"


@pytest.fixture
def fast_module():
    """The fast path's module, imported (not yet in use), or the test is skipped, NOT TESTED."""
    try:
        return importlib.import_module(FAST_PATH_MODULE)
    except ImportError as e:
        pytest.skip(f"NOT TESTED here: no fast path for this Python and PyTorch ({e})")


@pytest.fixture
def passthrough_modes():
    """A TorchDispatchMode and a TorchFunctionMode that only pass every call on: a mode in play,
    nothing else changed."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class Function(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    return Dispatch, Function
