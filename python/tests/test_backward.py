"""The backward through the library on the GPU host (pytest, from the installed wheel): the
gradients of conv2d.conv2d (autograd) and conv2d.grad's functions against float64 PyTorch on
every geometry part and on data that is not randn, only the gradients asked for computed, bitwise
the same on every call, under torch.use_deterministic_algorithms(True), double backward, a
compiled training step, and sizes that do not fit refused.
"""
import copy

import pytest
import torch
import torch.nn.functional as F

import conv2d
from conv2d import grad as cgrad

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CASES = [
    # (B, Cin, Cout, H, W, Kh, Kw), F.conv2d's keyword arguments, bias
    ((2, 5, 7, 23, 19, 3, 4), dict(padding=(2, 1)), False),
    ((2, 6, 5, 45, 38, 2, 3), dict(stride=(3, 4)), True),            # stride > kernel
    ((1, 3, 16, 64, 64, 7, 7), dict(stride=2, padding=3), True),     # ResNet's stem, smaller
    ((2, 4, 6, 17, 15, 1, 1), dict(dilation=(2, 3)), False),         # dilation with K = 1
    ((2, 5, 4, 29, 27, 3, 3), dict(dilation=(2, 3)), True),
    ((2, 8, 8, 26, 22, 5, 3), dict(groups=8, padding=1), True),      # depthwise
    ((1, 4, 12, 19, 17, 3, 3), dict(groups=4, stride=2), True),      # depthwise x3, strided
    ((2, 6, 10, 21, 18, 4, 3), dict(groups=2), False),
    ((2, 9, 6, 33, 28, 5, 3), dict(padding=(2, 0), stride=(2, 3), dilation=(2, 1), groups=3),
     True),
    ((2, 4, 4, 5, 5, 3, 3), dict(dilation=2), False),                # output 1x1
    ((1, 2, 3, 4, 4, 2, 2), dict(padding=3), True),                  # padding wider than kernel
    ((2, 5, 3, 16, 13, 4, 4), dict(padding="same"), True),           # asymmetric padding
    ((3, 64, 32, 14, 14, 3, 3), dict(padding=1), True),              # a tensor-core tile
    ((4, 32, 64, 28, 28, 1, 1), dict(stride=2), False),              # 1x1 stride 2
]
IDS = [f"{d}-{k}-{'bias' if b else 'nobias'}" for d, k, b in CASES]


def _bar(g, ref):
    err = (g.double() - ref).abs()
    return float((err / (1e-3 + 1e-3 * ref.abs())).max()) if err.numel() else 0.0


