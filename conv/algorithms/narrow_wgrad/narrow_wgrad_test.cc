// narrow_wgrad on the GPU against the fp64 reference at every dw and db element (seeded inputs,
// NaN-poisoned outputs): the stems (one past the centring's length) and EfficientNet's early 1x1
// layers at reduced batch, padding, stride, dilation, asymmetric padding, odd sizes, batch 1,
// one run and many, Cin*Kh*Kw and Cout not multiples of 4, the largest dw it stages; every input
// class; inputs changed between calls; auto's picks on the networks' narrow layers. Fails
// without a GPU.
#include <string>
#include <vector>

#include "conv/algorithms/narrow_wgrad/narrow_wgrad.h"
#include "conv/conv.h"
#include "conv/testing/expect_reference.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "gtest/gtest.h"
#include "reference/input_classes.h"

namespace conv2d {
namespace {

constexpr char kAlgorithm[] = "narrow_wgrad";

Shape Wgrad(Shape s, int64_t pad, int64_t stride, bool bias) {
  s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = pad;
  s.stride_h = s.stride_w = stride;
  s.has_bias = bias;
  s.op = Op::kWgrad;
  return s;
}

std::vector<Shape> Shapes() {
  std::vector<Shape> v = {
      Wgrad(Shape{8, 3, 32, 224, 224, 3, 3}, 1, 2, false),  // EfficientNet's stem: centred
      Wgrad(Shape{4, 16, 96, 112, 112, 1, 1}, 0, 1, false),  // EfficientNet's 1x1 layers
      Wgrad(Shape{4, 32, 16, 112, 112, 1, 1}, 0, 1, true),
      Wgrad(Shape{8, 24, 144, 56, 56, 1, 1}, 0, 1, false),
      Wgrad(Shape{8, 144, 24, 56, 56, 1, 1}, 0, 1, true),
      Wgrad(Shape{2, 3, 32, 224, 224, 4, 4}, 0, 4, true),   // a patchify stem
      Wgrad(Shape{1, 5, 7, 9, 13, 3, 3}, 1, 1, true),       // one run, odd everything
      Wgrad(Shape{3, 2, 9, 31, 29, 5, 5}, 2, 3, false),     // stride 3
      Wgrad(Shape{2, 24, 160, 20, 20, 1, 1}, 0, 1, true),   // the most staged rows, 240 tiles
  };
  Shape dilated = Wgrad(Shape{2, 3, 10, 33, 30, 3, 3}, 0, 1, true);
  dilated.dilation_h = 2, dilated.dilation_w = 3;
  dilated.pad_top = 2, dilated.pad_bottom = 0, dilated.pad_left = 3, dilated.pad_right = 1;
  v.push_back(dilated);
  return v;
}

class NarrowWgradTest : public ::testing::TestWithParam<Shape> {};

TEST_P(NarrowWgradTest, MatchesFp64Reference) {
  ExpectMatchesReference(GetParam(), kAlgorithm, /*max_positions=*/1 << 20);
}

INSTANTIATE_TEST_SUITE_P(Shapes, NarrowWgradTest, ::testing::ValuesIn(Shapes()),
                         [](const auto& info) { return GtestName(info.param); });

TEST(NarrowWgradGpuTest, InputsChangeBetweenCalls) {
  absl::Status st =
      CheckInputsChangeBetweenCalls(kAlgorithm, Wgrad(Shape{2, 6, 20, 30, 28, 3, 3}, 1, 2, true));
  EXPECT_TRUE(st.ok()) << st;
}

// Every input class (outliers, a large mean, sparse, huge, tiny, non-finite) at every output,
// on a stem and 1x1 layers with 100k- and 400k-pixel reductions (centred: the large mean
// measured 1.35x the bar on the second without it).
TEST(NarrowWgradGpuTest, InputClasses) {
  for (const Shape& s : {Wgrad(Shape{8, 3, 32, 224, 224, 3, 3}, 1, 2, false),
                         Wgrad(Shape{32, 16, 96, 112, 112, 1, 1}, 0, 1, false),
                         Wgrad(Shape{32, 24, 40, 56, 56, 1, 1}, 0, 1, true)}) {
    ExpectEveryClassWithinBar(s, kAlgorithm, 91);
  }
}

// auto takes it on EfficientNet-B0's stem and early 1x1 layers (batch 32).
TEST(NarrowWgradGpuTest, AutoTakesTheNarrowLayers) {
  for (const Shape& s : {Wgrad(Shape{32, 3, 32, 224, 224, 3, 3}, 1, 2, false),
                         Wgrad(Shape{32, 16, 96, 112, 112, 1, 1}, 0, 1, false),
                         Wgrad(Shape{32, 24, 144, 56, 56, 1, 1}, 0, 1, false)}) {
    absl::StatusOr<std::string> pick = ChooseAlgorithm(s);
    ASSERT_TRUE(pick.ok()) << pick.status();
    EXPECT_EQ(*pick, kAlgorithm) << s.ToString();
  }
}

}  // namespace
}  // namespace conv2d
