"""triton_artifacts: Triton kernel artifacts (.cubin, .ptx, .json) compiled into a cc_library.

    triton_artifacts(
        name = "igemm_artifacts",
        srcs = glob(["artifacts/igemm_conv_*"]),
        symbol = "IgemmConvArtifacts",
    )

gives a cc_library `igemm_artifacts` with a generated header "<package>/igemm_artifacts.h"
declaring `const conv2d::triton::EmbeddedFiles& IgemmConvArtifacts();` (conv/triton/embedded.h).
"""

def triton_artifacts(name, srcs, symbol, visibility = None, **kwargs):
    header = name + ".h"
    source = name + ".cc"
    include = (native.package_name() + "/" + header) if native.package_name() else header
    native.genrule(
        name = name + "_embed",
        srcs = srcs,
        outs = [header, source],
        tools = ["//conv/triton:embed_files"],
        cmd = ("$(location //conv/triton:embed_files) --symbol=%s --include=%s " +
               "--header=$(location %s) --source=$(location %s) $(SRCS)") %
              (symbol, include, header, source),
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        srcs = [source],
        hdrs = [header],
        deps = ["//conv/triton:embedded"],
        visibility = visibility,
        **kwargs
    )
