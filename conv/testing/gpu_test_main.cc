// main() for GPU tests: fails loudly, before any test runs, when there is no CUDA device, so that a
// GPU test can never be reported as passed (or skipped) on a machine without one.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "gtest/gtest.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::fprintf(stderr, "FAILED: %s needs a CUDA GPU and found none (%s)\n", argv[0],
                 err == cudaSuccess ? "0 devices" : cudaGetErrorString(err));
    return 1;
  }
  return RUN_ALL_TESTS();
}
