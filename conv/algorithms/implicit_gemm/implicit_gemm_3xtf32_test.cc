// implicit_gemm_3xtf32 on the GPU against the fp64 reference (seeded inputs, NaN-poisoned output):
// the edge shapes, the KernelBot test shapes and a few shapes that pick each gather path and
// tile overhang, all elements, two seeds; the long KernelBot reductions and the "cnn" shapes at
// 4096 sampled positions. Needs a GPU: without one every case fails with the plan's error.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "conv/conv.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "implicit_gemm_3xtf32";

struct Case {
  Shape shape;
  int64_t max_positions;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.shape.ToString() << " (" << c.max_positions << " positions)";
}

// (B, Cin, Cout, H = W, K).
Shape Cnn(int64_t b, int64_t cin, int64_t cout, int64_t hw, int64_t k) {
  return Shape{b, cin, cout, hw, hw, k, k};
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  constexpr int64_t kAll = 1 << 16;
  for (const Shape& s : EdgeShapes()) cases.push_back({s, kAll});
  for (const Shape& s : KernelBotTestShapes()) cases.push_back({s, kAll});
  // Each of the four gather variants with overhang in M, N and K:
  //   Kw = 1, W % 4 = 0: 16-byte input gather; K % 4 = 0: 16-byte filter gather.
  cases.push_back({Shape{3, 8, 65, 10, 12, 2, 1}, kAll});    // both 16-byte, K = 16, Cout = 65
  cases.push_back({Shape{2, 5, 70, 12, 20, 3, 1}, kAll});    // 16-byte input, K = 15
  cases.push_back({Shape{2, 4, 1, 31, 29, 3, 3}, kAll});     // 16-byte filter (K = 36), Cout = 1
  cases.push_back({Shape{1, 33, 130, 9, 11, 3, 2}, kAll});   // scalar both, K = 198, 3 N tiles
  cases.push_back({Shape{2, 40, 8, 20, 20, 4, 4}, kAll});    // K = 640: several folds + K tail 0
  cases.push_back({Shape{1, 3, 5, 300, 7, 1, 7}, kAll});     // K = 21, tall thin image
  // Long reductions: 16384 and 131072 terms.
  cases.push_back({Shape::KernelBot(128, 16, 64, 4), 4096});
  cases.push_back({Shape::KernelBot(256, 32, 128, 1), 4096});
  // The "cnn" suite.
  for (const Shape& s : {Cnn(32, 64, 64, 56, 3), Cnn(32, 256, 256, 14, 3), Cnn(8, 3, 64, 224, 7),
                         Cnn(64, 32, 32, 33, 3), Cnn(32, 256, 256, 56, 1)}) {
    cases.push_back({s, 4096});
  }
  return cases;
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
