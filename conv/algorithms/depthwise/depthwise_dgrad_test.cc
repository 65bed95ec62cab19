// depthwise_dgrad (depthwise_dgrad.h) on the GPU against the fp64 reference at every dx element:
// EfficientNet-B0's strided depthwise layers scaled down (3x3/2 and 5x5/2), stride 3 with
// remainders, H != W, odd sizes, batch 1, K = 1, K = H, channel multipliers, dilation with
// stride, asymmetric padding; every input class in dy and w (a non-finite tap reaches every dx
// of its channel); auto's pick on the nets' layers; the inputs read afresh on every call.
// Bitwise determinism: determinism_test, over the registry. Fails without a GPU.
#include <vector>

#include "conv/algorithms/depthwise/depthwise_layers.h"
#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "depthwise_dgrad";

Shape Dg(Shape s) {
  s.op = Op::kDgrad;
  s.has_bias = false;
  return s;
}

class DepthwiseDgradTest : public ::testing::TestWithParam<Shape> {};

TEST_P(DepthwiseDgradTest, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam(), kAlgorithm, int64_t{1} << 20);
}

TEST_P(DepthwiseDgradTest, EveryInputClassWithinBar) {
  ExpectEveryClassWithinBar(GetParam(), kAlgorithm, 11);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DepthwiseDgradTest, ::testing::ValuesIn(DepthwiseDgradShapes(3)),
                         [](const auto& info) { return GtestName(info.param); });

// auto takes it on EfficientNet-B0's four strided depthwise dgrads at batch 32.
TEST(DepthwiseDgradGpuTest, AutoTakesTheNetsLayers) {
  for (const Shape& s : {Dg(DepthwiseShape(32, 96, 1, 112, 112, 3, 3, 1, 2)),
                         Dg(DepthwiseShape(32, 144, 1, 56, 56, 5, 5, 2, 2)),
                         Dg(DepthwiseShape(32, 240, 1, 28, 28, 3, 3, 1, 2)),
                         Dg(DepthwiseShape(32, 672, 1, 14, 14, 5, 5, 2, 2))}) {
    ExpectAutoTakes(s, kAlgorithm);
  }
}

TEST(DepthwiseDgradGpuTest, InputsChangeBetweenCalls) {
  const absl::Status st =
      CheckInputsChangeBetweenCalls(kAlgorithm, Dg(DepthwiseShape(3, 5, 2, 37, 29, 5, 5, 2, 2)));
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace conv2d
