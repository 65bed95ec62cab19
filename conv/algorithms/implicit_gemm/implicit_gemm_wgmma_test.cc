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
#include <string>
#include <vector>

#include "conv/algorithms/implicit_gemm/implicit_gemm_testing.h"
#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "implicit_gemm_wgmma";

using implicit_gemm_testing::Case;

// The shared cases (implicit_gemm_testing.h), shapes that pick each tile width (Cout <= 32: 32,
// <= 64: 64, else 128), the 16-byte input gather and overhang in M, N and K, and the "cnn" suite.
std::vector<Case> Cases() {
  return implicit_gemm_testing::GpuCases(
      {
          Shape{2, 8, 24, 8, 12, 1, 1},    // BN 32, vector A
          Shape{1, 9, 33, 14, 13, 3, 3},   // BN 64, Cout just above 32
          Shape{2, 40, 8, 20, 20, 3, 4},   // K = 480: a partial last chunk
          Shape{2, 8, 136, 8, 12, 1, 1},   // vector A, 2 N tiles
          Shape{1, 24, 200, 6, 6, 3, 3},   // one M tile, partial
          Shape{5, 7, 9, 13, 11, 1, 1},    // K = 7, odd everything
      },
      CnnShapes());
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
