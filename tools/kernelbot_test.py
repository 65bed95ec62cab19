"""KernelBot's entry (tools/kernelbot.py, custom_kernel over the conv2d package) on the GPU
host (pytest; needs torch, a GPU and the installed wheel): concurrent calls on different streams
and threads, negative views, empty batches and channels, unbatched input, bad arguments that
raise with the output untouched. conv2d.conv2d's own tests are python/tests/.

    python3 -m pytest -q kernelbot_test.py
"""
import threading

import pytest
import torch
import torch.nn.functional as F

import kernelbot

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _ref(x, w):
    return F.conv2d(x.double(), w.double())


def _ok(y, ref):
    return bool(((y.double() - ref).abs() <= 1e-3 + 1e-3 * ref.abs()).all())


def _inputs(seed, shape=(2, 16, 64, 64), cout=16, k=8):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(*shape, device="cuda", generator=g)
    w = torch.randn(cout, shape[1], k, k, device="cuda", generator=g)
    return x, w


def test_two_streams_one_shape_alternating():
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    cases = [_inputs(s) for s in range(24)]
    outs = []
    for i, (x, w) in enumerate(cases):
        with torch.cuda.stream(streams[i % 2]):
            outs.append(kernelbot.custom_kernel((x, w)))
    torch.cuda.synchronize()
    bad = [i for i, ((x, w), y) in enumerate(zip(cases, outs)) if not _ok(y, _ref(x, w))]
    assert not bad, f"wrong results in calls {bad}"


def test_threads_each_with_its_own_stream():
    errors, bad = [], []

    def worker(t):
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                for i in range(6):
                    x, w = _inputs(100 * t + i)
                    y = kernelbot.custom_kernel((x, w))
                    s.synchronize()
                    if not _ok(y, _ref(x, w)):
                        bad.append((t, i))
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and not bad, (errors, bad)


def test_negative_views_are_resolved():
    x, w = _inputs(7)
    y = kernelbot.custom_kernel((torch._neg_view(x), w))
    assert _ok(y, _ref(-x, w))
    y = kernelbot.custom_kernel((x, torch._neg_view(w)))
    assert _ok(y, _ref(x, -w))


def test_negative_view_output_gets_the_values():
    x, w = _inputs(8)
    out = torch.empty(2, 16, 57, 57, device="cuda")
    view = torch._neg_view(out)
    kernelbot.custom_kernel((x, w, view))
    assert _ok(view.resolve_neg(), _ref(x, w))


@pytest.mark.parametrize("b,cout", [(0, 4), (2, 0)])
def test_empty_batch_or_channels_give_empty_results(b, cout):
    # (F.conv2d itself returns an empty tensor for b = 0 and, in PyTorch 2.11, raises for
    # Cout = 0: the result here is the empty tensor of the output's shape in both cases.)
    x = torch.randn(b, 3, 10, 10, device="cuda")
    w = torch.randn(cout, 3, 3, 3, device="cuda")
    y = kernelbot.custom_kernel((x, w))
    assert tuple(y.shape) == (b, cout, 8, 8)


def test_zero_input_channels_give_zeros():
    x = torch.randn(2, 0, 10, 10, device="cuda")
    w = torch.randn(4, 0, 3, 3, device="cuda")
    y = kernelbot.custom_kernel((x, w))
    assert tuple(y.shape) == (2, 4, 8, 8) and bool((y == 0).all())


def test_unbatched_input_behaves_as_f_conv2d():
    g = torch.Generator(device="cuda").manual_seed(9)
    x = torch.randn(16, 40, 33, device="cuda", generator=g)
    w = torch.randn(5, 16, 5, 5, device="cuda", generator=g)
    y = kernelbot.custom_kernel((x, w))
    ref = F.conv2d(x.double(), w.double())
    assert tuple(y.shape) == tuple(ref.shape)
    assert _ok(y, ref)


def test_bad_arguments_raise_and_leave_the_output_untouched():
    x, w = _inputs(10)
    out = torch.full((2, 16, 57, 57), 7.0, device="cuda")
    with pytest.raises(TypeError):
        kernelbot.custom_kernel((x.double(), w, out))
    with pytest.raises(ValueError):
        kernelbot.custom_kernel((x, w[:, :3], out))
    with pytest.raises(ValueError):
        kernelbot.custom_kernel((x, w, out[:, :3]))
    with pytest.raises(ValueError):
        kernelbot.custom_kernel((x[0, 0], w, out))
    with pytest.raises(TypeError):
        kernelbot.custom_kernel((x.cpu(), w, out))
    assert bool((out == 7.0).all())
