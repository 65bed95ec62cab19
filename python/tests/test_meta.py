"""The package's PyTorch side where no GPU is needed (pytest, or run as a script): the custom op
conv2d::conv2d is registered, its fake implementation gives F.conv2d's output shapes on meta
tensors, torch.compile(fullgraph=True) traces models that call it with no graph break, and
convert() swaps layers and folds BatchNorm (checked on the CPU, where a converted layer runs
torch.nn.Conv2d's own forward), and the backward's ops (conv2d.grad) give the gradients'
shapes, are what autograd, double backward and a compiled training step trace, and refuse
sizes that do not fit.

    PYTHONPATH=<site-packages holding the wheel> python3 python/tests/test_meta.py
"""
import copy
import sys

import torch
import torch.nn.functional as F

import conv2d

GEOMETRIES = [  # (x shape, w shape, kwargs)
    ((2, 8, 17, 13), (6, 8, 3, 3), {}),
    ((2, 8, 17, 13), (6, 4, 3, 5), dict(stride=2, padding=(1, 2), dilation=(2, 1), groups=2)),
    ((1, 16, 9, 9), (16, 1, 7, 7), dict(padding="same", groups=16)),
    ((3, 4, 8, 10), (4, 4, 4, 4), dict(padding="same", dilation=2)),
    ((4, 6, 5, 5), (10, 6, 5, 5), dict(padding="valid")),
    ((6, 12, 12), (4, 3, 2, 2), dict(stride=(2, 1), groups=2)),  # unbatched
]


def test_the_op_is_registered():
    assert hasattr(torch.ops.conv2d, "conv2d")
    schema = str(torch.ops.conv2d.conv2d.default._schema)
    assert "Tensor? bias" in schema, schema


def test_fake_implementation_gives_f_conv2d_shapes_on_meta_tensors():
    for xs, ws, kw in GEOMETRIES:
        x = torch.empty(xs, device="meta")
        w = torch.empty(ws, device="meta")
        b = torch.empty(ws[0], device="meta")
        want = F.conv2d(x, w, b, **kw).shape
        got = conv2d.conv2d(x, w, b, **kw)
        assert got.device.type == "meta" and got.shape == want, (xs, ws, kw, got.shape, want)


def _expect_refused(x, w, cases):
    """conv2d.conv2d(x, w, None, **kw) raises `error` for every (kw, error) of cases."""
    for kw, error in cases:
        try:
            conv2d.conv2d(x, w, None, **kw)
        except error:
            continue
        raise AssertionError(f"{kw} did not raise {error.__name__}")


def test_the_op_refuses_as_f_conv2d_on_meta_tensors():
    x = torch.empty(2, 4, 10, 10, device="meta")
    w = torch.empty(6, 2, 3, 3, device="meta")
    _expect_refused(x, w, [(dict(stride=0, groups=2), ValueError), (dict(groups=3), ValueError),
                           (dict(padding="full", groups=2), ValueError),
                           (dict(dilation=5, groups=2), ValueError),
                           (dict(padding="same", stride=2, groups=2), ValueError)])
    try:
        conv2d.conv2d(torch.randn(2, 4, 10, 10), torch.randn(6, 2, 3, 3), groups=2)
    except TypeError as e:
        assert "CUDA" in str(e), e
    else:
        raise AssertionError("CPU tensors were accepted")


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 1), torch.nn.ReLU())
        self.reflect = torch.nn.Conv2d(16, 16, 3, padding=1, padding_mode="reflect")
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = self.reflect(self.features(x))
        return self.head(x.mean((2, 3)))


