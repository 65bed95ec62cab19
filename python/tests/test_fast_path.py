"""The fast path (python/fast_path.cc) on the GPU host: that it loads where the wheel was built for
the running PyTorch and Python, and not where $CONV2D_FAST_PATH=0; that its own calls (made
directly, so that none falls back unseen) give the Python path's results (the same kernels; some
add atomically, in any order), unbatched and with out= too, on the current stream; that it leaves
every case it does not take (views, a bad or gradient-needing out=) to the Python path; that a
failed library call raises conv2d.Error with the library's message and leaves out= untouched;
that its conv2d entry takes the whole call of a signature run before, however F.conv2d's
arguments spell it, and leaves to Python every call that needs the dispatcher or has no key.
The rest of python/tests runs through it too (and once more with $CONV2D_FAST_PATH=0:
tools/gpu_run.sh's python step).
"""
import os
import subprocess
import sys

import pytest
import torch

import conv2d
from conv2d import _native, functional

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

BUILT_FOR = ((3, 12), "2.11")  # tools/deps.bzl: TORCH_PYTHON, TORCH_VERSION
ENABLED = os.environ.get("CONV2D_FAST_PATH", "1") != "0"


def _inputs(seed, *dims):
    b, c, o, h, w, k = dims
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(b, c, h, w, device="cuda", generator=g),
            torch.randn(o, c, k, k, device="cuda", generator=g),
            torch.randn(o, device="cuda", generator=g))


def _close(a, b):
    """Equal but for the order of additions (some kernels add atomically, in any order, so two
    calls of one path differ too): within 1e-6 of the largest output, which bounds the terms'
    rounding where outputs cancel."""
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max()))


def _python_path(fn):
    """fn() with every cached signature's fast path off (the Python path and ctypes)."""
    saved = {key: call.fast for key, call in functional._calls.items()}
    entry, functional._fast_conv2d = functional._fast_conv2d, None
    try:
        for call in functional._calls.values():
            call.fast = None
        return fn()
    finally:
        functional._fast_conv2d = entry
        for key, fast in saved.items():
            functional._calls[key].fast = fast


def test_loads_where_built_for():
    x, w, _ = _inputs(1, 1, 3, 4, 9, 9, 3)
    conv2d.conv2d(x, w)  # a first plan loads the library (and the fast path)
    matches = (sys.version_info[:2] == BUILT_FOR[0] and
               torch.__version__.startswith(BUILT_FOR[1] + "."))
    if ENABLED and matches:
        assert functional.fast_path() == "conv2d._fast_torch2_11"
    elif not ENABLED:
        assert functional.fast_path() is None
    else:
        pytest.skip(f"NOT TESTED: the wheel's fast path is for Python {BUILT_FOR[0]} and "
                    f"PyTorch {BUILT_FOR[1]}, this is {sys.version_info[:2]} and "
                    f"{torch.__version__} (the Python path runs every call)")


