"""conv2d.nn.Conv2d, a drop-in torch.nn.Conv2d, and convert(model), which swaps them in.

A converted layer keeps its parameters, buffers, hooks and state dict (the swap changes the
module's class, nothing else), so optimizers, checkpoints and DataParallel-style wrappers see the
same model. Its forward runs conv2d.conv2d when the call is one the library serves (float32
tensors on a CUDA device) and torch.nn.Conv2d's own forward otherwise (half precision, CPU),
so a converted model still runs everywhere the original ran.
"""
import copy

import torch
import torch.nn.functional as F

from . import functional

__all__ = ["Conv1d", "Conv2d", "ConvTranspose2d", "ConversionReport", "convert"]


def _served(input, w):
    """Whether the library computes this call: float32 CUDA (or meta, for shapes) tensors on
    one device; anything else runs torch.nn's own forward."""
    return ((input.is_cuda or input.is_meta) and input.dtype == torch.float32
            and w.dtype == torch.float32 and w.device == input.device)


def _convolve(conv, input, fn):
    """conv's convolution through fn (functional.conv2d or conv1d); a padding_mode other than
    "zeros" pads first, as torch.nn's layers do, and convolves the padded input."""
    w, b = conv.weight, conv.bias
    if conv.padding_mode != "zeros":
        return fn(F.pad(input, conv._reversed_padding_repeated_twice, mode=conv.padding_mode),
                  w, b, conv.stride, 0, conv.dilation, conv.groups)
    return fn(input, w, b, conv.stride, conv.padding, conv.dilation, conv.groups)


class Conv2d(torch.nn.Conv2d):
    """torch.nn.Conv2d (same arguments, parameters and state dict) computed by conv2d.conv2d
    for float32 CUDA inputs (and meta ones, for shape propagation). padding_mode other than
    "zeros" pads first, as torch.nn.Conv2d does, and convolves the padded input."""

    @classmethod
    def from_torch(cls, conv):
        """A conv2d.nn.Conv2d sharing conv's parameters (conv itself is left as it was)."""
        if not isinstance(conv, torch.nn.Conv2d):
            raise TypeError(f"conv2d.nn.Conv2d.from_torch takes a torch.nn.Conv2d, got "
                            f"{type(conv).__name__}")
        new = cls.__new__(cls)
        # Its own containers (parameters, buffers, hooks), holding conv's tensors and hooks: a
        # hook registered on one does not reach the other.
        new.__dict__.update({k: copy.copy(v) if isinstance(v, dict) else v
                             for k, v in conv.__dict__.items()})
        return new

    def forward(self, input):
        if not _served(input, self.weight):
            return super().forward(input)
        return _convolve(self, input, functional.conv2d)


class Conv1d(torch.nn.Conv1d):
    """torch.nn.Conv1d computed by conv2d.functional.conv1d (a convolution of height 1) for
    float32 CUDA inputs, torch.nn.Conv1d's own forward otherwise; as Conv2d above."""

    def forward(self, input):
        if not _served(input, self.weight):
            return super().forward(input)
        return _convolve(self, input, functional.conv1d)


class ConvTranspose2d(torch.nn.ConvTranspose2d):
    """torch.nn.ConvTranspose2d computed by conv2d.functional.conv_transpose2d (the library's
    data gradient) for float32 CUDA inputs, its own forward otherwise; output_size as
    torch.nn.ConvTranspose2d takes it."""

    def forward(self, input, output_size=None):
        w, b = self.weight, self.bias
        if not _served(input, w):
            return super().forward(input, output_size)
        output_padding = self._output_padding(input, output_size, self.stride, self.padding,
                                              self.kernel_size, 2, self.dilation)
        return functional.conv_transpose2d(input, w, b, self.stride, self.padding,
                                           output_padding, self.groups, self.dilation)


# torch.nn's classes that convert() swaps, and what for.
_SWAPS = {torch.nn.Conv2d: Conv2d, torch.nn.Conv1d: Conv1d,
          torch.nn.ConvTranspose2d: ConvTranspose2d}


class ConversionReport:
    """What convert() did: `converted` and `folded` (module names), `left` ({name: reason})."""

    def __init__(self, model):
        self.model = model
        self.converted, self.folded, self.left = [], [], {}

    def __repr__(self):
        lines = [f"conv2d.convert: {len(self.converted)} conv layers converted, "
                 f"{len(self.folded)} BatchNorm layers folded, {len(self.left)} left"]
        lines += [f"  left {name or '(the model)'}: {why}" for name, why in self.left.items()]
        return "\n".join(lines)


def _why_not(module):
    """Why the library cannot serve this module, or None when it can."""
    if type(module) in _SWAPS.values():
        return "already converted"
    if type(module) not in _SWAPS:
        base = next(t for t in _SWAPS if isinstance(module, t))
        return (f"{type(module).__module__}.{type(module).__qualname__} subclasses "
                f"torch.nn.{base.__name__} with a forward of its own")
    if module.weight.dtype != torch.float32:
        return f"its weight is {module.weight.dtype}; the library computes float32"
    return None


class _Tracer(torch.fx.Tracer):
    """fx's tracer, with every Conv2d (conv2d.nn.Conv2d included, whose forward branches on its
    input) a leaf."""

    def is_leaf_module(self, m, qualname):
        return isinstance(m, tuple(_SWAPS)) or super().is_leaf_module(m, qualname)


