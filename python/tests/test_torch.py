"""conv2d inside PyTorch on the GPU host (pytest, from the installed wheel): autograd (gradients
against float64 F.conv2d's, gradcheck, a training step against PyTorch's), torch.compile with
fullgraph=True, CUDA graph capture and replay, conv2d.nn.Conv2d and convert() on real models
(torchvision's ResNet-50 against the same model in float64).
"""
import copy

import pytest
import torch
import torch.nn.functional as F

import conv2d

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(autouse=True)
def _no_tf32():
    # The references below are float64 or PyTorch's float32 with TF32 off.
    old = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


def _within_bar(y, ref):
    return bool(((y.double() - ref).abs() <= 1e-3 + 1e-3 * ref.abs()).all())


def _rand(*shape, seed=0, requires_grad=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g).requires_grad_(requires_grad)


GRAD_CASES = [  # x shape, w shape, kwargs
    ((2, 4, 11, 9), (6, 4, 3, 3), dict(padding=1)),
    ((2, 6, 12, 10), (6, 3, 3, 2), dict(stride=2, padding=(1, 0), dilation=(1, 2), groups=2)),
    ((1, 8, 9, 9), (8, 1, 5, 5), dict(padding="same", groups=8)),
    ((2, 3, 8, 7), (4, 3, 2, 2), dict(padding="same")),  # asymmetric padding
]


@pytest.mark.parametrize("xs,ws,kw", GRAD_CASES)
def test_gradients_match_float64(xs, ws, kw):
    x = _rand(*xs, seed=1, requires_grad=True)
    w = _rand(*ws, seed=2, requires_grad=True)
    b = _rand(ws[0], seed=3, requires_grad=True)
    y = conv2d.conv2d(x, w, b, **kw)
    gy = _rand(*y.shape, seed=4)
    gx, gw, gb = torch.autograd.grad(y, (x, w, b), gy)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    y64 = F.conv2d(x64, w64, b64, **kw)
    assert _within_bar(y.detach(), y64.detach())
    rx, rw, rb = torch.autograd.grad(y64, (x64, w64, b64), gy.double())
    for got, want in ((gx, rx), (gw, rw), (gb, rb)):
        assert got.shape == want.shape and _within_bar(got, want)


def test_gradcheck():
    # float32 finite differences: tolerances sized for float32 steps, not float64's.
    x = _rand(1, 2, 6, 5, seed=5, requires_grad=True)
    w = _rand(3, 2, 3, 2, seed=6, requires_grad=True)
    b = _rand(3, seed=7, requires_grad=True)
    with pytest.warns(UserWarning):  # gradcheck's note that the inputs are not float64
        assert torch.autograd.gradcheck(
            lambda x, w, b: conv2d.conv2d(x, w, b, stride=(2, 1), padding=(1, 2)), (x, w, b),
            eps=1e-2, atol=5e-3, rtol=5e-3)


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(32),
            torch.nn.ReLU(),
            torch.nn.Conv2d(32, 32, 5, padding=2, groups=32), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 1), torch.nn.ReLU())
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


def test_a_training_step_matches_pytorch():
    torch.manual_seed(0)
    ref = SmallCNN().cuda()
    mine = copy.deepcopy(ref)
    report = conv2d.convert(mine)
    assert len(report.converted) == 4 and not report.left, report
    x = _rand(8, 3, 32, 32, seed=8)
    target = torch.randint(0, 10, (8,), device="cuda")
    grads = []
    for model in (ref, mine):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), target)
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        opt.step()
    for name, g in grads[0].items():
        err = (grads[1][name] - g).abs().max().item()
        assert err <= 1e-4 * (1 + g.abs().max().item()), (name, err)
    for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
        assert torch.allclose(p, q, rtol=1e-4, atol=1e-5), name


def test_out_is_refused_when_autograd_is_involved():
    x = _rand(1, 2, 6, 6, seed=18)
    w = _rand(3, 2, 3, 3, seed=19, requires_grad=True)
    out = torch.full((1, 3, 4, 4), 7.0, device="cuda")
    with pytest.raises(RuntimeError, match="out="):
        conv2d.conv2d(x, w, out=out)
    assert bool((out == 7.0).all())
    with torch.no_grad():  # no graph: out= is fine, and its version moves (it was written)
        before = out._version
        conv2d.conv2d(x, w, out=out)
        assert out._version > before


def test_converted_layers_take_the_direct_path_under_no_grad(monkeypatch):
    from conv2d import functional
    conv = conv2d.nn.Conv2d(4, 4, 3, padding=1).cuda()  # its weight is an nn.Parameter
    seen = []
    op = functional.conv2d_op
    monkeypatch.setattr(functional, "conv2d_op", lambda *a: seen.append(1) or op(*a))
    with torch.no_grad():
        conv(_rand(1, 4, 8, 8, seed=20))
    assert not seen, "an nn.Parameter weight sent a no-grad call through the dispatcher"
    conv(_rand(1, 4, 8, 8, seed=21))  # a gradient is wanted: eager training's own node
    assert not seen and "Train" in conv(_rand(1, 4, 8, 8, seed=21)).grad_fn.name()
    monkeypatch.setattr(functional, "_EAGER_TRAIN", False)  # as CONV2D_EAGER_TRAIN=0 at import:
    monkeypatch.setattr(functional, "_fast_conv2d", None)  # no TrainCall in the C++ entry
    conv(_rand(1, 4, 8, 8, seed=21))  # and with that path off, the op
    assert seen


