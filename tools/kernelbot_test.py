"""The Python layer's contract on the GPU host (pytest; needs torch and a GPU):
concurrent calls on different streams and threads, negative views, empty batches and channels,
unbatched input, bad arguments that raise with the output untouched; and conv2d(), F.conv2d's
signature, against float64 F.conv2d: stride, padding (ints, pairs, "valid", "same" with odd and
even kernels), dilation, groups (depthwise included), bias, plans cached per problem.

    CONV2D_LIB=lib/libconv2d.so python3 -m pytest -q kernelbot_test.py
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


# conv2d(x, w, bias, stride, padding, dilation, groups): F.conv2d's signature and semantics.

def _geometry_inputs(seed, b, cin, cout, h, w, kh, kw, groups, bias):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(b, cin, h, w, device="cuda", generator=g)
    wt = torch.randn(cout, cin // groups, kh, kw, device="cuda", generator=g)
    bi = torch.randn(cout, device="cuda", generator=g) if bias else None
    return x, wt, bi


def _ref_geometry(x, w, bias, **kw):
    return F.conv2d(x.double(), w.double(), None if bias is None else bias.double(), **kw)


GEOMETRY_CASES = [
    # (B, Cin, Cout, H, W, Kh, Kw), F.conv2d's keyword arguments, bias
    ((2, 5, 7, 23, 19, 3, 4), dict(padding=(2, 1)), False),
    ((2, 6, 5, 45, 38, 2, 3), dict(stride=(3, 4)), False),          # stride > kernel
    ((1, 3, 64, 64, 64, 7, 7), dict(stride=2, padding=3), True),     # ResNet's stem, smaller
    ((2, 4, 6, 17, 15, 1, 1), dict(dilation=(2, 3)), False),         # dilation with K = 1
    ((2, 5, 4, 29, 27, 3, 3), dict(dilation=(2, 3)), True),          # dilation with K = 3
    ((2, 8, 8, 26, 22, 5, 3), dict(groups=8, padding=1), False),     # depthwise
    ((1, 4, 12, 19, 17, 3, 3), dict(groups=4, stride=2), True),      # depthwise x3
    ((2, 6, 10, 21, 18, 4, 3), dict(groups=2), False),               # 3 and 5 channels per group
    ((2, 7, 9, 20, 17, 3, 5), dict(), True),                         # a bias alone
    ((2, 9, 6, 33, 28, 5, 3), dict(padding=(2, 0), stride=(2, 3), dilation=(2, 1), groups=3),
     True),                                                          # everything at once
    ((2, 4, 4, 5, 5, 3, 3), dict(dilation=2), False),                # output 1x1
    ((1, 2, 3, 4, 4, 2, 2), dict(padding=3), True),                  # padding wider than kernel
    ((2, 3, 5, 16, 12, 3, 3), dict(padding="valid", stride=1), False),
]


@pytest.mark.parametrize("dims,kw,bias", GEOMETRY_CASES,
                         ids=[f"{d}-{k}-{'bias' if b else 'nobias'}" for d, k, b in GEOMETRY_CASES])
def test_conv2d_geometry_matches_f_conv2d(dims, kw, bias):
    b, cin, cout, h, w, kh, kwid = dims
    x, wt, bi = _geometry_inputs(sum(dims), b, cin, cout, h, w, kh, kwid, kw.get("groups", 1), bias)
    ref = _ref_geometry(x, wt, bi, **kw)
    for _ in range(2):  # the second call runs the cached plan
        y = kernelbot.conv2d(x, wt, bi, **kw)
        torch.cuda.synchronize()
        assert y.dtype == torch.float32 and tuple(y.shape) == tuple(ref.shape)
        assert _ok(y, ref), kernelbot.plan_algorithm(x, wt, bi, **kw)


def test_conv2d_positional_arguments_as_f_conv2d():
    x, wt, bi = _geometry_inputs(3, 2, 6, 4, 20, 18, 3, 3, 2, True)
    y = kernelbot.conv2d(x, wt, bi, (2, 1), (1, 2), (1, 2), 2)
    assert _ok(y, F.conv2d(x.double(), wt.double(), bi.double(), (2, 1), (1, 2), (1, 2), 2))


@pytest.mark.parametrize("k,dilation", [(3, 1), (4, 1), (5, 2), (2, 3), ((4, 3), (1, 2)),
                                        ((1, 6), 1)])
def test_conv2d_padding_same_as_f_conv2d(k, dilation):
    # F.conv2d pads dilation*(k-1) per dimension, the odd one at the bottom/right: even kernels
    # and odd dilations give asymmetric padding.
    kh, kw = (k, k) if isinstance(k, int) else k
    x, wt, bi = _geometry_inputs(kh * 10 + kw, 2, 5, 3, 17, 14, kh, kw, 1, True)
    ref = _ref_geometry(x, wt, bi, padding="same", dilation=dilation)
    y = kernelbot.conv2d(x, wt, bi, padding="same", dilation=dilation)
    assert tuple(y.shape) == tuple(ref.shape) == (2, 3, 17, 14)
    assert _ok(y, ref)


def test_conv2d_padding_same_refuses_a_stride():
    x, wt, _ = _geometry_inputs(4, 1, 2, 2, 8, 8, 3, 3, 1, False)
    with pytest.raises(ValueError, match="strided"):
        kernelbot.conv2d(x, wt, padding="same", stride=2)
    with pytest.raises((RuntimeError, ValueError)):  # F.conv2d refuses it too
        F.conv2d(x, wt, padding="same", stride=2)


def test_conv2d_unbatched_and_views():
    g = torch.Generator(device="cuda").manual_seed(11)
    x = torch.randn(6, 21, 19, device="cuda", generator=g)
    wt = torch.randn(4, 3, 3, 3, device="cuda", generator=g)
    bi = torch.randn(8, device="cuda", generator=g)[::2]  # a strided bias view
    y = kernelbot.conv2d(x, wt, bi, stride=2, padding=1, groups=2)
    ref = F.conv2d(x.double(), wt.double(), bi.double(), stride=2, padding=1, groups=2)
    assert tuple(y.shape) == tuple(ref.shape) and _ok(y, ref)
    xt = torch.randn(2, 6, 19, 21, device="cuda", generator=g).transpose(2, 3)  # not contiguous
    y = kernelbot.conv2d(xt, torch._neg_view(wt), None, dilation=2, groups=2)
    assert _ok(y, F.conv2d(xt.double(), -wt.double(), None, dilation=2, groups=2))


def test_conv2d_on_a_side_stream():
    x, wt, bi = _geometry_inputs(12, 2, 8, 8, 30, 30, 3, 3, 8, True)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = kernelbot.conv2d(x, wt, bi, padding=1, groups=8)
    s.synchronize()
    assert _ok(y, _ref_geometry(x, wt, bi, padding=1, groups=8))


def test_conv2d_plans_are_cached_per_problem():
    x, wt, bi = _geometry_inputs(13, 1, 4, 4, 15, 15, 3, 3, 1, True)
    before = len(kernelbot._plans)
    kernelbot.conv2d(x, wt, bi, stride=2)
    kernelbot.conv2d(x, wt, bi, stride=2)
    assert len(kernelbot._plans) == before + 1
    kernelbot.conv2d(x, wt, None, stride=2)      # no bias: another problem
    kernelbot.conv2d(x, wt, bi, stride=(2, 1))   # another stride
    assert len(kernelbot._plans) == before + 3


def test_conv2d_basic_form_is_custom_kernels():
    # The same problem through conv2d_plan_create_ex as through conv2d_plan_create: the same
    # algorithm, and both within the bar.
    x, w = _inputs(14)
    ref = _ref(x, w)
    assert _ok(kernelbot.conv2d(x, w), ref) and _ok(kernelbot.custom_kernel((x, w)), ref)
    plan, _ = kernelbot._plan(tuple(x.shape[:2]) + (w.shape[0],) + tuple(x.shape[2:]) +
                              tuple(w.shape[2:]), x.device)
    assert kernelbot.plan_algorithm(x, w) == kernelbot._load().conv2d_plan_algorithm(plan).decode()


def test_conv2d_empty_and_zero_channel_inputs():
    x = torch.randn(0, 4, 10, 10, device="cuda")
    w = torch.randn(6, 2, 3, 3, device="cuda")
    assert tuple(kernelbot.conv2d(x, w, stride=2, groups=2).shape) == (0, 6, 4, 4)
    x = torch.randn(2, 0, 10, 10, device="cuda")
    w = torch.randn(3, 0, 3, 3, device="cuda")
    bi = torch.randn(3, device="cuda")
    y = kernelbot.conv2d(x, w, bi, padding=1)
    assert tuple(y.shape) == (2, 3, 10, 10) and torch.equal(y, bi.view(1, 3, 1, 1).expand_as(y))


def test_conv2d_bad_arguments_raise():
    x, wt, bi = _geometry_inputs(15, 1, 4, 6, 10, 10, 3, 3, 2, True)
    with pytest.raises(ValueError):
        kernelbot.conv2d(x, wt, bi, stride=0, groups=2)
    with pytest.raises(ValueError):
        kernelbot.conv2d(x, wt, bi, dilation=0, groups=2)
    with pytest.raises(ValueError):
        kernelbot.conv2d(x, wt, bi, padding=-1, groups=2)
    with pytest.raises(ValueError):
        kernelbot.conv2d(x, wt, bi, padding="full", groups=2)
    with pytest.raises(ValueError):
        kernelbot.conv2d(x, wt, bi, groups=3)          # does not divide 4 and 6
    with pytest.raises(ValueError):
        kernelbot.conv2d(x, wt, bi, groups=1)          # w has 2 channels per group, x 4
    with pytest.raises(ValueError):
        kernelbot.conv2d(x, wt, bi, dilation=5, groups=2)  # span 11 on 10: empty output
    with pytest.raises(ValueError):
        kernelbot.conv2d(x, wt, bi[:5], groups=2)      # bias of the wrong length
    with pytest.raises(TypeError):
        kernelbot.conv2d(x, wt, bi.double(), groups=2)
    with pytest.raises(TypeError):
        kernelbot.conv2d(x, wt, bi, stride=1.5, groups=2)
    with pytest.raises(TypeError):
        kernelbot.conv2d(x.cpu(), wt, bi, groups=2)
