"""The two kinds of test in this repository, so that every BUILD states only what differs.

    cpu_test(name = "x_cpu_test", deps = [...])   # runs everywhere, in `bazel test //...`
    gpu_test(name = "x_test", deps = [...])       # needs a GPU: built by CI, run by the GPU
                                                  # bundle (tools/gpu_run.sh); tagged gpu, manual

srcs defaults to [name + ".cc"]. gpu_test's main is //conv/testing:gpu_test_main, which fails
before any test runs when there is no CUDA device; a test whose cases partly run without one
passes main = "@system_gtest//:gtest_main".
"""

def cpu_test(name, deps, srcs = None, size = "small", **kwargs):
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs or [name + ".cc"],
        deps = deps + ["@system_gtest//:gtest_main"],
        **kwargs
    )

def gpu_test(name, deps, srcs = None, size = "large", main = "//conv/testing:gpu_test_main",
             **kwargs):
    extra = ["@system_gtest//:gtest"] if main == "//conv/testing:gpu_test_main" else []
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs or [name + ".cc"],
        tags = ["gpu", "manual"],
        deps = deps + [main, "@local_cuda//:cudart_static"] + extra,
        **kwargs
    )
