#!/usr/bin/env python3
"""Packs the conv2d Python package into a wheel (PEP 427), for //python:wheel.

    build_wheel.py --out conv2d-V-py3-none-linux_x86_64.whl --version V --lib libconv2d.so \
        --sources conv2d/*.py --shared_libraries <Abseil's .so files> \
        --fast_path _fast_torchM_N.cpython-3X-x86_64-linux-gnu.so

The wheel holds conv2d/*.py, conv2d/lib/libconv2d.so and, beside it, the Abseil libraries it
names (NEEDED), each under its SONAME, which its RUNPATH ($ORIGIN) finds; and the fast path
(python/fast_path.cc), a CPython extension for one PyTorch minor version and one Python, as
python/BUILD packed it (no RUNPATH; it names only PyTorch's libraries and the system's).
The archive is reproducible: sorted entries, fixed timestamps. The tag is py3-none-linux_x86_64:
the package works through ctypes on any Python 3 (the fast path loads only where it was built
for; elsewhere it is unused), and the library needs the CUDA driver and cuBLAS of CUDA 13, which
no manylinux tag promises.
"""
import argparse
import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile

TAG = "py3-none-linux_x86_64"


def readelf_dynamic(path):
    r = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        sys.exit(f"build_wheel: readelf -d {path} failed: {r.stderr.strip()}")
    return r.stdout


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--sources", nargs="+", required=True)
    ap.add_argument("--shared_libraries", nargs="+", required=True)
    ap.add_argument("--fast_path", help="absent under --define=conv2d_fast_path=off")
    args = ap.parse_args()

    init = [s for s in args.sources if os.path.basename(s) == "__init__.py"]
    if not init:
        sys.exit("build_wheel: no __init__.py among the sources")
    declared = re.search(r'^__version__ = "([^"]+)"', open(init[0]).read(), re.M)
    if not declared or declared.group(1) != args.version:
        sys.exit(f"build_wheel: conv2d/__init__.py's __version__ is "
                 f"{declared.group(1) if declared else 'missing'}, the wheel's {args.version}: "
                 f"change both (python/BUILD's VERSION)")

    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(libabsl_[^\]]+)\]",
                        readelf_dynamic(args.lib))
    by_soname = {}
    for path in args.shared_libraries:
        soname = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", readelf_dynamic(path))
        if soname:
            by_soname[soname.group(1)] = path
    missing = [n for n in needed if n not in by_soname]
    if missing:
        sys.exit(f"build_wheel: libconv2d.so needs {missing}, not among --shared_libraries")

    files = {f"conv2d/{os.path.basename(s)}": (s, 0o644) for s in args.sources}
    if args.fast_path:
        files[f"conv2d/{os.path.basename(args.fast_path)}"] = (args.fast_path, 0o755)
    files["conv2d/lib/libconv2d.so"] = (args.lib, 0o755)
    for n in needed:
        files[f"conv2d/lib/{n}"] = (by_soname[n], 0o755)

    dist = f"conv2d-{args.version}.dist-info"
    metadata = "\n".join([
        "Metadata-Version: 2.1",
        "Name: conv2d",
        f"Version: {args.version}",
        "Summary: fp32 2D convolution on NVIDIA GPUs (torch.nn.functional.conv2d's semantics), "
        "within fp32 summation's accuracy",
        "Requires-Python: >=3.9",
        "Provides-Extra: torch",
        'Requires-Dist: torch>=2.4; extra == "torch"',
        "", ""])
    wheel = "\n".join(["Wheel-Version: 1.0", "Generator: conv2d python/build_wheel.py",
                       "Root-Is-Purelib: false", f"Tag: {TAG}", "", ""])
    entries = []
    for name in sorted(files):
        path, mode = files[name]
        with open(path, "rb") as f:
            entries.append((name, f.read(), mode))
    entries.append((f"{dist}/METADATA", metadata.encode(), 0o644))
    entries.append((f"{dist}/WHEEL", wheel.encode(), 0o644))
    record = [record_line(n, d) for n, d, _ in entries] + [f"{dist}/RECORD,,"]
    entries.append((f"{dist}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))

    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)


if __name__ == "__main__":
    main()
