"""The public Bazel surface for CUDA code in conv2d.

cuda_library(name, srcs, hdrs, deps, copts): compiles `srcs` (.cu) with nvcc for sm_90a (plus
compute_80 PTX) and wraps the objects in a cc_library, so cc targets depend on it as on any other.
`deps` are cc targets whose headers the .cu files include. The toolkit is found by @local_cuda
(tools/cuda/private/configure.bzl).
"""

load("//tools/cuda/private:nvcc.bzl", "cuda_objects")

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], visibility = None, **kwargs):
    cuda_objects(
        name = name + "_nvcc",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda_headers"],
        copts = copts,
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_nvcc"],
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart_static"],
        alwayslink = True,
        linkstatic = True,
        visibility = visibility,
        **kwargs
    )
