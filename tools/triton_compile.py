#!/usr/bin/env python3
"""Compiles Triton kernels ahead of time into the artifacts conv/triton's loader reads.

  python3 tools/triton_compile.py                      # every file in KERNEL_FILES -> its artifacts/
  python3 tools/triton_compile.py --out DIR [FILE...]  # the given kernel files -> DIR
  python3 tools/triton_compile.py --check [FILE...]    # recompile into a temp dir and compare
                                                       # with the checked-in artifacts (CI)

A kernel file is a Python module with a list AOT_KERNELS of dicts:
  name        artifact base name ([a-z0-9_]+): writes <name>.cubin, <name>.ptx, <name>.json
  fn          the @triton.jit function
  signature   {param: type} for EVERY parameter in order, "constexpr" for the folded ones
  constexprs  {param: value} for the constexpr parameters
  options     triton.compile options (num_warps, num_stages, ...)
Needs triton==3.6.0 (pip) and no GPU: the target is given (sm_90, warp size 32).

Reproducible: the same inputs give byte-identical outputs. Triton's own metadata JSON is not
written, because it holds machine-specific paths (libdevice's location, the cache hash); the
<name>.json written here keeps only what launching needs, keys sorted. Line info is disabled,
since it embeds the kernel file's absolute path into the PTX and cubin. The environment's
TRITON_* and similar variables are cleared first so that no local setting changes the code.
"""
import argparse
import difflib
import filecmp
import hashlib
import importlib.util
import json
import os
import re
import sys
import tempfile

sys.dont_write_bytecode = True  # importing kernel files must not litter the tree

TRITON_VERSION = "3.6.0"
TARGET_ARCH = 90
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Kernel files compiled by default, each into the artifacts/ folder next to it.
KERNEL_FILES = ["conv/algorithms/triton/igemm_conv.py"]

_ENV_PREFIXES = ("TRITON_", "LLVM_", "MLIR_", "NVPTX_", "AMDGCN_")
_ENV_NAMES = ("PTXAS_OPTIONS", "DISABLE_PTXAS_OPT", "USE_IR_LOC")


def _clean_environment(cache_dir):
    for key in list(os.environ):
        if key.startswith(_ENV_PREFIXES) or key in _ENV_NAMES:
            del os.environ[key]
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"


def _load_module(path):
    spec = importlib.util.spec_from_file_location(
        "aot_" + re.sub(r"\W", "_", os.path.basename(path)[:-3]), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "AOT_KERNELS"):
        raise SystemExit(f"{path}: no AOT_KERNELS list")
    return module


def _metadata(kernel, compiled, cubin, ptx):
    md = compiled.metadata
    target = md.target
    runtime = [(n, t) for n, t in kernel["signature"].items() if t != "constexpr"]
    if set(kernel["constexprs"]) != {n for n, t in kernel["signature"].items() if t == "constexpr"}:
        raise SystemExit(f"{kernel['name']}: constexprs and the signature's constexpr entries differ")
    return {
        "name": md.name,
        "num_warps": md.num_warps,
        "num_ctas": md.num_ctas,
        "num_stages": md.num_stages,
        "shared": md.shared,
        "tmem_size": md.tmem_size or 0,
        "global_scratch_size": md.global_scratch_size,
        "global_scratch_align": md.global_scratch_align,
        "profile_scratch_size": md.profile_scratch_size,
        "profile_scratch_align": md.profile_scratch_align,
        "launch_pdl": bool(md.launch_pdl),
        "launch_cooperative_grid": bool(md.launch_cooperative_grid),
        "triton_version": md.triton_version,
        "target": {"backend": target.backend, "arch": target.arch, "warp_size": target.warp_size},
        "arg_names": [n for n, _ in runtime],
        "signature": [t for _, t in runtime],
        "constexprs": dict(kernel["constexprs"]),
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
        "ptx_sha256": hashlib.sha256(ptx).hexdigest(),
    }


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def compile_file(path, out_dir):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module = _load_module(path)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for kernel in module.AOT_KERNELS:
        name = kernel["name"]
        if not re.fullmatch(r"[a-z0-9_]+", name):
            raise SystemExit(f"{path}: artifact name '{name}' is not [a-z0-9_]+")
        src = ASTSource(fn=kernel["fn"], signature=dict(kernel["signature"]),
                        constexprs=dict(kernel["constexprs"]))
        compiled = triton.compile(src, target=GPUTarget("cuda", TARGET_ARCH, 32),
                                  options=dict(kernel.get("options", {})))
        cubin = compiled.asm["cubin"]
        ptx = compiled.asm["ptx"].encode("utf-8")
        meta = _metadata(kernel, compiled, cubin, ptx)
        text = json.dumps(meta, indent=1, sort_keys=True) + "\n"
        for ext, data in (("cubin", cubin), ("ptx", ptx), ("json", text.encode("utf-8"))):
            target = os.path.join(out_dir, f"{name}.{ext}")
            _write(target, data)
            written.append(target)
        print(f"{name}: {meta['name']} warps={meta['num_warps']} shared={meta['shared']} "
              f"scratch={meta['global_scratch_size']} cubin={len(cubin)}B ptx={len(ptx)}B")
    return written


