"""conv2d.conv2d on the GPU host (pytest, from the installed wheel): F.conv2d's signature and
semantics against float64 F.conv2d (stride, padding as ints, pairs, "valid" and "same" with odd
and even kernels, dilation, groups with depthwise, bias, unbatched input, views), plans cached per
problem, empty and zero-channel inputs, bad arguments that raise with out= untouched, out=.
"""
import pytest
import torch
import torch.nn.functional as F

import conv2d
from conv2d import functional

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _ok(y, ref):
    return bool(((y.double() - ref).abs() <= 1e-3 + 1e-3 * ref.abs()).all())


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
def test_geometry_matches_f_conv2d(dims, kw, bias):
    b, cin, cout, h, w, kh, kwid = dims
    x, wt, bi = _geometry_inputs(sum(dims), b, cin, cout, h, w, kh, kwid, kw.get("groups", 1), bias)
    ref = _ref_geometry(x, wt, bi, **kw)
    for _ in range(2):  # the second call runs the cached plan
        y = conv2d.conv2d(x, wt, bi, **kw)
        torch.cuda.synchronize()
        assert y.dtype == torch.float32 and tuple(y.shape) == tuple(ref.shape)
        assert _ok(y, ref), conv2d.plan_algorithm(x, wt, bi, **kw)


def test_positional_arguments_as_f_conv2d():
    x, wt, bi = _geometry_inputs(3, 2, 6, 4, 20, 18, 3, 3, 2, True)
    y = conv2d.conv2d(x, wt, bi, (2, 1), (1, 2), (1, 2), 2)
    assert _ok(y, F.conv2d(x.double(), wt.double(), bi.double(), (2, 1), (1, 2), (1, 2), 2))


@pytest.mark.parametrize("k,dilation", [(3, 1), (4, 1), (5, 2), (2, 3), ((4, 3), (1, 2)),
                                        ((1, 6), 1)])
def test_padding_same_as_f_conv2d(k, dilation):
    # F.conv2d pads dilation*(k-1) per dimension, the odd one at the bottom/right: even kernels
    # and odd dilations give asymmetric padding.
    kh, kw = (k, k) if isinstance(k, int) else k
    x, wt, bi = _geometry_inputs(kh * 10 + kw, 2, 5, 3, 17, 14, kh, kw, 1, True)
    ref = _ref_geometry(x, wt, bi, padding="same", dilation=dilation)
    y = conv2d.conv2d(x, wt, bi, padding="same", dilation=dilation)
    assert tuple(y.shape) == tuple(ref.shape) == (2, 3, 17, 14)
    assert _ok(y, ref)


def test_padding_same_refuses_a_stride():
    x, wt, _ = _geometry_inputs(4, 1, 2, 2, 8, 8, 3, 3, 1, False)
    with pytest.raises(ValueError, match="strided"):
        conv2d.conv2d(x, wt, padding="same", stride=2)
    with pytest.raises((RuntimeError, ValueError)):  # F.conv2d refuses it too
        F.conv2d(x, wt, padding="same", stride=2)


def test_unbatched_and_views():
    g = torch.Generator(device="cuda").manual_seed(11)
    x = torch.randn(6, 21, 19, device="cuda", generator=g)
    wt = torch.randn(4, 3, 3, 3, device="cuda", generator=g)
    bi = torch.randn(8, device="cuda", generator=g)[::2]  # a strided bias view
    y = conv2d.conv2d(x, wt, bi, stride=2, padding=1, groups=2)
    ref = F.conv2d(x.double(), wt.double(), bi.double(), stride=2, padding=1, groups=2)
    assert tuple(y.shape) == tuple(ref.shape) and _ok(y, ref)
    xt = torch.randn(2, 6, 19, 21, device="cuda", generator=g).transpose(2, 3)  # not contiguous
    y = conv2d.conv2d(xt, torch._neg_view(wt), None, dilation=2, groups=2)
    assert _ok(y, F.conv2d(xt.double(), -wt.double(), None, dilation=2, groups=2))


