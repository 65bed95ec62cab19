"""The rules a BUILD file in this repository uses, from one place:

    load("//conv:defs.bzl", "cc_library", "cpu_test", "cuda_library", "gpu_test")

cc_library and cc_binary are rules_cc's; cuda_library compiles .cu files with the local toolkit
(tools/cuda/defs.bzl); cpu_test and gpu_test are the repository's two kinds of test
(conv/testing/defs.bzl).
"""

load("@rules_cc//cc:defs.bzl", _cc_binary = "cc_binary", _cc_library = "cc_library")
load("//conv/testing:defs.bzl", _cpu_test = "cpu_test", _gpu_test = "gpu_test")
load("//tools/cuda:defs.bzl", _cuda_library = "cuda_library")

cc_binary = _cc_binary
cc_library = _cc_library
cpu_test = _cpu_test
cuda_library = _cuda_library
gpu_test = _gpu_test