def _inputs(seed, dims, kw, bias, kind="randn"):
    b, cin, cout, h, w, kh, kwid = dims
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(b, cin, h, w, device="cuda", generator=g)
    wt = torch.randn(cout, cin // kw.get("groups", 1), kh, kwid, device="cuda", generator=g)
    bi = torch.randn(cout, device="cuda", generator=g) if bias else None
    if kind == "large_mean":
        x += 100.0
    elif kind == "outliers":
        # One in x and one in w: two in one sum can cancel below what any fp32 summation
        # resolves (conv/conv.h, reference/input_classes.h).
        x.view(-1)[x.numel() // 3] = 1e4
        wt.view(-1)[wt.numel() // 2] = -1e3
    return x, wt, bi


def _grads(x, w, bias, dy, kw, fn):
    leaves = [t.detach().requires_grad_() for t in (x, w) + ((bias,) if bias is not None else ())]
    y = fn(*leaves[:2], leaves[2] if bias is not None else None, **kw)
    return y, torch.autograd.grad(y, leaves, dy)


@pytest.mark.parametrize("dims,kw,bias", CASES, ids=IDS)
@pytest.mark.parametrize("kind", ["randn", "large_mean", "outliers"])
def test_gradients_within_the_bar_against_float64(dims, kw, bias, kind):
    x, w, b = _inputs(sum(dims), dims, kw, bias, kind)
    y = F.conv2d(x, w, b, **kw)
    dy = torch.randn(y.shape, device="cuda", generator=torch.Generator(device="cuda")
                     .manual_seed(7))
    _, ours = _grads(x, w, b, dy, kw, conv2d.conv2d)
    d = lambda t: None if t is None else t.double()
    _, ref = _grads(d(x), d(w), d(b), dy.double(), kw, F.conv2d)
    for name, g, r in zip(("dx", "dw", "db"), ours, ref):
        assert g.dtype == torch.float32 and g.shape == r.shape
        assert _bar(g, r) <= 1.0, (name, _bar(g, r))


@pytest.mark.parametrize("path", ["fast path's node", "Python node", "op"])
def test_the_eager_training_path_and_the_op_agree_bitwise(monkeypatch, path):
    from conv2d import functional
    if path != "fast path's node":
        monkeypatch.setattr(functional, "_train_node", lambda call: False)
        monkeypatch.setattr(functional, "_fast_conv2d", None)
    monkeypatch.setattr(functional, "_EAGER_TRAIN", path != "op")
    x, w, b = _inputs(5, (2, 16, 24, 20, 18, 3, 3), {}, True)
    dy = torch.randn(2, 24, 10, 9, device="cuda")
    y, g = _grads(x, w, b, dy, dict(stride=2, padding=1), conv2d.conv2d)
    xx, ww, bb = (t.detach().requires_grad_() for t in (x, w, b))
    yo = torch.ops.conv2d.conv2d(xx, ww, bb, [2, 2], [1, 1, 1, 1], [1, 1], 1)
    go = torch.autograd.grad(yo, (xx, ww, bb), dy)
    assert torch.equal(y, yo) and all(torch.equal(p, q) for p, q in zip(g, go))


def test_the_fast_paths_training_node_computes_only_what_is_asked_for():
    from conv2d import functional
    x, w, b = _inputs(1, (2, 4, 6, 12, 12, 3, 3), {}, True)
    conv2d.conv2d(x, w, padding=1)  # loads the fast path, if it loads here
    fast = functional._fast
    if fast is None or not hasattr(fast, "train_runs"):
        pytest.skip("NOT TESTED here: no fast path for this Python and PyTorch")
    for x_grad, w_grad, expect in [(False, True, (1, 0, 1)), (True, False, (1, 1, 0)),
                                   (True, True, (1, 1, 1))]:
        xx, ww = x.clone().requires_grad_(x_grad), w.clone().requires_grad_(w_grad)
        before = fast.train_runs()
        y = conv2d.conv2d(xx, ww, b, padding=1)
        assert "ConvTrain" in y.grad_fn.name(), y.grad_fn.name()
        y.sum().backward()
        assert tuple(a - c for a, c in zip(fast.train_runs(), before)) == expect


def test_only_the_gradients_asked_for_are_computed(monkeypatch):
    from conv2d import functional
    monkeypatch.setattr(functional, "_train_node", lambda call: False)  # the Python node
    monkeypatch.setattr(functional, "_fast_conv2d", None)  # and not the C++ entry's
    ran = []
    real = cgrad._enqueue
    monkeypatch.setattr(cgrad, "_enqueue", lambda call, ptrs: (ran.append(call.op),
                                                               real(call, ptrs))[1])
    x, w, b = _inputs(1, (2, 4, 6, 12, 12, 3, 3), {}, True)
    for x_grad, w_grad, expect in [(False, True, [2]), (True, False, [1]), (True, True, [1, 2])]:
        ran.clear()
        xx, ww = x.clone().requires_grad_(x_grad), w.clone().requires_grad_(w_grad)
        conv2d.conv2d(xx, ww, b, padding=1).sum().backward()
        assert sorted(ran) == expect, (x_grad, w_grad, ran)
        assert (xx.grad is not None) == x_grad and (ww.grad is not None) == w_grad


def test_bitwise_the_same_on_every_call_and_under_deterministic_algorithms():
    x, w, b = _inputs(2, (4, 32, 48, 28, 28, 3, 3), {}, True)
    dy = torch.randn(4, 48, 14, 14, device="cuda")
    first = None
    torch.use_deterministic_algorithms(True)
    try:
        for _ in range(3):
            _, g = _grads(x, w, b, dy, dict(stride=2, padding=1), conv2d.conv2d)
            if first is None:
                first = g
            for a, c in zip(first, g):
                assert torch.equal(a, c)
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("dims,kw,bias", CASES[:10], ids=IDS[:10])
def test_grad_functions_match_torch_nn_grad_in_float64(dims, kw, bias):
    x, w, _ = _inputs(sum(dims) + 1, dims, kw, False)
    dy = torch.randn(F.conv2d(x, w, **kw).shape, device="cuda")
    args = {k: v for k, v in kw.items()}
    dx = cgrad.conv2d_input(x.shape, w, dy, **args)
    dw = cgrad.conv2d_weight(x, w.shape, dy, **args)
    assert _bar(dx, torch.nn.grad.conv2d_input(x.shape, w.double(), dy.double(), **args)) <= 1
    assert _bar(dw, torch.nn.grad.conv2d_weight(x.double(), w.shape, dy.double(), **args)) <= 1


def test_double_backward_matches_float64():
    kw = dict(stride=2, padding=1, groups=2)
    x, w, b = _inputs(3, (2, 4, 6, 13, 11, 3, 3), kw, True)

    def second(fn, x, w, b):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        y = fn(x, w, b, **kw)
        gx, gw, gb = torch.autograd.grad(y.square().sum(), (x, w, b), create_graph=True)
        return torch.autograd.grad(gx.square().sum() + gw.square().sum() + gb.sum(), (x, w, b))
    ours = second(conv2d.conv2d, x, w, b)
    ref = second(F.conv2d, x.double(), w.double(), b.double())
    for g, r in zip(ours, ref):
        assert _bar(g, r) <= 1.0, _bar(g, r)


def test_a_compiled_training_step_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=4),
                                torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 10)).cuda()
    conv2d.convert(model)
    x = torch.randn(4, 3, 16, 16, device="cuda")
    model(x).square().mean().backward()
    eager = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.compile(lambda x: model(x).square().mean(), fullgraph=True)(x).backward()
    for e, c in zip(eager, model.parameters()):
        assert torch.allclose(e, c.grad, rtol=1e-4, atol=1e-5)