def test_compile_fullgraph_traces_the_op_with_no_graph_break():
    model = SmallNet().eval()
    conv2d.convert(model)
    x = torch.empty(2, 3, 16, 16, device="meta")
    model = model.to("meta")
    # Functions first: conv2d.conv2d itself, then a converted model, both on meta tensors
    # (backend "aot_eager" runs AOTAutograd over fake tensors, as inductor does).
    f = torch.compile(lambda x, w: conv2d.conv2d(x, w, padding=1), fullgraph=True,
                      backend="aot_eager")
    assert f(x, torch.empty(4, 3, 3, 3, device="meta")).shape == (2, 4, 16, 16)
    torch._dynamo.reset()
    out = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    assert out.shape == (2, 10), out.shape
    gm, _ = torch._dynamo.export(model)(x)
    ops = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert sum(1 for t in ops if "conv2d.conv2d" in str(t)) == 4, ops


def test_convert_swaps_and_reports():
    model = SmallNet()
    model.half_conv = torch.nn.Conv2d(2, 2, 1).half()

    class Custom(torch.nn.Conv2d):
        def forward(self, x):
            return super().forward(x) * 2

    model.custom = Custom(2, 2, 1)
    state = copy.deepcopy(model.state_dict())
    report = conv2d.convert(model)
    assert report.model is model
    assert sorted(report.converted) == ["features.0", "features.3", "features.6", "reflect"]
    assert set(report.left) == {"half_conv", "custom"}, report
    assert "float16" in report.left["half_conv"] and "Custom" in report.left["custom"]
    assert all(type(model.get_submodule(n)) is conv2d.nn.Conv2d for n in report.converted)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert "left" in repr(report)
    # Converting again converts nothing more.
    again = conv2d.convert(model)
    assert again.converted == [] and all("already" in why for n, why in again.left.items()
                                         if n not in ("half_conv", "custom"))


def _with_bn_statistics(model):
    """model with BatchNorm statistics and affine parameters that are not the identity."""
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return model


def test_fold_batchnorm_matches_the_unfolded_model():
    torch.manual_seed(0)
    model = _with_bn_statistics(SmallNet())
    model.eval()
    folded = copy.deepcopy(model)
    try:
        conv2d.convert(SmallNet(), fold_batchnorm=True)  # training mode
    except ValueError as e:
        assert "eval" in str(e)
    else:
        raise AssertionError("folding a model in training mode was accepted")
    report = conv2d.convert(folded, fold_batchnorm=True)
    assert report.folded == ["features.1", "features.4"], report.folded
    assert isinstance(folded.features[1], torch.nn.Identity)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():  # on the CPU a converted layer runs torch.nn.Conv2d's forward
        want, got = model.double()(x.double()), folded(x).double()
    err = (got - want).abs()
    assert bool((err <= 1e-4 + 1e-4 * want.abs()).all()), err.max()


def test_from_torch_shares_the_parameters():
    conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=True)
    mine = conv2d.nn.Conv2d.from_torch(conv)
    assert type(conv) is torch.nn.Conv2d and type(mine) is conv2d.nn.Conv2d
    assert mine.weight is conv.weight and mine.bias is conv.bias
    assert mine.stride == (2, 2) and mine.padding == (1, 1)
    x = torch.randn(1, 4, 9, 9)
    assert torch.equal(mine(x), conv(x))  # CPU: torch's own forward


def _max_diff_after_folding(model, x):
    model.eval()
    folded = copy.deepcopy(model)
    report = conv2d.convert(folded, fold_batchnorm=True)
    with torch.no_grad():
        return (folded(x) - model(x)).abs().max().item(), report


