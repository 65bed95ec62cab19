"""Repositories conv2d needs: stand-ins for Bazel's built-ins, Debian's libraries, CUDA, and for
the Python package's fast path PyTorch's headers and Python's.

Call conv2d_dependencies() from the WORKSPACE of this repository or of any repository that
depends on it (README.md shows the snippet). One repository downloads: @pytorch_wheel, PyTorch's
wheel by package name through pip (version and sha256 pinned), fetched by what builds
//python:fast_path: the wheel, so `bazel test //...` here (its wheel_test) needs PyPI once, unless --define=conv2d_fast_path=off
leaves the fast path out; a repository that depends on conv2d's libraries does not fetch it.
"""

load("//tools/cuda/private:configure.bzl", "cuda_configure")

def _repo_root(ctx):
    # The WORKSPACE file of the repository that holds this .bzl, whoever loads it.
    return ctx.path(Label("//:WORKSPACE")).dirname

def _tree_repository_impl(ctx):
    src = ctx.path("%s/%s" % (_repo_root(ctx), ctx.attr.path))
    if not src.exists:
        fail("conv2d: %s is missing from the conv2d checkout" % src)
    for child in src.readdir():
        ctx.symlink(child, child.basename)

# Like local_repository, but the path is inside the conv2d checkout, so that it resolves the
# same way when conv2d is itself an external repository.
_tree_repository = repository_rule(
    implementation = _tree_repository_impl,
    attrs = {"path": attr.string(mandatory = True)},
    local = True,
)

def _multiarch(ctx):
    r = ctx.execute(["gcc", "-print-multiarch"])
    arch = r.stdout.strip() if r.return_code == 0 else ""
    return "/usr/lib/" + (arch or "x86_64-linux-gnu")

def _require(ctx, path, package):
    if not ctx.path(path).exists:
        fail("conv2d: %s not found. Install Debian's %s (run tools/setup.sh)." % (path, package))

def _debian_library_impl(ctx):
    libdir = _multiarch(ctx)
    for include in ctx.attr.includes:
        _require(ctx, include, ctx.attr.package)
        ctx.symlink(include, "include/" + include.split("/")[-1])
    for lib in ctx.attr.libs:
        _require(ctx, libdir + "/" + lib, ctx.attr.package)
        ctx.symlink(libdir + "/" + lib, "lib/" + lib)
    if ctx.attr.shared_glob:
        # Debian's static archives of Abseil cannot go into libconv2d.so (initial-exec TLS,
        # R_X86_64_TPOFF32, and PC-relative references to preemptible symbols); its shared
        # libraries (by their SONAME) are used everywhere instead, and libconv2d.so names only
        # those it uses (tools/pack_shared_library.py).
        r = ctx.execute(["sh", "-c", "ls %s/%s" % (libdir, ctx.attr.shared_glob)])
        libs = [a for a in r.stdout.strip().split("\n") if a]
        if r.return_code != 0 or not libs:
            fail("conv2d: no %s in %s. Install Debian's %s (run tools/setup.sh)." %
                 (ctx.attr.shared_glob, libdir, ctx.attr.package))
        linked = {}
        for lib in libs:
            name = lib.split("/")[-1].split(".so")[0] + ".so"
            if name not in linked:
                linked[name] = True
                ctx.symlink(lib, "lib/" + name)
    ctx.file("BUILD.bazel", ctx.attr.build_file_content)

_debian_library = repository_rule(
    implementation = _debian_library_impl,
    attrs = {
        "package": attr.string(mandatory = True),
        "includes": attr.string_list(),
        "libs": attr.string_list(),
        "shared_glob": attr.string(),
        "build_file_content": attr.string(mandatory = True),
    },
    local = True,
)

def _maybe(rule, name, **kwargs):
    if name not in native.existing_rules():
        rule(name = name, **kwargs)

def _cc_library(name, hdrs = None, srcs = None, includes = "include", deps = None, pthread = False):
    """The BUILD text of a public cc_library over a _debian_library's include/ and lib/.

    hdrs and srcs are Starlark expressions (a glob(...) or a list), written as they are.
    """
    attrs = ['name = "%s"' % name]
    if hdrs:
        attrs.append("hdrs = " + hdrs)
        attrs.append('includes = ["%s"]' % includes)
    if srcs:
        attrs.append("srcs = " + srcs)
    if deps:
        attrs.append("deps = %s" % repr(deps))
    if pthread:
        attrs.append('linkopts = ["-pthread"]')
    attrs.append('visibility = ["//visibility:public"]')
    return "cc_library(\n%s,\n)\n" % ",\n".join(["    " + a for a in attrs])

