#!/usr/bin/env python3
"""Makes a linked shared object fit to ship: NEEDED and RUNPATH for the copy that goes out.

    pack_shared_library.py IN OUT --rpath '$ORIGIN:/usr/local/cuda/lib64' --prefix libabsl_
    pack_shared_library.py IN OUT --allow_needed libtorch.so ...   # no RUNPATH
    pack_shared_library.py --check_only FILE --allow_needed libtorch.so ...

Bazel's link sets a RUNPATH into its _solib_ folders, which exist only in the build tree: OUT gets
--rpath instead, or none. libconv2d.so: the link lists every Abseil shared library of the
system_absl target as NEEDED (the toolchain links with -no-as-needed). Debian's static Abseil
archives cannot go into a shared object (initial-exec TLS, R_X86_64_TPOFF32), so the libraries
are shipped beside libconv2d.so instead (the GPU bundle's lib/, the wheel). With --prefix, this
keeps, of the NEEDED libraries whose name starts with it, those that define a symbol OUT uses and
everything they need in turn (a RUNPATH is not searched for a library's own dependencies, so each
must be loaded by OUT itself), and drops the others. The Python package's fast path: with
--allow_needed, OUT (or FILE) may name only those libraries (by file name: PyTorch's, which
`import torch` has loaded) and the system's, else this fails.
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


# What any shipped library may name besides its own: glibc's and GCC's, and the dynamic loader
# (__tls_get_addr, for another library's thread-locals).
SYSTEM = re.compile(r"^(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|ld-linux-x86-64)\.so\.\d+$")


def needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", path))


def check_needed(path, allowed):
    names = {os.path.basename(a) for a in allowed}
    foreign = [n for n in needed(path) if n not in names and not SYSTEM.match(n)]
    if foreign:
        sys.exit(f"pack_shared_library: {os.path.basename(path)} needs {foreign}, neither the "
                 f"system's nor among --allow_needed")


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
    ap.add_argument("output", nargs="?")
    ap.add_argument("--rpath", help="OUT's RUNPATH (default: none)")
    ap.add_argument("--prefix", help="the shipped libraries' names start with it")
    ap.add_argument("--allow_needed", nargs="+", help="the libraries OUT may name")
    ap.add_argument("--check_only", action="store_true", help="check INPUT's NEEDED, write nothing")
    a = ap.parse_args()
    if a.check_only:
        check_needed(a.input, a.allow_needed or [])
        print(f"{os.path.basename(a.input)}: NEEDED only the allowed and the system's libraries")
        return
    if a.output is None:
        sys.exit("pack_shared_library: OUT is missing")
    shutil.copyfile(a.input, a.output)
    os.chmod(a.output, 0o755)
    ours, keep = [], []
    if a.prefix:
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
    args = ["patchelf", "--set-rpath", a.rpath] if a.rpath else ["patchelf", "--remove-rpath"]
    for n in ours:
        if n not in keep:
            args += ["--remove-needed", n]
    for n in keep:
        if n not in ours:
            args += ["--add-needed", n]
    run(*args, a.output)
    if a.allow_needed is not None:
        check_needed(a.output, a.allow_needed)
    kept = f"{len(keep)} of {len(ours)} {a.prefix}* libraries kept, " if a.prefix else ""
    print(f"{os.path.basename(a.output)}: {kept}RUNPATH {a.rpath or 'none'}")


if __name__ == "__main__":
    main()