def test_on_a_side_stream():
    x, wt, bi = _geometry_inputs(12, 2, 8, 8, 30, 30, 3, 3, 8, True)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = conv2d.conv2d(x, wt, bi, padding=1, groups=8)
    s.synchronize()
    assert _ok(y, _ref_geometry(x, wt, bi, padding=1, groups=8))


def _plans():
    return sum(1 for c in functional._calls.values() if c.run is not None)


def test_plans_are_cached_per_problem():
    x, wt, bi = _geometry_inputs(13, 1, 4, 4, 15, 15, 3, 3, 1, True)
    before = _plans()
    conv2d.conv2d(x, wt, bi, stride=2)
    conv2d.conv2d(x, wt, bi, stride=2)
    assert _plans() == before + 1
    conv2d.conv2d(x, wt, None, stride=2)      # no bias: another problem
    conv2d.conv2d(x, wt, bi, stride=(2, 1))   # another stride
    assert _plans() == before + 3


def test_the_op_and_the_direct_path_agree():
    # The dispatcher's path (taken when a gradient is needed) and the direct one compute the
    # same thing with the same plan: bit for bit.
    x, wt, bi = _geometry_inputs(14, 2, 6, 8, 20, 18, 3, 3, 2, True)
    direct = conv2d.conv2d(x, wt, bi, stride=2, padding=1, groups=2)
    via_op = torch.ops.conv2d.conv2d(x, wt, bi, [2, 2], [1, 1, 1, 1], [1, 1], 2)
    assert torch.equal(direct, via_op)
    assert _ok(direct, _ref_geometry(x, wt, bi, stride=2, padding=1, groups=2))
    assert conv2d.plan_algorithm(x, wt, bi, stride=2, padding=1, groups=2) in conv2d.algorithms()


def test_empty_and_zero_channel_inputs():
    x = torch.randn(0, 4, 10, 10, device="cuda")
    w = torch.randn(6, 2, 3, 3, device="cuda")
    assert tuple(conv2d.conv2d(x, w, stride=2, groups=2).shape) == (0, 6, 4, 4)
    x = torch.randn(2, 0, 10, 10, device="cuda")
    w = torch.randn(3, 0, 3, 3, device="cuda")
    bi = torch.randn(3, device="cuda")
    y = conv2d.conv2d(x, w, bi, padding=1)
    assert tuple(y.shape) == (2, 3, 10, 10) and torch.equal(y, bi.view(1, 3, 1, 1).expand_as(y))


def test_bad_arguments_raise():
    x, wt, bi = _geometry_inputs(15, 1, 4, 6, 10, 10, 3, 3, 2, True)
    with pytest.raises(ValueError):
        conv2d.conv2d(x, wt, bi, stride=0, groups=2)
    with pytest.raises(ValueError):
        conv2d.conv2d(x, wt, bi, dilation=0, groups=2)
    with pytest.raises(ValueError):
        conv2d.conv2d(x, wt, bi, padding=-1, groups=2)
    with pytest.raises(ValueError):
        conv2d.conv2d(x, wt, bi, padding="full", groups=2)
    with pytest.raises(ValueError):
        conv2d.conv2d(x, wt, bi, groups=3)          # does not divide 4 and 6
    with pytest.raises(ValueError):
        conv2d.conv2d(x, wt, bi, groups=1)          # w has 2 channels per group, x 4
    with pytest.raises(ValueError):
        conv2d.conv2d(x, wt, bi, dilation=5, groups=2)  # span 11 on 10: empty output
    with pytest.raises(ValueError):
        conv2d.conv2d(x, wt, bi[:5], groups=2)      # bias of the wrong length
    with pytest.raises(TypeError):
        conv2d.conv2d(x, wt, bi.double(), groups=2)
    with pytest.raises(TypeError):
        conv2d.conv2d(x, wt, bi, stride=1.5, groups=2)
    with pytest.raises(TypeError):
        conv2d.conv2d(x.cpu(), wt, bi, groups=2)