def test_the_ops_c_kernels_run_a_signature_after_its_first_call(monkeypatch):
    """The custom ops' kernels in C++ (python/fast_path_ops.cc): a signature's first call goes
    through the Python kernel (plan, checks), later ones run in C++ without it, bitwise the
    same; with a gradient to record, the Python autograd formula still records the graph."""
    from conv2d import functional
    x, w, b = _inputs(6, (2, 8, 12, 10, 9, 3, 3), {}, True)
    dy = torch.randn(2, 12, 5, 5, device="cuda")
    geometry = ([2, 2], [1, 1, 1, 1], [1, 1], 1)
    ops = torch.ops.conv2d
    calls = [lambda: ops.conv2d.default(x, w, b, *geometry),
             lambda: ops.conv2d_input_grad.default(dy, w, list(x.shape), *geometry),
             lambda: ops.conv2d_weight_grad.default(x, dy, list(w.shape), *geometry, True)]
    first = [c() for c in calls]  # loads the fast path (and its kernels), makes the plans
    if functional._fast is None or not hasattr(functional._fast, "register_ops"):
        pytest.skip("NOT TESTED here: no fast path for this Python and PyTorch")
    first = [c() for c in calls]  # through the Python kernels once more: now remembered
    seen = []
    for module, name in ((functional, "_direct_call"), (cgrad, "_dgrad"), (cgrad, "_wgrad")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _r=real, **k: seen.append(1) or _r(*a, **k))
    again = [c() for c in calls]
    assert not seen, "a remembered signature went through the op's Python kernel"
    flat = lambda r: list(r) if isinstance(r, tuple) else [r]
    assert all(torch.equal(p, q) for a, c in zip(first, again) for p, q in zip(flat(a), flat(c)))
    xx = x.clone().requires_grad_()
    y = ops.conv2d.default(xx, w, b, *geometry)
    assert y.grad_fn is not None
    y.backward(torch.ones_like(y))
    assert xx.grad is not None and xx.grad.shape == x.shape
def test_a_gradient_that_is_a_negative_view_counts_as_its_values():
    x, w, b = _inputs(7, (2, 4, 6, 9, 8, 3, 3), {}, True)
    g = torch.randn(2, 6, 9, 8, device="cuda")
    grads = []
    for dy in (-g, g._neg_view()):
        xx, ww, bb = (t.clone().requires_grad_() for t in (x, w, b))
        conv2d.conv2d(xx, ww, bb, padding=1).backward(dy)
        grads.append((xx.grad, ww.grad, bb.grad))
    assert all(torch.equal(p, q) for p, q in zip(*grads))


def test_sizes_that_do_not_fit_are_refused():
    x, w, _ = _inputs(4, (2, 4, 6, 12, 12, 3, 3), {}, False)
    with pytest.raises(ValueError):
        cgrad.conv2d_input(x.shape, w, torch.randn(2, 6, 11, 10, device="cuda"))
    with pytest.raises(ValueError):
        cgrad.conv2d_weight(x, w.shape, torch.randn(2, 5, 10, 10, device="cuda"))
    with pytest.raises(TypeError):
        cgrad.conv2d_weight(x.double(), w.shape, torch.randn(2, 6, 10, 10, device="cuda"))
    with pytest.raises(ValueError):
        torch.ops.conv2d.conv2d_input_grad(torch.randn(2, 6, 9, 10, device="cuda"), w,
                                           [2, 4, 12, 12], [1, 1], [0, 0, 0, 0], [1, 1], 1)