# The PyTorch the Python package's fast path (python/fast_path.cc) is compiled against, for the
# CPython it runs in: the GPU host's (PyTorch 2.11.0+cu130, Python 3.12). The fast path loads only
# under this PyTorch minor version (python/conv2d/functional.py); any other uses ctypes.
TORCH_VERSION = "2.11.0"
TORCH_PYTHON = "3.12"
# The wheel, by package name through pip's configured index, pinned by version and hash (pip
# refuses any other file: --require-hashes); the tags of the GPU host's CPython and platform.
_TORCH_WHEEL = struct(
    requirement = "torch==" + TORCH_VERSION,
    sha256 = "0f68f4ac6d95d12e896c3b7a912b5871619542ec54d3649cf48cc1edd4dd2756",
    platform = "manylinux_2_28_x86_64",
)
# What the fast path links against (by SONAME; `import torch` has loaded them when it loads),
# and all it may name besides the system's (python/BUILD's packing and wheel_test check).
TORCH_LIBRARIES = ["libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so",
               "libtorch_python.so"]

_EXTRACT = """
import sys, zipfile
whl, libs = sys.argv[1], sys.argv[2:]
with zipfile.ZipFile(whl) as z:
    for m in z.namelist():
        if m.startswith("torch/include/") or m in ["torch/lib/" + l for l in libs]:
            z.extract(m, ".")
"""

def _pip(ctx):
    # A pip to download with: python3's own, else a virtual environment's (Debian's python3 has
    # no pip; python3-venv, which tools/setup.sh installs, brings one).
    if ctx.execute(["python3", "-m", "pip", "--version"]).return_code == 0:
        return ["python3", "-m", "pip"]
    r = ctx.execute(["python3", "-m", "venv", "pip_env"], timeout = 300)
    if r.return_code != 0:
        fail("conv2d: no pip to fetch PyTorch's wheel with (python3 -m pip, python3 -m venv): " +
             r.stderr + " (run tools/setup.sh)")
    return [str(ctx.path("pip_env/bin/python")), "-m", "pip"]

def _pytorch_wheel_impl(ctx):
    # The whole wheel is 530 MB; only the headers and the libraries above are kept (~1 GB
    # unpacked, libtorch_cpu.so most of it).
    ctx.file("requirements.txt", "%s --hash=sha256:%s\n" % (ctx.attr.requirement, ctx.attr.sha256))
    r = ctx.execute(_pip(ctx) + [
        "download", "--quiet", "--disable-pip-version-check", "--no-deps",
        "--only-binary=:all:", "--implementation", "cp", "--python-version", TORCH_PYTHON,
        "--platform", ctx.attr.platform, "--require-hashes", "-r", "requirements.txt",
        "--dest", "wheel",
    ], timeout = 1800, quiet = False)
    wheels = ctx.path("wheel").readdir() if ctx.path("wheel").exists else []
    if r.return_code != 0 or len(wheels) != 1:
        fail("conv2d: pip could not fetch %s (sha256 %s): %s" % (
            ctx.attr.requirement, ctx.attr.sha256, r.stderr))
    ctx.symlink(wheels[0], "torch.whl")
    r = ctx.execute(["python3", "-c", _EXTRACT, "torch.whl"] + TORCH_LIBRARIES, timeout = 600)
    if r.return_code != 0:
        fail("conv2d: unpacking PyTorch's wheel failed: " + r.stderr)
    ctx.delete("torch.whl")
    ctx.delete("wheel")
    ctx.delete("pip_env")
    libraries = ", ".join(['"torch/lib/%s"' % l for l in TORCH_LIBRARIES])
    ctx.file("BUILD.bazel", """
cc_library(
    name = "torch",
    hdrs = glob(["torch/include/**"]),
    includes = ["torch/include", "torch/include/torch/csrc/api/include"],
    srcs = [%s],
    visibility = ["//visibility:public"],
)
filegroup(
    name = "libraries",
    srcs = [%s],
    visibility = ["//visibility:public"],
)
""" % (libraries, libraries))

_pytorch_wheel = repository_rule(
    implementation = _pytorch_wheel_impl,
    attrs = {
        "requirement": attr.string(mandatory = True),
        "sha256": attr.string(mandatory = True),
        "platform": attr.string(mandatory = True),
    },
)

def _python_minor(ctx, include):
    # PY_MINOR_VERSION of the headers in `include` (a module built from 3.11's headers must not
    # be named and loaded as 3.12's).
    for line in ctx.read(include + "/patchlevel.h").split("\n"):
        words = [w for w in line.replace("\t", " ").split(" ") if w]
        if len(words) == 3 and words[0] == "#define" and words[1] == "PY_MINOR_VERSION":
            return words[2]
    return ""