def test_compile_fullgraph_small_cnn():
    torch._dynamo.reset()
    torch.manual_seed(1)
    model = SmallCNN().cuda().eval()
    conv2d.convert(model)
    x = _rand(4, 3, 32, 32, seed=9)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(x.double())
        compiled = torch.compile(model, fullgraph=True)
        got = compiled(x)
        got2 = compiled(_rand(4, 3, 32, 32, seed=10))
    assert _within_bar(got, want)
    assert got2.shape == (4, 10)
    # No graph break, and the op is in the graph, once per converted layer.
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    ops = [n.target for g in explanation.graphs for n in g.graph.nodes
           if n.op == "call_function" and "conv2d.conv2d" in str(n.target)]
    assert len(ops) == 4, ops


def test_cuda_graph_capture_and_replay():
    x = _rand(2, 8, 20, 20, seed=11)
    w = _rand(12, 4, 3, 3, seed=12)
    b = _rand(12, seed=13)
    kw = dict(stride=1, padding=1, groups=2)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        conv2d.conv2d(x, w, b, **kw)  # the warm-up that makes the plan
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = conv2d.conv2d(x, w, b, **kw)
        # A problem never seen before cannot make its plan during capture: it raises, and the
        # capture goes on.
        with pytest.raises(RuntimeError, match="warm-up"):
            conv2d.conv2d(x[:, :, :7, :9], w, b, **kw)
    for seed in (14, 15):
        x.copy_(_rand(2, 8, 20, 20, seed=seed))  # in place: the graph reads x's memory
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert _within_bar(y, F.conv2d(x.double(), w.double(), b.double(), **kw))


def test_cuda_graph_capture_of_a_call_with_a_workspace():
    # The workspace is a raw block of PyTorch's caching allocator on the capturing stream: the
    # graph's private pool must serve it (else, freed at the end of the capture, it could go to
    # the tensor allocated below on the same stream, and each replay would write into that
    # tensor), and the library must launch its kernels plainly into the capture (its own graphs
    # are for streams that are not being captured).
    x = _rand(1, 64, 128, 128, seed=21)
    w = _rand(64, 64, 8, 8, seed=22)
    from conv2d import functional
    conv2d.conv2d(x, w)  # the warm-up that makes the plan
    assert functional._call_for(x, w, None, 1, 0, 1, 1, False).run[1] > 0, "no workspace"
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        conv2d.conv2d(x, w)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        y = conv2d.conv2d(x, w)
    with torch.cuda.stream(s):
        bystander = torch.full((1 << 24,), 7.0, device="cuda")  # 64 MB, on the capture stream
    for seed in (23, 24):
        x.copy_(_rand(1, 64, 128, 128, seed=seed))
        y.fill_(float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            g.replay()
        torch.cuda.synchronize()
        ref = F.conv2d(x.double(), w.double())
        assert _within_bar(y, ref)
        assert bool((bystander == 7.0).all()), "a replay wrote into memory the graph does not own"
    # Eager calls after the capture (the library's own graph for this stream) agree too.
    assert _within_bar(conv2d.conv2d(x, w), ref)


def test_nn_conv2d_falls_back_where_the_library_does_not_serve():
    conv = conv2d.nn.Conv2d(4, 6, 3, padding=1, padding_mode="circular").cuda()
    x = _rand(2, 4, 9, 9, seed=16)
    ref = torch.nn.Conv2d(4, 6, 3, padding=1, padding_mode="circular").cuda()
    ref.load_state_dict(conv.state_dict())
    with torch.no_grad():
        want = ref.double()(x.double())
        assert _within_bar(conv(x), want)                    # the library, padded first
        assert torch.equal(conv.half()(x.half()), ref.half()(x.half()))  # PyTorch's half


def test_converted_resnet50_matches_float64(monkeypatch):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(2)
    model = torchvision.models.resnet50().cuda().eval()
    ref64 = copy.deepcopy(model).double()
    folded = copy.deepcopy(model)
    report = conv2d.convert(model)
    assert len(report.converted) == 53 and not report.left, report
    conv2d.convert(folded)
    # Folding a model already converted: its conv2d.nn.Conv2d layers are found as convs.
    report = conv2d.convert(folded, fold_batchnorm=True)
    assert len(report.folded) == 53 and len(report.left) == 53, report
    x = _rand(2, 3, 224, 224, seed=17)
    from conv2d import functional
    conv2d.conv2d(x, model.conv1.weight)  # a first plan loads the library and the fast path
    calls, direct, entry = [], functional._direct, functional._fast_conv2d
    monkeypatch.setattr(functional, "_direct", lambda *a, **k: calls.append(1) or direct(*a, **k))
    if entry is not None:  # the fast path's entry takes the signatures it has run before

        def counted_entry(*args):
            y = entry(*args)
            if y is not None:
                calls.append(1)
            return y

        monkeypatch.setattr(functional, "_fast_conv2d", counted_entry)
    with torch.no_grad():
        want = ref64(x.double())
        assert _within_bar(model(x), want)
        assert len(calls) == 53  # every layer through the library, none through cuDNN
        assert _within_bar(folded(x), want)
