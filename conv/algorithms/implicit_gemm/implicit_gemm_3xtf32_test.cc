// implicit_gemm_3xtf32 on the GPU against the fp64 reference (seeded inputs, NaN-poisoned output):
// the edge shapes, the KernelBot test shapes and a few shapes that pick each gather path and
// tile overhang, all elements, two seeds; the long KernelBot reductions and the "cnn" shapes at
// 4096 sampled positions. The backward (dgrad, wgrad) on the CPU replay's shapes, every element,
// uniform and normal data and every input class, ResNet-50's 56x56 layer sampled, and bitwise
// reproducibility across calls. Needs a GPU: without one every case fails with the plan's error.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32_backward_testing.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_testing.h"
#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
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
                         [](const auto& info) { return GtestName(info.param.shape); });

using implicit_gemm_3xtf32_backward_testing::AsOp;
using implicit_gemm_3xtf32_backward_testing::BackwardShapes;
using implicit_gemm_3xtf32_backward_testing::Resnet64;

std::vector<Shape> BackwardCases() {
  std::vector<Shape> cases;
  for (Op op : {Op::kDgrad, Op::kWgrad}) {
    for (const Shape& s : BackwardShapes()) cases.push_back(AsOp(s, op));
  }
  return cases;
}

class ImplicitGemm3xTf32BackwardTest : public ::testing::TestWithParam<Shape> {};

TEST_P(ImplicitGemm3xTf32BackwardTest, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam(), kAlgorithm, int64_t{1} << 20);
}

TEST_P(ImplicitGemm3xTf32BackwardTest, EveryInputClassWithinBar) {
  ExpectEveryClassWithinBar(GetParam(), kAlgorithm, 7);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ImplicitGemm3xTf32BackwardTest,
                         ::testing::ValuesIn(BackwardCases()),
                         [](const auto& info) { return GtestName(info.param); });

// The long reductions: wgrad's 100352 terms split into slices, dgrad at full size.
TEST(ImplicitGemm3xTf32BackwardLarge, Resnet64) {
  for (Op op : {Op::kDgrad, Op::kWgrad}) {
    ExpectMatchesReference(Resnet64(op), kAlgorithm, 4096);
    ExpectEveryClassWithinBar(Resnet64(op), kAlgorithm, 9);
  }
}

// The same plan run four times, the output and the workspace filled with a different byte
// between calls, on two streams: dx and dw must be bitwise identical (no atomics; the split and
// the slice order fixed by the shape).
TEST(ImplicitGemm3xTf32BackwardDeterminism, BitwiseIdenticalAcrossCalls) {
  for (const Shape& s : {Resnet64(Op::kDgrad), Resnet64(Op::kWgrad),
                         AsOp(GeometryShapes()[7], Op::kDgrad),
                         AsOp(GeometryShapes()[7], Op::kWgrad)}) {
    SCOPED_TRACE(s.ToString());
    absl::StatusOr<Plan> plan = Plan::Create(s, kAlgorithm);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<DeviceProblem> problem = DeviceProblem::Create(s, 5, Distribution::kNormal);
    ASSERT_TRUE(problem.ok()) << problem.status();
    const Tensors t = problem->tensors();
    float* out = s.op == Op::kDgrad ? t.dx : t.dw;
    const size_t out_bytes =
        4 * static_cast<size_t>(s.op == Op::kDgrad ? s.input_elements() : s.filter_elements());
    const size_t ws_bytes = plan->workspace_bytes();
    void* ws = nullptr;
    if (ws_bytes > 0) {
      ASSERT_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);
    }
    cudaStream_t streams[2] = {nullptr, nullptr};
    ASSERT_EQ(cudaStreamCreate(&streams[1]), cudaSuccess);
    std::vector<float> first;
    for (int call = 0; call < 4; ++call) {
      const int fill = 0x11 * (call + 1);
      ASSERT_EQ(cudaMemset(out, fill, out_bytes), cudaSuccess);
      if (ws != nullptr) {
        ASSERT_EQ(cudaMemset(ws, 0xFF - fill, ws_bytes), cudaSuccess);
      }
      cudaStream_t stream = streams[call % 2];
      absl::Status st = plan->Run(t, ws, ws_bytes, stream);
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      absl::StatusOr<std::vector<float>> got = problem->ReadOutput({});
      ASSERT_TRUE(got.ok()) << got.status();
      if (call == 0) {
        first = *std::move(got);
        continue;
      }
      ASSERT_EQ(got->size(), first.size());
      EXPECT_EQ(std::memcmp(got->data(), first.data(), 4 * first.size()), 0) << "call " << call;
    }
    cudaStreamDestroy(streams[1]);
    if (ws != nullptr) cudaFree(ws);
  }
}

}  // namespace
}  // namespace conv2d