def test_folding_leaves_what_it_cannot_fold_exactly():
    torch.manual_seed(1)
    x = torch.randn(2, 3, 8, 8)

    class ConvTwice(torch.nn.Module):  # one conv called twice, the BN after one call only
        def __init__(self):
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 3, 3, padding=1), torch.nn.BatchNorm2d(3)

        def forward(self, x):
            return self.bn(self.conv(x)) + self.conv(x)

    class BnTwice(ConvTwice):  # the BN also applied to another tensor
        def forward(self, x):
            return self.bn(self.conv(x)) + self.bn(x)

    class SharedWeight(torch.nn.Module):  # two convs, one weight
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Conv2d(3, 3, 3, padding=1), torch.nn.Conv2d(3, 3, 3, padding=1)
            self.b.weight = self.a.weight
            self.bn = torch.nn.BatchNorm2d(3)

        def forward(self, x):
            return self.bn(self.a(x)) + self.b(x)

    class Standardized(torch.nn.Conv2d):  # a conv with a forward of its own
        def forward(self, x):
            w = (self.weight - self.weight.mean()) / (self.weight.std() + 1e-5)
            return F.conv2d(x, w, self.bias, self.stride, self.padding)

    class Residual(torch.nn.Sequential):  # a Sequential with a forward of its own
        def forward(self, x):
            y = self[0](x)
            return y + self[1](y)

    hooked = torch.nn.Conv2d(3, 3, 3, padding=1)  # a pre-hook rescales its weight each call
    hooked.register_forward_pre_hook(lambda m, a: m.weight.data.mul_(1.0))
    models = [ConvTwice(), BnTwice(), SharedWeight(),
              torch.nn.Sequential(Standardized(3, 3, 3, padding=1), torch.nn.BatchNorm2d(3)),
              torch.nn.Sequential(
                  torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv2d(3, 3, 3, padding=1)),
                  torch.nn.BatchNorm2d(3)),
              torch.nn.Sequential(hooked, torch.nn.BatchNorm2d(3)),
              Residual(torch.nn.Conv2d(3, 3, 3, padding=1), torch.nn.BatchNorm2d(3))]
    bn_in_training = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 3, padding=1),
                                         torch.nn.BatchNorm2d(3))
    for model in models + [bn_in_training]:
        _with_bn_statistics(model)
    bn_in_training.eval()
    bn_in_training[1].train()
    folded = copy.deepcopy(bn_in_training)
    report = conv2d.convert(folded, fold_batchnorm=True)
    assert not report.folded and "training" in " ".join(report.left.values()), report
    for model in models:
        diff, report = _max_diff_after_folding(model, x)
        assert diff < 1e-5, (type(model).__name__, diff, report)


def test_bad_arguments_raise_type_or_value_errors():
    x = torch.empty(1, 4, 10, 10, device="meta")
    w = torch.empty(6, 4, 3, 3, device="meta")
    _expect_refused(x, w, [(dict(stride=2**64 + 1, padding=2**64), ValueError),
                           (dict(stride={1}), TypeError), (dict(stride=1.0), TypeError),
                           (dict(groups=2.0), TypeError), (dict(padding=[1, 2, 3]), ValueError)])
    try:
        conv2d.conv2d(3, w)
    except TypeError:
        pass
    else:
        raise AssertionError("a non-tensor input was accepted")
    try:
        torch.ops.conv2d.conv2d(x, w, None, [0, 1], [0, 0, 0, 0], [1, 1], 1)
    except (ValueError, RuntimeError):
        pass
    else:
        raise AssertionError("the op took stride 0")


def test_from_torch_keeps_the_original_hooks_apart():
    conv = torch.nn.Conv2d(2, 2, 1)
    mine = conv2d.nn.Conv2d.from_torch(conv)
    seen = []
    mine.register_forward_hook(lambda *a: seen.append("mine"))
    conv(torch.randn(1, 2, 3, 3))
    assert seen == [], seen


def _meta(shape, grad=False):
    return torch.empty(shape, device="meta", requires_grad=grad)


def test_the_backward_gives_gradient_shapes_through_the_library_ops():
    for xs, ws, kw in GEOMETRIES:
        x, w, b = _meta(xs, True), _meta(ws, True), _meta(ws[:1], True)
        y = conv2d.conv2d(x, w, b, **kw)
        gx, gw, gb = torch.autograd.grad(y.sum(), (x, w, b), create_graph=True)
        assert (gx.shape, gw.shape, gb.shape) == (x.shape, w.shape, b.shape)
        # Double backward: the ops' own gradients, shaped as their inputs.
        ggx, ggw = torch.autograd.grad(gx.sum() + gw.sum(), (x, w), allow_unused=True)
        assert ggw.shape == w.shape and (ggx is None or ggx.shape == x.shape)