def test_out_gets_the_result_and_bad_calls_leave_it_untouched():
    x, wt, bi = _geometry_inputs(16, 2, 4, 6, 12, 12, 3, 3, 2, True)
    ref = _ref_geometry(x, wt, bi, padding=1, groups=2)
    out = torch.full((2, 6, 12, 12), 7.0, device="cuda")
    assert conv2d.conv2d(x, wt, bi, padding=1, groups=2, out=out) is out and _ok(out, ref)
    out.fill_(7.0)
    for call in (lambda: conv2d.conv2d(x, wt, bi, padding=0, groups=2, out=out),  # wrong shape
                 lambda: conv2d.conv2d(x.double(), wt, bi, padding=1, groups=2, out=out),
                 lambda: conv2d.conv2d(x, wt, bi, padding=1, groups=3, out=out),
                 lambda: conv2d.conv2d(x, wt, bi, padding=1, groups=2, out=out.double())):
        with pytest.raises((TypeError, ValueError)):
            call()
    assert bool((out == 7.0).all())
    view = torch.full((2, 6, 12, 24), 7.0, device="cuda")[..., ::2]  # not contiguous
    assert conv2d.conv2d(x, wt, bi, padding=1, groups=2, out=view) is view and _ok(view, ref)


def test_out_sharing_an_inputs_memory_is_refused():
    """An in-place call (out= a view of x, w or bias) would read what it has partly written: it
    raises, out untouched, on every path (the first calls go through Python, later ones through
    the fast path's Call and entry, which leave it to Python)."""
    x, wt, bi = _geometry_inputs(17, 2, 6, 6, 10, 10, 3, 3, 1, True)
    ref = _ref_geometry(x, wt, bi, padding=1)
    for _ in range(3):
        y = conv2d.conv2d(x, wt, bi, padding=1)
    assert _ok(y, ref)
    buf = torch.zeros(x.numel() + 128, device="cuda")
    for shift in (0, 17, -17):  # out exactly x, or overlapping its start or its end
        xs = buf[64:64 + x.numel()].view_as(x)
        xs.copy_(x)
        out = buf[64 + shift:64 + shift + x.numel()].view_as(x)
        snapshot = buf.clone()
        for _ in range(3):
            with pytest.raises(ValueError, match="shares memory"):
                conv2d.conv2d(xs, wt, bi, padding=1, out=out)
        torch.cuda.synchronize()
        assert torch.equal(buf, snapshot)
    packed = torch.cat([wt.flatten(), bi, torch.zeros(x.numel(), device="cuda")])
    w2 = packed[:wt.numel()].view_as(wt)
    b2 = packed[wt.numel():wt.numel() + bi.numel()]
    for start in (wt.numel() - 8, wt.numel()):  # over w's end and the bias; the bias alone
        out = packed[start:start + x.numel()].view_as(x)
        snapshot = packed.clone()
        with pytest.raises(ValueError, match="shares memory"):
            conv2d.conv2d(x, w2, b2, padding=1, out=out)
        torch.cuda.synchronize()
        assert torch.equal(packed, snapshot)


def test_concurrent_threads_and_streams():
    import threading
    errors, bad = [], []
    cases = [(2, 8, 8, 24, 24, 3, 3, 1, True), (2, 16, 16, 20, 20, 5, 5, 16, False),
             (1, 12, 6, 17, 13, 3, 3, 3, True)]

    def worker(t):
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                for i in range(8):
                    dims = cases[(t + i) % len(cases)]
                    x, wt, bi = _geometry_inputs(1000 * t + i, *dims)
                    y = conv2d.conv2d(x, wt, bi, padding=1, groups=dims[7])
                    s.synchronize()
                    if not _ok(y, _ref_geometry(x, wt, bi, padding=1, groups=dims[7])):
                        bad.append((t, i))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and not bad, (errors, bad)
