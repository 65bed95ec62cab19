// implicit_gemm_3xtf32 on the GPU against the fp64 reference (seeded inputs, NaN-poisoned output):
// the edge shapes, the KernelBot test shapes and a few shapes that pick each gather path and
// tile overhang, all elements, two seeds; the long KernelBot reductions and the "cnn" shapes at
// 4096 sampled positions. Needs a GPU: without one every case fails with the plan's error.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <vector>

#include "conv/algorithms/implicit_gemm/implicit_gemm_testing.h"
#include "conv/conv.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "implicit_gemm_3xtf32";

using implicit_gemm_testing::Case;

// The shared cases (implicit_gemm_testing.h) and five of the "cnn" shapes.
std::vector<Case> Cases() {
  return implicit_gemm_testing::GpuCases(
      {}, {Shape{32, 64, 64, 56, 56, 3, 3}, Shape{32, 256, 256, 14, 14, 3, 3},
           Shape{8, 3, 64, 224, 224, 7, 7}, Shape{64, 32, 32, 33, 33, 3, 3},
           Shape{32, 256, 256, 56, 56, 1, 1}});
}

TEST(ImplicitGemm3xTf32GpuTest, HasDevice) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  ASSERT_TRUE(err == cudaSuccess && n > 0)
      << "this test needs a CUDA GPU: " << (err == cudaSuccess ? "0 devices" : cudaGetErrorString(err));
}

class ImplicitGemm3xTf32Test : public ::testing::TestWithParam<Case> {};

TEST_P(ImplicitGemm3xTf32Test, MatchesFp64Reference) {
  const Case& c = GetParam();
  for (uint64_t seed : {uint64_t{11}, uint64_t{12345}}) {
    absl::StatusOr<Comparison> r = CheckAgainstReference(c.shape, kAlgorithm, seed, c.max_positions);
    ASSERT_TRUE(r.ok()) << c.shape.ToString() << ": " << r.status();
    std::printf("%-22s %-36s seed %-6llu %s\n", kAlgorithm, c.shape.ToString().c_str(),
                static_cast<unsigned long long>(seed), r->ToString().c_str());
    EXPECT_TRUE(r->ok()) << c.shape.ToString() << " seed " << seed << ": " << r->ToString()
                         << " first failure at " << r->first_failure;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ImplicitGemm3xTf32Test, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.shape.ToString(); });

}  // namespace
}  // namespace conv2d
