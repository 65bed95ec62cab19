// depthwise_dgrad (depthwise_dgrad.h) on the GPU against the fp64 reference at every dx element:
// EfficientNet-B0's strided depthwise layers scaled down (3x3/2 and 5x5/2), stride 3 with
// remainders, H != W, odd sizes, batch 1, K = 1, K = H, channel multipliers, dilation with
// stride, asymmetric padding; every input class in dy and w (a non-finite tap reaches every dx
// of its channel); auto's pick on the nets' layers; the inputs read afresh on every call.
// Bitwise determinism: determinism_test, over the registry. Fails without a GPU.
#include <vector>

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

std::vector<Shape> Shapes() {
  std::vector<Shape> v = {
      Dg(DepthwiseShape(2, 6, 1, 112, 112, 3, 3, 1, 2)),  // EfficientNet's 3x3/2 at 112x112
      Dg(DepthwiseShape(3, 8, 1, 56, 56, 5, 5, 2, 2)),    // its 5x5/2 at 56x56
      Dg(DepthwiseShape(4, 9, 1, 28, 28, 3, 3, 1, 2)),    // 3x3/2 at 28x28
      Dg(DepthwiseShape(5, 7, 1, 14, 14, 5, 5, 2, 2)),    // 5x5/2 at 14x14
      Dg(DepthwiseShape(2, 5, 1, 26, 31, 3, 3, 1, 3)),    // stride 3, remainders, H != W
      Dg(DepthwiseShape(1, 3, 1, 9, 9, 1, 1, 0, 2)),      // K = 1, batch 1: rows no tap reaches
      Dg(DepthwiseShape(2, 4, 1, 7, 7, 7, 7, 0, 2)),      // K = H: one output pixel
      Dg(DepthwiseShape(2, 6, 2, 17, 23, 5, 5, 2, 2)),    // multiplier 2
      Dg(DepthwiseShape(1, 3, 3, 21, 20, 3, 3, 1, 2)),    // multiplier 3
      Dg(DepthwiseShape(2, 4, 1, 19, 21, 3, 3, 2, 2, 2)), // dilation 2 with stride 2
  };
  Shape asym = Dg(DepthwiseShape(2, 3, 1, 15, 16, 3, 4, 0, 1));
  asym.pad_top = 2, asym.pad_bottom = 0, asym.pad_left = 1, asym.pad_right = 3;
  asym.stride_h = 2, asym.stride_w = 3, asym.dilation_h = 3;
  v.push_back(asym);
  return v;
}

class DepthwiseDgradTest : public ::testing::TestWithParam<Shape> {};

TEST_P(DepthwiseDgradTest, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam(), kAlgorithm, int64_t{1} << 20);
}

TEST_P(DepthwiseDgradTest, EveryInputClassWithinBar) {
  ExpectEveryClassWithinBar(GetParam(), kAlgorithm, 11);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DepthwiseDgradTest, ::testing::ValuesIn(Shapes()),
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