def test_the_switch_turns_it_off():
    code = ("import torch, conv2d\nfrom conv2d import functional\n"
            "conv2d.conv2d(torch.randn(1, 2, 5, 5, device='cuda'), "
            "torch.randn(2, 2, 3, 3, device='cuda'))\nprint(functional.fast_path())")
    env = dict(os.environ, CONV2D_FAST_PATH="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "None"


def _require_fast():
    conv2d.conv2d(*_inputs(2, 1, 2, 2, 6, 6, 3)[:2])  # a first plan loads the fast path
    if functional._fast is None:
        pytest.skip("NOT TESTED here: the fast path is not loaded (CONV2D_FAST_PATH=0, or not "
                    "built for this Python and PyTorch); the Python path ran these calls")


def _fast_call(x, w, b, out=None):
    """The fast path's own result for conv2d(x, w, b, out=out), its signature's plan made first
    (a first call goes through the Python path); fails if the fast path declines the call."""
    conv2d.conv2d(x, w, b)
    call = functional._call_for(x, w, b, 1, 0, 1, 1, False)
    assert call.fast is not None
    y = call.fast(x, w, b, out)
    assert y is not None, "the fast path left a plain call to the Python path"
    return y


@pytest.mark.parametrize("dims,bias", [((2, 8, 16, 20, 18, 3), True), ((4, 64, 64, 48, 48, 8),
                                                                         False),
                                       ((1, 5, 7, 13, 11, 1), True)])
def test_same_results_as_the_python_path(dims, bias):
    _require_fast()
    x, w, b = _inputs(7, *dims)
    b = b if bias else None
    fast = _fast_call(x, w, b)
    slow = _python_path(lambda: conv2d.conv2d(x, w, b))
    _close(fast, slow)
    out = torch.full_like(fast, float("nan"))
    assert _fast_call(x, w, b, out) is out
    _close(out, slow)
    # Unbatched: y of the plan's 3-D shape.
    y1 = _fast_call(x[0], w, b)
    assert y1.shape == fast.shape[1:]
    _close(y1, _python_path(lambda: conv2d.conv2d(x[0], w, b)))
    # And through conv2d.conv2d, whose later calls take the fast path.
    _close(conv2d.conv2d(x, w, b), slow)


def test_runs_on_the_current_stream():
    """On a side stream held by a long kernel, the input is written there and then convolved:
    a call enqueued on any other stream would read it before it is written."""
    _require_fast()
    x, w, b = _inputs(11, 2, 8, 8, 24, 24, 5)
    ref = conv2d.conv2d(x, w, b)
    xs = torch.full_like(x, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time
        xs.copy_(x)
        ys = [conv2d.conv2d(xs, w, b) for _ in range(3)]
    torch.cuda.synchronize()
    for y in ys:
        _close(y, ref)


def test_cases_it_leaves_to_the_python_path():
    x, w, b = _inputs(3, 2, 6, 6, 15, 15, 3)
    ref = conv2d.conv2d(x, w, b)
    # Views (not contiguous; negative): the Python path makes them dense.
    xt = x.transpose(2, 3).contiguous().transpose(2, 3)
    assert not xt.is_contiguous() and torch.equal(xt, x)
    close = _close
    close(conv2d.conv2d(xt, w, b), ref)
    wneg = torch._neg_view(-w)  # w's values, as a negative view of -w
    assert wneg.is_neg() and torch.equal(wneg, w)
    close(conv2d.conv2d(x, wneg, b), ref)
    # out= it does not take: the Python path's errors, out untouched.
    bad = torch.full((2, 6, 13, 12), 7.0, device="cuda")
    with pytest.raises(ValueError, match="out must be float32"):
        conv2d.conv2d(x, w, b, out=bad)
    assert bool((bad == 7.0).all())
    needs_grad = torch.full_like(ref, 7.0).requires_grad_()
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        conv2d.conv2d(x, w, b, out=needs_grad)
    assert bool((needs_grad == 7.0).all())
    # An out= that is not contiguous gets the result by a copy.
    strided = torch.full((2, 6, 13, 13), 7.0, device="cuda").transpose(2, 3)
    conv2d.conv2d(x, w, b, out=strided)
    close(strided, ref)


def test_a_failed_call_raises_the_libraries_error():
    if functional._fast is None:
        pytest.skip("NOT TESTED: the fast path is not loaded here")
    x, w, b = _inputs(5, 1, 4, 4, 10, 10, 3)
    conv2d.conv2d(x, w, b)
    call = functional._call_for(x, w, b, 1, 0, 1, 1, False)
    # The plan takes a bias; a Call over it given none: the library refuses, writes nothing.
    out = torch.full((1, 4, 8, 8), 7.0, device="cuda")
    with pytest.raises(_native.Error, match="bias") as e:
        call.fast(x, w, None, out)
    assert e.value.code == 3  # CONV2D_INVALID_ARGUMENT
    torch.cuda.synchronize()
    assert bool((out == 7.0).all())


def test_out_version_is_bumped():
    x, w, _ = _inputs(9, 1, 3, 3, 8, 8, 3)
    out = torch.empty(1, 3, 6, 6, device="cuda")
    conv2d.conv2d(x, w, out=out)
    v = out._version
    conv2d.conv2d(x, w, out=out)
    assert out._version == v + 1


def _no_python_path(monkeypatch):
    """Makes any call that reaches functional.py's direct or op path fail."""
    def fail(*args, **kwargs):
        raise AssertionError("the call reached the Python path")
    monkeypatch.setattr(functional, "_direct", fail)
    monkeypatch.setattr(functional, "_needs_op", fail)


@pytest.mark.parametrize("spellings,dims", [
    ([dict(), dict(stride=1, padding=0), dict(stride=(1, 1), padding=(0, 0), dilation=[1, 1]),
      dict(padding="valid", groups=1)], (2, 6, 10, 17, 15, 3)),
    ([dict(stride=2, padding=1), dict(stride=[2, 2], padding=(1, 1))],
     (1, 4, 8, 12, 12, 3)),
    ([dict(padding="same"), dict(padding="same", dilation=1)], (1, 4, 4, 11, 9, 3)),
    ([dict(groups=2, dilation=2), dict(groups=2, dilation=(2, 2), stride=(1, 1))],
     (2, 4, 6, 14, 14, 3)),
])
def test_the_entry_takes_a_signature_run_before(monkeypatch, spellings, dims):
    """After a signature's first calls in one spelling (the plan, then the fast path's first
    call, which remembers it), conv2d.conv2d's calls with it never reach Python, in every
    spelling of the same arguments, with and without bias and out=, batched or not."""
    _require_fast()
    x, w, b = _inputs(13, *dims)
    g = spellings[0].get("groups", 1)
    w = w[:, :w.shape[1] // g].contiguous()
    for args in ((x, w, None), (x, w, b), (x[0], w, b)):
        conv2d.conv2d(*args, **spellings[0])  # the plan
        conv2d.conv2d(*args, **spellings[0])  # the fast path's first call: remembered
        for kw in spellings:
            ref = _python_path(lambda: conv2d.conv2d(*args, **kw))
            with monkeypatch.context() as m:
                _no_python_path(m)
                _close(conv2d.conv2d(*args, **kw), ref)
                out = torch.full_like(ref, float("nan"))
                assert conv2d.conv2d(*args, **kw, out=out) is out
                _close(out, ref)


def test_a_negative_padding_is_refused_after_valid_and_same():
    """Padding "valid" and "same" have keys no padding F.conv2d takes can equal: a negative one
    still reaches the Python path and its ValueError, out untouched."""
    _require_fast()
    x, w, b = _inputs(19, 1, 3, 3, 9, 9, 3)
    for padding in ("valid", "same"):
        for _ in range(3):
            conv2d.conv2d(x, w, b, padding=padding)
        assert functional._fast_conv2d(x, w, b, 1, padding, 1, 1, None) is not None
        out = torch.full((1, 3, 9, 9), 7.0, device="cuda")
        for bad in (-1, -2, (-1, -1), [-2, -2]):
            assert functional._fast_conv2d(x, w, b, 1, bad, 1, 1, None) is None
            with pytest.raises(ValueError):
                conv2d.conv2d(x, w, b, padding=bad, out=out)
        torch.cuda.synchronize()
        assert bool((out == 7.0).all())


def test_the_entry_leaves_what_it_has_no_key_for(passthrough_modes):
    _require_fast()
    x, w, b = _inputs(17, 2, 5, 6, 12, 12, 3)
    for _ in range(3):
        conv2d.conv2d(x, w, b)
    entry = functional._fast_conv2d
    assert entry(x, w, b, 1, 0, 1, 1, None) is not None  # remembered
    out = torch.empty(2, 6, 10, 10, device="cuda")
    assert entry(x, w, b, 1, 0, 1, 1, out) is out
    # Spellings with no key (the Python path decides what they mean or refuses them).
    for stride, padding, dilation, groups in [(True, 0, 1, 1), (1, False, 1, 1), ((1,), 0, 1, 1),
                                              (1, 0, 1.0, 1), (1, "full", 1, 1),
                                              (1, (0, 0, 0, 0), 1, 1), (1, 0, 1, True),
                                              (torch.tensor(1), 0, 1, 1)]:
        assert entry(x, w, b, stride, padding, dilation, groups, None) is None
    # Other signatures: another shape, no bias, another geometry, another dtype or device.
    assert entry(x[:1], w, b, 1, 0, 1, 1, None) is None
    assert entry(x, w, None, 1, 0, 1, 1, None) is None
    assert entry(x, w, b, 1, 1, 1, 1, None) is None
    assert entry(x.double(), w.double(), b.double(), 1, 0, 1, 1, None) is None
    assert entry(x.cpu(), w.cpu(), b.cpu(), 1, 0, 1, 1, None) is None
    # Calls the fast path leaves: views, an out= of another shape or needing a gradient.
    assert entry(x.transpose(2, 3).contiguous().transpose(2, 3), w, b, 1, 0, 1, 1, None) is None
    assert entry(x, w, b, 1, 0, 1, 1, torch.empty(2, 6, 10, 11, device="cuda")) is None
    assert entry(x, w, b, 1, 0, 1, 1, [0.0]) is None
    # Calls that need the dispatcher.
    xg = x.clone().requires_grad_()
    assert entry(xg, w, b, 1, 0, 1, 1, None) is None
    with torch.no_grad():
        assert entry(xg, w, b, 1, 0, 1, 1, None) is not None
    with torch.inference_mode():
        assert entry(x, w, b, 1, 0, 1, 1, None) is not None
    Dispatch, Function = passthrough_modes
    with Dispatch():
        assert entry(x, w, b, 1, 0, 1, 1, None) is None
    with Function():
        assert entry(x, w, b, 1, 0, 1, 1, None) is None
    seen = []
    torch.func.vmap(lambda xi: seen.append(entry(x, w, b, 1, 0, 1, 1, None)) or xi)(x)
    assert seen == [None]
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        assert entry(x, w, b, 1, 0, 1, 1, None) is None
    assert entry(x, w, b, 1, 0, 1, 1, None) is not None
    class Subclass(torch.Tensor):
        pass

    assert entry(x.as_subclass(Subclass), w, b, 1, 0, 1, 1, None) is None
    assert entry(torch.nn.Parameter(x, requires_grad=False), w, b, 1, 0, 1, 1, None) is not None
    with pytest.raises(TypeError):
        entry(x, w, b)


def test_an_inference_out_outside_inference_mode():
    """An out= made under inference mode has no version counter: both paths write it and bump
    nothing (torch.autograd.graph.increment_version skips it; the fast path did not)."""
    x, w, _ = _inputs(21, 1, 3, 3, 8, 8, 3)
    ref = conv2d.conv2d(x, w)
    with torch.inference_mode():
        out = torch.empty(1, 3, 6, 6, device="cuda")
    for _ in range(3):  # the Python path, the fast path's Call, the entry
        assert conv2d.conv2d(x, w, out=out) is out
        _close(out, ref)
