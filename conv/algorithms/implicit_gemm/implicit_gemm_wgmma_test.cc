// implicit_gemm_wgmma on the GPU against the fp64 reference (seeded inputs, NaN-poisoned output):
// the edge shapes, the KernelBot test shapes, shapes that pick each tile width, gather path and
// overhang, all elements, uniform and normal inputs; the long KernelBot reductions and the "cnn"
// shapes at 4096 sampled positions; inputs changed between calls; and (not pass/fail) the
// effective TFLOP/s on the cnn shapes. Grids with a partial last round take a stream-K tail
// (atomics into zeroed tail tiles: edge shapes of 8 or more k-tiles, (32,512,512,9,3),
// (32,256,256,14,3), ...), others whole tiles only, so both kernel builds and both epilogues
// are covered. Needs a Hopper GPU: elsewhere main() fails (no device) or every case fails with
// Initialize's FailedPrecondition (not sm_90).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "implicit_gemm_wgmma";

struct Case {
  Shape shape;
  int64_t max_positions;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.shape.ToString() << " (" << c.max_positions << " positions)";
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  constexpr int64_t kAll = 1 << 16;
  for (const Shape& s : EdgeShapes()) cases.push_back({s, kAll});
  for (const Shape& s : KernelBotTestShapes()) cases.push_back({s, kAll});
  // Tile widths (Cout <= 32: 32, <= 64: 64, else 128), the 16-byte input gather (Kw = 1,
  // W % 4 = 0), and overhang in M, N and K.
  cases.push_back({Shape{3, 8, 65, 10, 12, 2, 1}, kAll});    // BN 128, vector A, K = 16
  cases.push_back({Shape{2, 5, 70, 12, 20, 3, 1}, kAll});    // BN 128, vector A, K = 15
  cases.push_back({Shape{2, 4, 1, 31, 29, 3, 3}, kAll});     // BN 32, Cout = 1
  cases.push_back({Shape{2, 8, 24, 8, 12, 1, 1}, kAll});     // BN 32, vector A
  cases.push_back({Shape{1, 9, 33, 14, 13, 3, 3}, kAll});    // BN 64, Cout just above 32
  cases.push_back({Shape{1, 33, 130, 9, 11, 3, 2}, kAll});   // BN 128, 2 N tiles, K = 198
  cases.push_back({Shape{2, 40, 8, 20, 20, 4, 4}, kAll});    // K = 640: 5 folds, no K tail
  cases.push_back({Shape{2, 40, 8, 20, 20, 3, 4}, kAll});    // K = 480: a partial last chunk
  cases.push_back({Shape{1, 3, 5, 300, 7, 1, 7}, kAll});     // tall thin image
  cases.push_back({Shape{2, 8, 136, 8, 12, 1, 1}, kAll});    // vector A, 2 N tiles
  cases.push_back({Shape{1, 24, 200, 6, 6, 3, 3}, kAll});    // one M tile, partial
  cases.push_back({Shape{5, 7, 9, 13, 11, 1, 1}, kAll});     // K = 7, odd everything
  // Long reductions: 16384 and 131072 terms.
  cases.push_back({Shape::KernelBot(128, 16, 64, 4), 4096});
  cases.push_back({Shape::KernelBot(256, 32, 128, 1), 4096});
  for (const Shape& s : CnnShapes()) cases.push_back({s, 4096});
  return cases;
}

class ImplicitGemmWgmmaTest : public ::testing::TestWithParam<Case> {};

TEST_P(ImplicitGemmWgmmaTest, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam().shape, kAlgorithm, GetParam().max_positions);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ImplicitGemmWgmmaTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.shape.ToString(); });

TEST(ImplicitGemmWgmmaGpuTest, InputsChangeBetweenCalls) {
  absl::Status st = CheckInputsChangeBetweenCalls(kAlgorithm);
  EXPECT_TRUE(st.ok()) << st;
}

// Not a pass/fail check: effective TFLOP/s (2*N*K*M / time, the filter split included) on the
// cnn shapes, the mean of 20 calls after 3 warm-up calls.
TEST(ImplicitGemmWgmmaGpuTest, Throughput) {
  for (const Shape& s : CnnShapes()) {
    absl::StatusOr<Plan> plan = Plan::Create(s, kAlgorithm);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<DeviceProblem> p = DeviceProblem::Create(s, 1);
    ASSERT_TRUE(p.ok()) << p.status();
    DeviceBuffer ws;
    if (plan->workspace_bytes() > 0) {
      ASSERT_EQ(cudaMalloc(&ws.p, plan->workspace_bytes()), cudaSuccess);
    }
    cudaEvent_t start, stop;
    ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
    constexpr int kWarm = 3, kIters = 20;
    for (int i = 0; i < kWarm + kIters; ++i) {
      if (i == kWarm) cudaEventRecord(start, nullptr);
      ASSERT_TRUE(plan->Run(p->x(), p->w(), p->y(), ws.p, plan->workspace_bytes(), nullptr).ok());
    }
    cudaEventRecord(stop, nullptr);
    ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    const double seconds = ms / 1e3 / kIters;
    std::printf("%-20s %-36s %9.1f us %7.1f TFLOP/s effective, workspace %.1f MiB\n",
                kAlgorithm, s.ToString().c_str(), seconds * 1e6, s.flops() / seconds / 1e12,
                plan->workspace_bytes() / 1048576.0);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
}

}  // namespace
}  // namespace conv2d
