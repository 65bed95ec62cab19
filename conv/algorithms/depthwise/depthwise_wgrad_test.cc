// depthwise's wgrad (depthwise_wgrad.h) on the GPU against the fp64 reference at every dw
// element: the networks' depthwise layers scaled down (ConvNeXt's 7x7, EfficientNet's 3x3 and
// 5x5 at stride 1 and 2, RepLKNet's 31x31), odd sizes, batch 1, K = 1, K = H, stride 2 and 3
// with remainders, dilation, asymmetric padding, channel multipliers, the bias (db by the plan);
// every input class; long reductions cut into slices; auto's pick; bitwise determinism across
// calls, streams and poisoned outputs and workspaces. Fails without a GPU.
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "depthwise";

Shape Wg(Shape s) {
  s.op = Op::kWgrad;
  return s;
}

std::vector<Shape> Shapes() {
  std::vector<Shape> v = {
      Wg(DepthwiseShape(4, 6, 1, 56, 56, 7, 7, 3)),          // ConvNeXt's 56x56 (one stage, slices)
      Wg(DepthwiseShape(4, 8, 1, 28, 28, 7, 7, 3)),          // 28x28 (images per stage)
      Wg(DepthwiseShape(3, 10, 1, 14, 14, 7, 7, 3)),
      Wg(DepthwiseShape(5, 12, 1, 7, 7, 7, 7, 3)),           // 7x7 planes, many per stage
      Wg(DepthwiseShape(2, 4, 1, 112, 112, 3, 3, 1)),        // EfficientNet's 112x112: bands
      Wg(DepthwiseShape(2, 4, 1, 112, 112, 3, 3, 1, 2)),     // its stride-2 3x3
      Wg(DepthwiseShape(3, 6, 1, 56, 56, 5, 5, 2, 2)),       // stride-2 5x5
      Wg(DepthwiseShape(3, 9, 1, 14, 14, 5, 5, 2, 1, 1, true)),  // 5x5, db
      Wg(DepthwiseShape(1, 3, 1, 56, 56, 31, 31, 15)),       // RepLKNet's 31x31: 16 tap tiles
      Wg(DepthwiseShape(2, 5, 1, 13, 11, 3, 3, 1)),          // odd sizes
      Wg(DepthwiseShape(1, 3, 1, 9, 9, 1, 1, 0, 1, 1, true)),   // K = 1, batch 1
      Wg(DepthwiseShape(2, 4, 1, 7, 7, 7, 7, 0)),            // K = H: one output pixel
      Wg(DepthwiseShape(2, 6, 2, 17, 23, 5, 5, 2, 2)),       // multiplier 2, stride 2, H != W
      Wg(DepthwiseShape(1, 3, 3, 20, 20, 3, 3, 1)),          // multiplier 3
      Wg(DepthwiseShape(2, 4, 1, 19, 21, 3, 3, 2, 1, 2)),    // dilation 2 (run-time columns)
      Wg(DepthwiseShape(2, 5, 1, 26, 31, 3, 3, 1, 3)),       // stride 3, remainders
      Wg(DepthwiseShape(2, 9, 1, 33, 35, 6, 5, 2, 1, 1, true)),  // 6x5: an 8x8 tile, taps dropped
      Wg(DepthwiseShape(1, 2, 1, 40, 70, 9, 9, 4)),          // 9x9: four tap tiles
  };
  Shape asym = DepthwiseShape(2, 3, 1, 15, 16, 3, 4, 0, 1, 1, true);
  asym.pad_top = 2, asym.pad_bottom = 0, asym.pad_left = 1, asym.pad_right = 3;
  asym.stride_h = 2, asym.stride_w = 1, asym.dilation_h = 2;
  v.push_back(Wg(asym));
  return v;
}

class DepthwiseWgradTest : public ::testing::TestWithParam<Shape> {};

TEST_P(DepthwiseWgradTest, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam(), kAlgorithm, int64_t{1} << 20);
}

TEST_P(DepthwiseWgradTest, EveryInputClassWithinBar) {
  ExpectEveryClassWithinBar(GetParam(), kAlgorithm, 7);
}

TEST_P(DepthwiseWgradTest, AutoTakesIt) { ExpectAutoTakes(GetParam(), kAlgorithm); }

INSTANTIATE_TEST_SUITE_P(Shapes, DepthwiseWgradTest, ::testing::ValuesIn(Shapes()),
                         [](const auto& info) { return GtestName(info.param); });

// A long reduction (batch 32 at 56x56: 100,352 terms a tap, in 11 slices) on every input class,
// the large mean with zero-sum dy planes among them.
TEST(DepthwiseWgradLarge, ConvNeXtStage1) {
  const Shape s = Wg(DepthwiseShape(32, 4, 1, 56, 56, 7, 7, 3));
  ExpectMatchesReference(s, kAlgorithm, int64_t{1} << 20);
  ExpectEveryClassWithinBar(s, kAlgorithm, 9);
}

TEST(DepthwiseWgradGpuTest, InputsChangeBetweenCalls) {
  const absl::Status st =
      CheckInputsChangeBetweenCalls(kAlgorithm, Wg(DepthwiseShape(3, 5, 2, 37, 29, 7, 7, 3)));
  EXPECT_TRUE(st.ok()) << st;
}

// The same plan four times, dw and the workspace filled with another byte before each call, on
// two streams: identical bytes (no atomics; slices fixed by the shape, summed in order).
TEST(DepthwiseWgradDeterminism, BitwiseIdenticalAcrossCalls) {
  for (const Shape& s : {Wg(DepthwiseShape(32, 4, 1, 56, 56, 7, 7, 3)),
                         Wg(DepthwiseShape(8, 6, 2, 29, 31, 5, 5, 2, 2)),
                         Wg(DepthwiseShape(2, 2, 1, 56, 56, 31, 31, 15))}) {
    SCOPED_TRACE(s.ToString());
    absl::StatusOr<Plan> plan = Plan::Create(s, kAlgorithm);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<DeviceProblem> problem = DeviceProblem::Create(s, 5, Distribution::kNormal);
    ASSERT_TRUE(problem.ok()) << problem.status();
    const Tensors t = problem->tensors();
    const size_t out_bytes = 4 * static_cast<size_t>(s.filter_elements());
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
      ASSERT_EQ(cudaMemset(t.dw, fill, out_bytes), cudaSuccess);
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

// Stride-1 dgrad stays the forward's (transposed_dgrad.h): "depthwise" still proposes it
// through its forward kernels, wgrad being the only backward operation it computes itself.
TEST(DepthwiseWgradPlanTest, StrideOneDgradStaysTheForwards) {
  Shape dgrad = DepthwiseShape(2, 4, 1, 20, 20, 7, 7, 3);
  dgrad.op = Op::kDgrad;
  absl::StatusOr<Plan> plan = Plan::Create(dgrad, kAlgorithm);
  EXPECT_TRUE(plan.ok()) << plan.status();
}

}  // namespace
}  // namespace conv2d