TRANSPOSED = [
    # input (B, Cin, H, W), weight (Cin, Cout / groups, Kh, Kw), keyword arguments
    ((2, 6, 9, 7), (6, 4, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    ((1, 8, 5, 6), (8, 3, 4, 2), dict(stride=(2, 3), groups=2, dilation=(1, 2))),
    ((2, 4, 7, 7), (4, 5, 2, 2), dict(stride=2)),                     # a 2x2/2 upsampler
    ((2, 3, 6, 5), (3, 2, 3, 3), dict(stride=1, dilation=3, output_padding=2)),  # op >= stride
    ((4, 8, 8), (4, 2, 3, 3), dict(padding=1)),                       # unbatched
]


@pytest.mark.parametrize("xs,ws,kw", TRANSPOSED)
def test_conv_transpose2d_and_its_gradients_within_the_bar(xs, ws, kw):
    g = torch.Generator(device="cuda").manual_seed(sum(xs))
    x = torch.randn(xs, device="cuda", generator=g)
    w = torch.randn(ws, device="cuda", generator=g)
    b = torch.randn(ws[1] * kw.get("groups", 1), device="cuda", generator=g)
    ref = F.conv_transpose2d(x.double(), w.double(), b.double(), **kw)
    dy = torch.randn(ref.shape, device="cuda", generator=g)
    _, ours = _grads(x, w, b, dy, kw, conv2d.conv_transpose2d)
    y = conv2d.conv_transpose2d(x, w, b, **kw)
    assert y.shape == ref.shape and _bar(y, ref) <= 1.0
    d = lambda t: t.double()
    _, refs = _grads(d(x), d(w), d(b), dy.double(), kw, F.conv_transpose2d)
    for name, o, r in zip(("dinput", "dweight", "dbias"), ours, refs):
        assert _bar(o, r) <= 1.0, (name, _bar(o, r))


@pytest.mark.parametrize("xs,ws,kw", [((2, 6, 50), (8, 3, 5), dict(stride=2, padding=2,
                                                                     groups=2)),
                                      ((3, 4, 31), (4, 1, 7), dict(padding="same", groups=4)),
                                      ((5, 40), (6, 5, 3), dict(dilation=2))])
def test_conv1d_and_its_gradients_within_the_bar(xs, ws, kw):
    g = torch.Generator(device="cuda").manual_seed(sum(xs))
    x = torch.randn(xs, device="cuda", generator=g)
    w = torch.randn(ws, device="cuda", generator=g)
    b = torch.randn(ws[0], device="cuda", generator=g)
    ref = F.conv1d(x.double(), w.double(), b.double(), **kw)
    dy = torch.randn(ref.shape, device="cuda", generator=g)
    y, ours = _grads(x, w, b, dy, kw, conv2d.conv1d)
    assert y.shape == ref.shape and _bar(y, ref) <= 1.0
    _, refs = _grads(x.double(), w.double(), b.double(), dy.double(), kw, F.conv1d)
    for o, r in zip(ours, refs):
        assert _bar(o, r) <= 1.0


def test_convert_swaps_conv1d_and_conv_transpose2d_and_trains():
    torch.manual_seed(1)
    model = torch.nn.ModuleDict(dict(
        c1=torch.nn.Conv1d(4, 6, 3, padding=1), up=torch.nn.ConvTranspose2d(6, 3, 2, stride=2),
        c2=torch.nn.Conv2d(3, 5, 3, padding=1))).cuda()
    ref = copy.deepcopy(model).double()
    report = conv2d.convert(model)
    assert sorted(report.converted) == ["c1", "c2", "up"], report
    assert type(model["c1"]) is conv2d.nn.Conv1d and type(model["up"]) is conv2d.nn.ConvTranspose2d

    def run(m, x):
        h = m["c1"](x)                                   # (B, 6, L)
        h = m["up"](h.unsqueeze(-1).expand(-1, -1, -1, 4))  # (B, 3, 2L, 8)
        return m["c2"](h)
    x = torch.randn(2, 4, 10, device="cuda")
    run(model, x).square().sum().backward()
    run(ref, x.double()).square().sum().backward()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert _bar(p.grad, q.grad) <= 1.0, n