def _foldable(model, conv_name, bn_name):
    """Why conv -> bn cannot be folded (None when it can): folding rewrites conv's weight and
    removes bn, which is right only if both are plain modules, each reached from one place, bn in
    eval mode, and conv's weight is its own and not recomputed on each call."""
    conv, bn = model.get_submodule(conv_name), model.get_submodule(bn_name)
    if type(conv) not in (torch.nn.Conv2d, Conv2d) or type(bn) is not torch.nn.BatchNorm2d:
        return "not a plain Conv2d followed by a plain BatchNorm2d"
    if bn.training:
        return "BatchNorm2d in training mode (it uses batch statistics)"
    if not bn.track_running_stats or bn.running_mean is None:
        return "BatchNorm2d without running statistics"
    if conv._forward_pre_hooks or conv._forward_hooks or bn._forward_pre_hooks or bn._forward_hooks:
        return "a forward hook on the conv or the BatchNorm (e.g. weight_norm)"
    if torch.nn.utils.parametrize.is_parametrized(conv):
        return "the conv's weight is parametrized"
    names = [n for n, m in model.named_modules(remove_duplicate=False) if m is conv or m is bn]
    if len(names) != 2:
        return "the conv or the BatchNorm is registered in more than one place"
    shared = [n for n, p in model.named_parameters(remove_duplicate=False)
              if p is conv.weight or (conv.bias is not None and p is conv.bias)]
    if len(shared) != (1 if conv.bias is None else 2):
        return "the conv's weight or bias is shared with another module"
    return None


def _fold_targets(model):
    """(conv name, bn name) for each BatchNorm2d whose input is a Conv2d's output that nothing
    else reads, each module called once: found by tracing the model with torch.fx; where it
    does not trace, between neighbours of a plain nn.Sequential."""
    modules = dict(model.named_modules())
    pairs = []
    try:
        graph = _Tracer().trace(model)
    except Exception:  # noqa: BLE001 (any model fx cannot trace: fold what Sequentials show)
        for name, m in modules.items():
            if type(m) is torch.nn.Sequential:
                children = list(m.named_children())
                for (a, conv), (b, bn) in zip(children, children[1:]):
                    if isinstance(conv, torch.nn.Conv2d) and isinstance(bn, torch.nn.BatchNorm2d):
                        prefix = f"{name}." if name else ""
                        pairs.append((prefix + a, prefix + b))
        return pairs
    calls = {}
    for node in graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    for node in graph.nodes:
        if node.op != "call_module" or not isinstance(modules.get(node.target),
                                                      torch.nn.BatchNorm2d):
            continue
        src = node.args[0] if node.args else None
        if (isinstance(src, torch.fx.Node) and src.op == "call_module"
                and isinstance(modules.get(src.target), torch.nn.Conv2d)
                and len(src.users) == 1 and calls[src.target] == 1
                and calls[node.target] == 1):
            pairs.append((src.target, node.target))
    return pairs


@torch.no_grad()
def _fold(conv, bn):
    """conv's weight and bias so that conv then bn (in eval mode) is conv alone; in float64."""
    scale = bn.weight.double() if bn.affine else torch.ones_like(bn.running_var.double())
    shift = bn.bias.double() if bn.affine else torch.zeros_like(scale)
    scale = scale / torch.sqrt(bn.running_var.double() + bn.eps)
    w = conv.weight.double() * scale.view(-1, 1, 1, 1)
    b = conv.bias.double() if conv.bias is not None else torch.zeros_like(scale)
    b = (b - bn.running_mean.double()) * scale + shift
    conv.weight.copy_(w.to(conv.weight.dtype))
    if conv.bias is None:
        conv.bias = torch.nn.Parameter(b.to(conv.weight.dtype),
                                       requires_grad=conv.weight.requires_grad)
    else:
        conv.bias.copy_(b.to(conv.bias.dtype))


def _set_module(model, name, module):
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def convert(model, *, fold_batchnorm=False):
    """Swaps, in place, every torch.nn.Conv2d, Conv1d and ConvTranspose2d of model (model itself
    included) that the library can serve for conv2d.nn's class of the same name, and returns a
    ConversionReport (report.model is model). A converted model trains: its layers' gradients
    come from the library (conv2d.grad); BatchNorm is folded only when asked for, in eval mode.

    fold_batchnorm (inference only; model must be in eval mode): each BatchNorm2d that takes a
    Conv2d's output, and whose conv output nothing else reads, is folded into that conv's
    weight and bias (computed in float64) and replaced by nn.Identity, where that is exact
    (_foldable: plain modules called once, no hooks or parametrizations, weights not shared;
    the report says why any other is left); the model's parameters change, so fold a copy if
    the original is still needed. Folded ResNet-50 ran 1.97x PyTorch fp32 eager on an H100,
    unfolded 1.69x (docs/PERF.md, round 91: the bias is added in the GEMM's epilogue).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"conv2d.convert takes a torch.nn.Module, got {type(model).__name__}")
    report = ConversionReport(model)
    if fold_batchnorm:
        if model.training:
            raise ValueError("conv2d.convert: fold_batchnorm needs the model in eval mode "
                             "(model.eval()): training-mode BatchNorm uses batch statistics")
        for conv_name, bn_name in _fold_targets(model):
            why = _foldable(model, conv_name, bn_name)
            if why is not None:
                report.left[bn_name] = f"not folded into {conv_name}: {why}"
                continue
            conv, bn = model.get_submodule(conv_name), model.get_submodule(bn_name)
            _fold(conv, bn)
            _set_module(model, bn_name, torch.nn.Identity())
            report.folded.append(bn_name)
    for name, module in model.named_modules():
        if not isinstance(module, tuple(_SWAPS)):
            continue
        why = _why_not(module)
        if why is None:
            module.__class__ = _SWAPS[type(module)]
            report.converted.append(name)
        else:
            report.left[name] = why
    return report
