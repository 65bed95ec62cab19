#!/usr/bin/env python3
"""Makes the linked libconv2d.so self-contained: NEEDED and RUNPATH for a copy shipped with its libraries.

    pack_shared_library.py IN OUT --rpath '$ORIGIN:/usr/local/cuda/lib64' --prefix libabsl_

Bazel's link lists every Abseil shared library of the system_absl target as NEEDED (the toolchain
links with -no-as-needed) and sets a RUNPATH into its _solib_ folders, which exist only in the
build tree. Debian's static Abseil archives cannot go into a shared object (initial-exec TLS,
R_X86_64_TPOFF32), so the libraries are shipped beside libconv2d.so instead (the GPU bundle's lib/,
the wheel). This keeps, of the NEEDED libraries whose name starts with --prefix, those that define
a symbol OUT uses and everything they need in turn (a RUNPATH is not searched for a library's own
dependencies, so each must be loaded by OUT itself), drops the others, and replaces the RUNPATH.
Uses readelf, nm and ldd (binutils, libc) and patchelf (Debian's patchelf).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys


def run(*cmd):
    r = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"pack_shared_library: {' '.join(cmd)} failed: {r.stderr.strip()}")
    return r.stdout


def needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", path))


def symbols(path, which):
    names = set()
    for line in run("nm", "-D", which, path).splitlines():
        parts = line.split()
        if parts:
            names.add(parts[-1].split("@")[0])
    return names


def resolved(path):
    """NEEDED name -> the file the loader finds for it (ldd)."""
    found = {}
    for line in run("ldd", path).splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--rpath", required=True)
    ap.add_argument("--prefix", required=True)
    a = ap.parse_args()
    shutil.copyfile(a.input, a.output)
    os.chmod(a.output, 0o755)
    where = resolved(a.input)
    ours = [n for n in needed(a.input) if n.startswith(a.prefix)]
    missing = [n for n in ours if where.get(n, "not found") == "not found"]
    if missing:
        sys.exit(f"pack_shared_library: cannot find {missing} (install them; tools/setup.sh)")
    used = symbols(a.input, "--undefined-only")
    keep = [n for n in ours if used & symbols(where[n], "--defined-only")]
    # Their own dependencies, transitively.
    # ldd lists what loads transitively, so `where` knows them too.
    queue = list(keep)
    while queue:
        for dep in needed(where[queue.pop()]):
            if dep.startswith(a.prefix) and dep not in keep:
                keep.append(dep)
                queue.append(dep)
    args = ["patchelf", "--set-rpath", a.rpath]
    for n in ours:
        if n not in keep:
            args += ["--remove-needed", n]
    for n in keep:
        if n not in ours:
            args += ["--add-needed", n]
    run(*args, a.output)
    print(f"{os.path.basename(a.output)}: {len(keep)} of {len(ours)} {a.prefix}* libraries kept, "
          f"RUNPATH {a.rpath}")


if __name__ == "__main__":
    main()
