"""Repositories conv2d needs, all offline: stand-ins for Bazel's built-ins, Debian's libraries, CUDA.

Call conv2d_dependencies() from the WORKSPACE of this repository or of any repository that
depends on it (README.md shows the snippet). Nothing here downloads anything.
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
    if ctx.attr.merge_archives_glob:
        # Abseil ships ~60 interdependent archives; one archive lets the linker resolve them in
        # any order (ld rescans a single archive until nothing new is needed).
        r = ctx.execute(["sh", "-c", "ls %s/%s" % (libdir, ctx.attr.merge_archives_glob)])
        archives = [a for a in r.stdout.strip().split("\n") if a]
        if r.return_code != 0 or not archives:
            fail("conv2d: no %s in %s. Install Debian's %s (run tools/setup.sh)." %
                 (ctx.attr.merge_archives_glob, libdir, ctx.attr.package))
        script = "create lib/merged.a\n" + "".join(["addlib %s\n" % a for a in archives]) + "save\nend\n"
        ctx.file("merge.mri", script)
        r = ctx.execute(["sh", "-c", "mkdir -p lib && ar -M < merge.mri"])
        if r.return_code != 0:
            fail("conv2d: merging %s failed: %s" % (ctx.attr.merge_archives_glob, r.stderr))
    ctx.file("BUILD.bazel", ctx.attr.build_file_content)

_debian_library = repository_rule(
    implementation = _debian_library_impl,
    attrs = {
        "package": attr.string(mandatory = True),
        "includes": attr.string_list(),
        "libs": attr.string_list(),
        "merge_archives_glob": attr.string(),
        "build_file_content": attr.string(mandatory = True),
    },
    local = True,
)

def _maybe(rule, name, **kwargs):
    if name not in native.existing_rules():
        rule(name = name, **kwargs)

def conv2d_dependencies():
    """Declares every external repository conv2d needs. Idempotent."""
    _maybe(_tree_repository, "rules_cc", path = "third_party/rules_cc")
    _maybe(_tree_repository, "rules_java", path = "third_party/rules_java")
    _maybe(_tree_repository, "remote_coverage_tools", path = "third_party/remote_coverage_tools")

    _maybe(
        _debian_library,
        "system_absl",
        package = "libabsl-dev",
        includes = ["/usr/include/absl"],
        merge_archives_glob = "libabsl_*.a",
        build_file_content = """
cc_library(
    name = "absl",
    hdrs = glob(["include/absl/**/*.h", "include/absl/**/*.inc"]),
    includes = ["include"],
    srcs = ["lib/merged.a"],
    linkopts = ["-pthread"],
    visibility = ["//visibility:public"],
)
""",
    )
    _maybe(
        _debian_library,
        "system_gtest",
        package = "libgtest-dev",
        includes = ["/usr/include/gtest", "/usr/include/gmock"],
        libs = ["libgtest.a", "libgmock.a", "libgtest_main.a"],
        build_file_content = """
cc_library(
    name = "gtest",
    hdrs = glob(["include/gtest/**/*.h", "include/gmock/**/*.h"]),
    includes = ["include"],
    srcs = ["lib/libgmock.a", "lib/libgtest.a"],
    linkopts = ["-pthread"],
    visibility = ["//visibility:public"],
)

cc_library(
    name = "gtest_main",
    srcs = ["lib/libgtest_main.a"],
    deps = [":gtest"],
    visibility = ["//visibility:public"],
)
""",
    )
    _maybe(
        _debian_library,
        "system_benchmark",
        package = "libbenchmark-dev",
        includes = ["/usr/include/benchmark"],
        # Debian ships Google Benchmark as a shared library only; the GPU bundle carries it.
        libs = ["libbenchmark.so"],
        build_file_content = """
cc_library(
    name = "benchmark",
    hdrs = glob(["include/benchmark/*.h"]),
    includes = ["include"],
    srcs = ["lib/libbenchmark.so"],
    linkopts = ["-pthread"],
    visibility = ["//visibility:public"],
)
""",
    )
    _maybe(
        _debian_library,
        "system_eigen",
        package = "libeigen3-dev",
        includes = ["/usr/include/eigen3"],
        build_file_content = """
cc_library(
    name = "eigen",
    hdrs = glob(["include/eigen3/Eigen/**", "include/eigen3/unsupported/**"]),
    includes = ["include/eigen3"],
    visibility = ["//visibility:public"],
)
""",
    )
    _maybe(cuda_configure, "local_cuda")
