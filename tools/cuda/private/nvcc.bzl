"""Compiles .cu files with nvcc into position-independent objects."""

load("@local_cuda//:config.bzl", "NVCC")

# sm_90a machine code (wgmma, TMA) plus compute_80 PTX so that other GPUs JIT-compile what they can.
GENCODE = [
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_80,code=compute_80",
]

def _cuda_objects_impl(ctx):
    cc = cc_common.merge_cc_infos(
        cc_infos = [d[CcInfo] for d in ctx.attr.deps if CcInfo in d],
    ).compilation_context
    include_flags = ["-I.", "-I" + ctx.bin_dir.path]
    for path in cc.includes.to_list() + cc.quote_includes.to_list():
        include_flags.append("-I" + path)
    for path in cc.system_includes.to_list():
        include_flags += ["-isystem", path]
    defines = ["-D" + d for d in cc.defines.to_list()]

    mode = ctx.var.get("COMPILATION_MODE", "opt")
    opt = ["-O3", "-lineinfo"] if mode != "dbg" else ["-O0", "-g", "-G"]

    inputs = depset(ctx.files.hdrs, transitive = [cc.headers])
    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_nvcc/%s/%s.pic.o" % (ctx.label.name, src.basename[:-3]))
        args = ctx.actions.args()
        args.add_all(["-std=c++17", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr"])
        args.add_all(GENCODE + opt + include_flags + defines + ctx.attr.copts)
        args.add_all(["-c", src.path, "-o", obj.path])
        ctx.actions.run(
            executable = NVCC,
            arguments = [args],
            inputs = depset([src], transitive = [inputs]),
            outputs = [obj],
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin"},
            mnemonic = "Nvcc",
            progress_message = "nvcc %s" % src.short_path,
        )
        objects.append(obj)
    return [DefaultInfo(files = depset(objects))]

cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
    },
)