def test_the_backward_computes_only_the_gradients_asked_for():
    def traced(x_grad, w_grad):
        def step(x, w):
            y = conv2d.conv2d(x, w, padding=1)
            wanted = [t for t in (x, w) if t.requires_grad]
            return torch.autograd.grad(y.square().sum(), wanted)
        from torch.fx.experimental.proxy_tensor import make_fx
        g = make_fx(step, tracing_mode="fake")(_meta((2, 4, 9, 8), x_grad),
                                               _meta((6, 4, 3, 3), w_grad))
        return sorted(str(n.target) for n in g.graph.nodes
                      if n.op == "call_function" and "conv2d." in str(n.target))
    both = traced(True, True)
    assert both == ["conv2d.conv2d.default", "conv2d.conv2d_input_grad.default",
                    "conv2d.conv2d_weight_grad.default"], both
    assert traced(False, True) == ["conv2d.conv2d.default",
                                   "conv2d.conv2d_weight_grad.default"]  # a first layer
    assert traced(True, False) == ["conv2d.conv2d.default",
                                   "conv2d.conv2d_input_grad.default"]  # frozen weights


def test_a_compiled_training_step_traces_the_backward_ops_with_no_graph_break():
    from torch._dynamo.backends.common import aot_autograd
    graphs = {}

    def keep(name):
        def compiler(gm, _):
            graphs[name] = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
            return gm
        return compiler
    model = SmallNet().to("meta")
    conv2d.convert(model)
    torch._dynamo.reset()
    step = torch.compile(lambda x: model(x).square().mean(), fullgraph=True,
                         backend=aot_autograd(fw_compiler=keep("forward"),
                                              bw_compiler=keep("backward")))
    step(_meta((2, 3, 16, 16))).backward()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())
    count = lambda name, op: sum(1 for t in graphs[name] if t == f"conv2d.{op}.default")
    assert count("forward", "conv2d") == 4, graphs["forward"]
    # Every layer's weight gradient; the data gradient of all but the first (the input needs
    # none).
    assert count("backward", "conv2d_weight_grad") == 4, graphs["backward"]
    assert count("backward", "conv2d_input_grad") == 3, graphs["backward"]


def test_grad_functions_match_torch_nn_grad_shapes_and_refuse_bad_sizes():
    w, dy = _meta((6, 2, 3, 3)), _meta((2, 6, 5, 4))
    assert conv2d.grad.conv2d_input((2, 4, 9, 8), w, dy, stride=2, padding=1,
                                    groups=2).shape == (2, 4, 9, 8)
    assert conv2d.grad.conv2d_weight(_meta((2, 4, 9, 8)), (6, 2, 3, 3), dy, stride=2,
                                     padding=1, groups=2).shape == (6, 2, 3, 3)
    for call, error in [
            (lambda: conv2d.grad.conv2d_input((2, 4, 9), w, dy), TypeError),
            (lambda: conv2d.grad.conv2d_input((2, 5, 9, 8), w, dy, groups=2), ValueError),
            (lambda: conv2d.grad.conv2d_weight(_meta((2, 4, 9, 8)), (6, 2, 3, 3),
                                               _meta((2, 6, 5)), groups=2), ValueError),
            (lambda: conv2d.grad.conv2d_weight(torch.empty(2, 4, 9, 8), (6, 2, 3, 3),
                                               torch.empty(2, 6, 7, 6), groups=2), TypeError),
            (lambda: conv2d.grad.conv2d_input((2, 4, 9, 8), w, dy, stride=0), ValueError)]:
        try:
            call()
        except error:
            continue
        raise AssertionError(f"no {error.__name__}")


if __name__ == "__main__":
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    for name, f in tests:
        f()
        print(f"PASSED {name}")
    print(f"{len(tests)} passed")
    sys.exit(0)
