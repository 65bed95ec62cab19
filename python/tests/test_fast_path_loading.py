"""When the fast path (python/fast_path.cc) is used, on any machine with PyTorch (no GPU
needed): only under the PyTorch release it was compiled against (not another patch release, a
pre-release or a source build of the same version, nor another minor version) and not with
$CONV2D_FAST_PATH=0; and an out= that is not a tensor is refused with a TypeError by both paths.
"""
import importlib

import pytest

torch = pytest.importorskip("torch")

import conv2d  # noqa: E402
from conv2d import _native, functional  # noqa: E402


def _load_under(monkeypatch, version):
    if functional._run_ex is None:
        monkeypatch.setattr(functional, "_run_ex", _native.run_function())
    monkeypatch.setattr(torch, "__version__", version)
    return functional._load_fast_path()


def test_only_under_the_release_it_was_built_for(monkeypatch):
    try:
        module = importlib.import_module("conv2d._fast_torch2_11")
    except ImportError as e:
        pytest.skip(f"NOT TESTED here: no fast path for this Python and PyTorch ({e})")
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