def check(files):
    """Recompiles every file and compares with its artifacts/ folder byte for byte."""
    by_dir = {}
    for path in files:
        out_dir = os.path.join(os.path.dirname(os.path.abspath(path)), "artifacts")
        by_dir.setdefault(out_dir, []).append(os.path.abspath(path))
    problems = []
    for n, (out_dir, paths) in enumerate(sorted(by_dir.items())):
        with tempfile.TemporaryDirectory(prefix="triton_aot_check_") as tmp:
            fresh = set()
            for path in paths:
                fresh.update(os.path.basename(f) for f in compile_file(path, tmp))
            present = set(os.listdir(out_dir)) if os.path.isdir(out_dir) else set()
            rel = os.path.relpath(out_dir, REPO)
            for name in sorted(fresh - present):
                problems.append(f"{rel}/{name}: missing (not checked in)")
            for name in sorted(present - fresh):
                problems.append(f"{rel}/{name}: stale (no kernel produces it)")
            for name in sorted(fresh & present):
                a, b = os.path.join(out_dir, name), os.path.join(tmp, name)
                if filecmp.cmp(a, b, shallow=False):
                    continue
                problems.append(f"{rel}/{name}: differs from a fresh compile")
                if name.endswith((".json", ".ptx")):
                    with open(a) as fa, open(b) as fb:
                        diff = list(difflib.unified_diff(fa.readlines(), fb.readlines(),
                                                         "checked-in", "fresh", n=1))
                    problems.extend("    " + line.rstrip("\n") for line in diff[:40])
    if problems:
        print("Triton artifacts out of date; rerun python3 tools/triton_compile.py and commit:")
        print("\n".join(problems))
        return 1
    print(f"Triton artifacts match a fresh compile ({len(files)} kernel file(s)).")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="kernel files (default: KERNEL_FILES)")
    parser.add_argument("--out", help="output folder (default: artifacts/ next to each file)")
    parser.add_argument("--check", action="store_true",
                        help="compare a fresh compile with the checked-in artifacts")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="triton_aot_cache_") as cache_dir:
        _clean_environment(cache_dir)
        import triton
        if triton.__version__ != TRITON_VERSION:
            raise SystemExit(f"triton {triton.__version__} is installed; the artifacts are built "
                             f"with {TRITON_VERSION}: python3 -m pip install triton=={TRITON_VERSION}")
        files = args.files or [os.path.join(REPO, f) for f in KERNEL_FILES]
        if args.check:
            return check(files)
        for path in files:
            out_dir = args.out or os.path.join(os.path.dirname(os.path.abspath(path)), "artifacts")
            compile_file(os.path.abspath(path), out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
