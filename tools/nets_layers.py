#!/usr/bin/env python3
"""Checks the benchmark's nets table against torchvision's models.

The benchmark's --suite=nets times every distinct Conv2d layer of torchvision's ResNet-50,
ConvNeXt-T and EfficientNet-B0 from a table written into tools/benchmark/suites.cc (kNetLayers), so
that it needs no torchvision at run time. This script rebuilds that table from the real models and
compares: each model runs once on a zero 1x3x224x224 input (the batch does not change a layer's
geometry) with a forward hook on every nn.Conv2d, which records the layer's channels, kernel,
stride, padding, dilation, groups, bias and the spatial size of the input it sees; layers alike
in all of these are one row, counted. It prints every difference and exits 1 on any, 0 when the
table agrees, 2 when it cannot check (no torchvision, no table). Rows of groups that are not
torchvision models (large_kernel_dw) are not checked.

The table is read from the C++ source (--source; by default benchmark/suites.cc beside this
script) or, where the source is not at hand (the GPU bundle: ./nets_layers.py beside
bin/benchmark), from the benchmark binary itself (--benchmark BIN runs
`BIN --suite=nets --list --json_out=FILE`, which needs no GPU, and reads the cases' "uses").

Needs torch and torchvision (the GPU host has them); the benchmark does not need this script.

  python3 tools/nets_layers.py [--source tools/benchmark/suites.cc | --benchmark bin/benchmark]
  python3 tools/nets_layers.py --print_cc

--print_cc prints the models' rows in the table's C++ form instead of comparing.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

# The torchvision builders of the networks the table lists, by the table's network names.
MODELS = ("resnet50", "convnext_tiny", "efficientnet_b0")

# One row of kNetLayers: {net, first module, count, Cin, Cout, H=W, K, stride, pad, dilation,
# groups, bias}.
ROW = re.compile(
    r'\{"(\w+)",\s*"([\w.]+)",\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),'
    r'\s*(\d+),\s*(\d+),\s*(true|false)\}')

# A layer's geometry: (Cin, Cout, H, W, Kh, Kw, stride_h, stride_w, pad_h, pad_w, dilation_h,
# dilation_w, groups, bias).
Key = tuple


def describe(key):
    cin, cout, h, w, kh, kw, sh, sw, ph, pw, dh, dw, g, bias = key
    return (f"{cin}->{cout} {h}x{w} k{kh}x{kw} s{sh}x{sw} p{ph}x{pw} d{dh}x{dw} g{g}"
            f"{' bias' if bias else ''}")


def cannot_check(why):
    print(why, file=sys.stderr)
    sys.exit(2)


def table_from_source(path):
    """{net: OrderedDict(key -> (first module, count))} from the C++ table in `path`."""
    with open(path) as f:
        text = f.read()
    start = text.find("kNetLayers[] = {")
    end = text.find("};", start)
    if start < 0 or end < 0:
        cannot_check(f"{path}: no kNetLayers table found")
    table = collections.defaultdict(collections.OrderedDict)
    for m in ROW.finditer(text[start:end]):
        net, module = m.group(1), m.group(2)
        count, cin, cout, hw, k, s, p, d, g = (int(m.group(i)) for i in range(3, 12))
        key = (cin, cout, hw, hw, k, k, s, s, p, p, d, d, g, m.group(12) == "true")
        if key in table[net]:
            print(f"table: {net} lists {describe(key)} twice")
        table[net][key] = (module, count)
    if not table:
        cannot_check(f"{path}: no rows parsed in kNetLayers")
    return table


def table_from_benchmark(binary):
    """The same from the cases the benchmark binary lists for --suite=nets (no GPU needed)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "nets.json")
        run = subprocess.run([binary, "--suite=nets", "--list", f"--json_out={out}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            cannot_check(f"{binary} --suite=nets --list failed ({run.returncode}): {run.stderr}")
        with open(out) as f:
            cases = json.load(f)["cases"]
    table = collections.defaultdict(collections.OrderedDict)
    for c in cases:
        if c["pad_top"] != c["pad_bottom"] or c["pad_left"] != c["pad_right"]:
            print(f"table: case {c['case']} {c['name']} pads asymmetrically (no torchvision conv "
                  "does)")
        key = (c["in_channels"], c["out_channels"], c["height"], c["width"], c["kernel_h"],
               c["kernel_w"], c["stride_h"], c["stride_w"], c["pad_top"], c["pad_left"],
               c["dilation_h"], c["dilation_w"], c["groups"], c["has_bias"])
        for u in c.get("uses", []):
            table[u["network"]][key] = (u["module"], u["count"])
    if not table:
        cannot_check(f"{binary}: no nets cases listed")
    return table


def table_from_model(name):
    """(OrderedDict(key -> [first module, count]), number of Conv2d modules) from torchvision."""
    import torch
    import torchvision

    model = getattr(torchvision.models, name)(weights=None).eval()
    rows = collections.OrderedDict()
    handles = []
    modules = 0

    def hook(module_name):
        def record(mod, inputs, output):
            if isinstance(mod.padding, str):  # 'same'/'valid': not expressible in the table
                raise SystemExit(f"{name}.{module_name}: string padding {mod.padding!r}")
            x = inputs[0]
            key = (mod.in_channels, mod.out_channels, int(x.shape[2]), int(x.shape[3]),
                   *mod.kernel_size, *mod.stride, *mod.padding, *mod.dilation, mod.groups,
                   mod.bias is not None)
            if key in rows:
                rows[key][1] += 1
            else:
                rows[key] = [module_name, 1]
        return record

    for module_name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Conv2d):
            modules += 1
            handles.append(mod.register_forward_hook(hook(module_name)))
    with torch.no_grad():
        model(torch.zeros(1, 3, 224, 224))
    for h in handles:
        h.remove()
    return rows, modules


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", default=None,
                    help="the file holding kNetLayers (default: benchmark/suites.cc beside this "
                         "script)")
    ap.add_argument("--benchmark", default=None,
                    help="read the table from this benchmark binary instead (default, when no "
                         "benchmark/suites.cc is beside this script: bin/benchmark beside it)")
    ap.add_argument("--print_cc", action="store_true",
                    help="print the models' rows as C++ table rows and exit")
    args = ap.parse_args()
    try:
        import torchvision  # noqa: F401
    except ImportError as e:
        cannot_check(f"needs torch and torchvision ({e}); the benchmark itself does not")

    if args.print_cc:
        for name in MODELS:
            rows, _ = table_from_model(name)
            for key, (module, count) in rows.items():
                cin, cout, h, w, kh, kw, sh, sw, ph, pw, dh, dw, g, bias = key
                if h != w or kh != kw or sh != sw or ph != pw or dh != dw:
                    sys.exit(f"{name}.{module}: not square ({describe(key)}); the table is")
                print(f'    {{"{name}", "{module}", {count}, {cin}, {cout}, {h}, {kh}, {sh}, '
                      f'{ph}, {dh}, {g}, {"true" if bias else "false"}}},')
        return 0

    source = args.source or os.path.join(here, "benchmark", "suites.cc")
    if args.benchmark or (args.source is None and not os.path.exists(source)):
        table = table_from_benchmark(args.benchmark or os.path.join(here, "bin", "benchmark"))
    else:
        table = table_from_source(source)
    diffs = 0
    for name in MODELS:
        rows, modules = table_from_model(name)
        listed = table.get(name, collections.OrderedDict())
        convs = sum(c for _, c in rows.values())
        print(f"{name}: torchvision {len(rows)} distinct layers, {convs} convs run, "
              f"{modules} Conv2d modules; table {len(listed)} distinct, "
              f"{sum(c for _, c in listed.values())} convs")
        if convs != modules:
            print(f"  note: {modules} Conv2d modules but {convs} calls (a module shared or unused)")
        for key, (module, count) in rows.items():
            if key not in listed:
                print(f"  MISSING from the table: {module} x{count}: {describe(key)}")
                diffs += 1
            elif listed[key][1] != count:
                print(f"  COUNT {describe(key)}: torchvision {count} ({module}), "
                      f"table {listed[key][1]}")
                diffs += 1
            elif listed[key][0] != module:
                print(f"  MODULE {describe(key)}: torchvision's first is {module}, "
                      f"table says {listed[key][0]}")
                diffs += 1
        for key, (module, count) in listed.items():
            if key not in rows:
                print(f"  EXTRA in the table: {module} x{count}: {describe(key)}")
                diffs += 1
    others = sorted(set(table) - set(MODELS))
    if others:
        print(f"not torchvision models, not checked: {', '.join(others)}")
    print("table agrees with torchvision" if diffs == 0 else f"{diffs} difference(s)")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