def _python_headers_impl(ctx):
    # CPython's headers of TORCH_PYTHON (checked by their patchlevel.h): $CONV2D_PYTHON_INCLUDE,
    # else Debian's python3.X-dev, else a pyenv installation (this project's build machines
    # carry pyenv's 3.12).
    version = ctx.attr.version
    candidates = [ctx.os.environ.get("CONV2D_PYTHON_INCLUDE", ""),
                  "/usr/include/python" + version, "/usr/local/include/python" + version]
    r = ctx.execute(["sh", "-c", "ls -d $HOME/.pyenv/versions/%s*/include/python%s " % (
        version, version) + "/root/.pyenv/versions/%s*/include/python%s 2>/dev/null" % (
        version, version)])
    candidates += r.stdout.strip().split("\n")
    found = [c for c in candidates if c and ctx.path(c + "/Python.h").exists and
             _python_minor(ctx, c) == version.split(".")[1]]
    if not found:
        fail(("conv2d: no headers of Python %s (Python.h) for the Python package's fast path; " +
              "install them (e.g. pyenv install %s) or set CONV2D_PYTHON_INCLUDE to their " +
              "folder") % (version, version))
    ctx.symlink(found[0], "include")
    libraries = ", ".join(['"torch/lib/%s"' % l for l in TORCH_LIBRARIES])
    ctx.file("BUILD.bazel", """
cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
    visibility = ["//visibility:public"],
)
""")

_python_headers = repository_rule(
    implementation = _python_headers_impl,
    attrs = {"version": attr.string(mandatory = True)},
    environ = ["CONV2D_PYTHON_INCLUDE", "HOME"],
    local = True,
)

def conv2d_dependencies():
    """Declares every external repository conv2d needs. Idempotent."""
    _maybe(_tree_repository, "rules_cc", path = "third_party/rules_cc")
    _maybe(_tree_repository, "rules_java", path = "third_party/rules_java")
    _maybe(_tree_repository, "remote_coverage_tools", path = "third_party/remote_coverage_tools")

    # Abseil without its flags library, for everything, libconv2d.so included; :flags for the
    # command-line tools only.
    _maybe(
        _debian_library,
        "system_absl",
        package = "libabsl-dev",
        includes = ["/usr/include/absl"],
        shared_glob = "libabsl_*.so.[0-9]*",
        build_file_content = _cc_library(
            "absl",
            hdrs = 'glob(["include/absl/**/*.h", "include/absl/**/*.inc"], ' +
                   'exclude = ["include/absl/flags/**"])',
            srcs = 'glob(["lib/*.so"], exclude = ["lib/libabsl_flags*.so"])',
            pthread = True,
        ) + _cc_library(
            "flags",
            hdrs = 'glob(["include/absl/flags/**/*.h"])',
            srcs = 'glob(["lib/libabsl_flags*.so"])',
            deps = [":absl"],
        ) + (
            # The shared libraries themselves, for the wheel (//python:wheel), which ships the
            # ones libconv2d.so names beside it.
            'filegroup(\n    name = "shared_libraries",\n    srcs = glob(["lib/*.so"]),\n' +
            '    visibility = ["//visibility:public"],\n)\n'
        ),
    )
    _maybe(
        _debian_library,
        "system_gtest",
        package = "libgtest-dev",
        includes = ["/usr/include/gtest", "/usr/include/gmock"],
        libs = ["libgtest.a", "libgmock.a", "libgtest_main.a"],
        build_file_content = _cc_library(
            "gtest",
            hdrs = 'glob(["include/gtest/**/*.h", "include/gmock/**/*.h"])',
            srcs = '["lib/libgmock.a", "lib/libgtest.a"]',
            pthread = True,
        ) + _cc_library("gtest_main", srcs = '["lib/libgtest_main.a"]', deps = [":gtest"]),
    )
    _maybe(
        _debian_library,
        "system_benchmark",
        package = "libbenchmark-dev",
        includes = ["/usr/include/benchmark"],
        # Debian ships Google Benchmark as a shared library only; the GPU bundle carries it.
        libs = ["libbenchmark.so"],
        build_file_content = _cc_library(
            "benchmark",
            hdrs = 'glob(["include/benchmark/*.h"])',
            srcs = '["lib/libbenchmark.so"]',
            pthread = True,
        ),
    )
    _maybe(
        _debian_library,
        "system_eigen",
        package = "libeigen3-dev",
        includes = ["/usr/include/eigen3"],
        build_file_content = _cc_library(
            "eigen",
            hdrs = 'glob(["include/eigen3/Eigen/**", "include/eigen3/unsupported/**"])',
            includes = "include/eigen3",
        ),
    )
    # Header-only: the benchmark's JSON output and the Triton runtime's metadata reader.
    _maybe(
        _debian_library,
        "system_nlohmann_json",
        package = "nlohmann-json3-dev",
        includes = ["/usr/include/nlohmann"],
        build_file_content = _cc_library(
            "json",
            hdrs = 'glob(["include/nlohmann/**/*.hpp"])',
        ),
    )
    _maybe(cuda_configure, "local_cuda")
    _maybe(_pytorch_wheel, "pytorch_wheel", requirement = _TORCH_WHEEL.requirement,
           sha256 = _TORCH_WHEEL.sha256, platform = _TORCH_WHEEL.platform)
    _maybe(_python_headers, "python_headers", version = TORCH_PYTHON)
