// A stride-1 dgrad equals the forward DgradAsForward makes, on the filter TransposedFilterSource
// rearranges: the CPU reference of both, element for element.
#include "conv/core/transposed_dgrad.h"

#include <cmath>
#include <string>
#include <vector>

#include "conv/testing/shapes.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace {

Shape Dgrad(Shape s, int64_t pt, int64_t pb, int64_t pl, int64_t pr, int64_t dh, int64_t dw,
            int64_t groups) {
  s.pad_top = pt, s.pad_bottom = pb, s.pad_left = pl, s.pad_right = pr;
  s.dilation_h = dh, s.dilation_w = dw, s.groups = groups;
  s.op = Op::kDgrad;
  return s;
}

class TransposedDgradTest : public ::testing::TestWithParam<Shape> {};

TEST_P(TransposedDgradTest, EqualsTheReferenceDgrad) {
  const Shape d = GetParam();
  Shape f;
  ASSERT_TRUE(DgradAsForward(d, &f)) << d.ToString();
  EXPECT_EQ(f.op, Op::kFprop);
  EXPECT_EQ(f.output_elements(), d.input_elements());
  EXPECT_EQ(f.input_elements(), d.output_elements());
  const auto dy = RandomTensor(3, kGradTensor, d.output_elements(), Distribution::kNormal);
  const auto w = RandomTensor(3, kFilterTensor, d.filter_elements(), Distribution::kNormal);
  std::vector<float> wt(w.size());
  for (size_t e = 0; e < wt.size(); ++e) {
    wt[e] = w[TransposedFilterSource(e, d.in_per_group(), d.out_per_group(), d.kernel_h,
                                     d.kernel_w)];
  }
  Tensors in;
  in.dy = dy.data();
  in.w = w.data();
  const std::vector<double> want = Reference(d, in);
  const std::vector<double> got = ReferenceConv(f, dy.data(), wt.data());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-11 * (1 + std::abs(want[i]))) << "at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TransposedDgradTest,
    ::testing::Values(Dgrad(Shape{2, 3, 5, 9, 7, 3, 3}, 1, 1, 1, 1, 1, 1, 1),
                      Dgrad(Shape{1, 4, 6, 11, 10, 3, 5}, 2, 0, 1, 3, 1, 1, 2),
                      Dgrad(Shape{2, 6, 6, 12, 13, 3, 3}, 2, 2, 1, 3, 2, 2, 6),
                      Dgrad(Shape{1, 4, 8, 9, 9, 5, 3}, 0, 0, 0, 0, 1, 2, 4),
                      Dgrad(Shape{3, 2, 2, 5, 5, 1, 1}, 0, 0, 0, 0, 1, 1, 1),
                      Dgrad(Shape{1, 3, 2, 6, 6, 6, 6}, 0, 0, 0, 0, 1, 1, 1)),
    [](const auto& info) { return GtestName(info.param); });

TEST(TransposedDgradTest, OnlyStrideOneWithinTheSpan) {
  Shape f;
  Shape d = Dgrad(Shape{1, 2, 2, 9, 9, 3, 3}, 1, 1, 1, 1, 1, 1, 1);
  EXPECT_TRUE(DgradAsForward(d, &f));
  d.stride_h = 2;
  EXPECT_FALSE(DgradAsForward(d, &f));
  d.stride_h = 1;
  d.pad_left = 3;  // more than (K-1)*dilation = 2: the forward would need padding -1
  EXPECT_FALSE(DgradAsForward(d, &f));
  d.pad_left = 1;
  d.op = Op::kWgrad;
  EXPECT_FALSE(DgradAsForward(d, &f));
}

}  // namespace
}  // namespace conv2d
