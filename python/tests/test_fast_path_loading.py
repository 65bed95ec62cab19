"""When the fast path (python/fast_path.cc) is used, on any machine with PyTorch (no GPU
needed): only under the PyTorch release it was compiled against (not another patch release, a
pre-release or a source build of the same version, nor another minor version) and not with
$CONV2D_FAST_PATH=0; and an out= that is not a tensor is refused with a TypeError by both paths.
"""
import pytest

torch = pytest.importorskip("torch")

import conv2d  # noqa: E402
from conv2d import _native, functional  # noqa: E402


def _load_under(monkeypatch, version):
    if functional._run_ex is None:
        monkeypatch.setattr(functional, "_run_ex", _native.run_function())
    monkeypatch.setattr(torch, "__version__", version)
    return functional._load_fast_path()


def test_only_under_the_release_it_was_built_for(monkeypatch, fast_module):
    module = fast_module
    monkeypatch.delenv("CONV2D_FAST_PATH", raising=False)  # the suite also runs with it at 0
    assert module.TORCH_VERSION == "2.11.0"  # tools/deps.bzl's TORCH_VERSION
    assert _load_under(monkeypatch, "2.11.0+cu130") is module
    assert _load_under(monkeypatch, "2.11.0") is module
    for other in ("2.11.1", "2.11.0a0+git70d99e9", "2.11.0rc1", "2.12.0", "2.10.0+cu128"):
        assert _load_under(monkeypatch, other) is None, other
    monkeypatch.setenv("CONV2D_FAST_PATH", "0")
    assert _load_under(monkeypatch, "2.11.0+cu130") is None


def test_out_must_be_a_tensor():
    x = torch.empty(1, 2, 5, 5, device="meta")
    w = torch.empty(3, 2, 3, 3, device="meta")
    with pytest.raises(TypeError, match="out must be a tensor"):
        conv2d.conv2d(x, w, out=[0.0])
    if torch.cuda.is_available():
        x, w = torch.randn(1, 2, 5, 5, device="cuda"), torch.randn(3, 2, 3, 3, device="cuda")
        with pytest.raises(TypeError, match="out must be a tensor"):
            conv2d.conv2d(x, w, out=[0.0])


def test_the_entry_skips_the_dispatcher_only_where_python_would(fast_module, passthrough_modes):
    """The fast path's conv2d entry decides in C++ what functional._needs_op decides in Python
    beyond the tensors' types and devices: here against the running PyTorch's own state, in
    every context that needs the dispatcher (CPU tensors: the verdict does not depend on the
    device)."""
    module = fast_module
    Dispatch, Function = passthrough_modes
    import torch.autograd.forward_ad as fwAD

    x, w, b = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3), torch.randn(3)

    def both(x, w, b):
        verdict = module.direct_allowed(x, w, b)
        assert verdict == (not functional._context_needs_op(x, w, b))
        return verdict

    assert both(x, w, b)
    bg = b.clone().requires_grad_()
    assert not both(x, w, bg)
    with torch.no_grad():
        assert both(x, w, bg)
    with torch.inference_mode():
        assert both(x, w, b)
    with Dispatch():
        assert not both(x, w, b)
    with Function():
        assert not both(x, w, b)
    with fwAD.dual_level():
        assert not both(x, w, b)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():  # an infra mode of the dispatch stack
        assert not both(x, w, b)
    assert both(x, w, b)
    seen = []
    torch.func.vmap(lambda xi: seen.append(both(xi, w, b)) or xi)(x)
    torch.func.grad(lambda xi: seen.append(both(xi, w, b)) or xi.sum())(x)
    torch.func.jvp(lambda xi: seen.append(both(xi, w, b)) or xi, (x,), (x,))
    assert seen == [False, False, False]
    # The entry itself: CPU tensors have no key, the call is left to Python.
    assert module.conv2d(x, w, b, 1, 0, 1, 1, None) is None
    assert not module.remember(None, x, w, b, 1, 0, 1, 1)
    with pytest.raises(TypeError):
        module.conv2d(x, w, b)
