// The Eigen reference against the plain nested-loop definition of the operation.
#include "reference/reference.h"

#include <cmath>

#include "gtest/gtest.h"
#include "reference/random.h"

namespace conv2d {
namespace {

std::vector<double> NestedLoops(const Shape& s, const std::vector<float>& x,
                                const std::vector<float>& w) {
  std::vector<double> y(s.output_elements());
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t o = 0; o < s.out_channels; ++o)
      for (int64_t i = 0; i < s.out_h(); ++i)
        for (int64_t j = 0; j < s.out_w(); ++j) {
          double acc = 0;
          for (int64_t c = 0; c < s.in_channels; ++c)
            for (int64_t p = 0; p < s.kernel_h; ++p)
              for (int64_t q = 0; q < s.kernel_w; ++q)
                acc += double{x[((b * s.in_channels + c) * s.height + i + p) * s.width + j + q]} *
                       double{w[((o * s.in_channels + c) * s.kernel_h + p) * s.kernel_w + q]};
          y[((b * s.out_channels + o) * s.out_h() + i) * s.out_w() + j] = acc;
        }
  return y;
}

class ReferenceTest : public ::testing::TestWithParam<Shape> {};

TEST_P(ReferenceTest, MatchesNestedLoops) {
  const Shape s = GetParam();
  const auto x = RandomTensor(7, kInputTensor, s.input_elements());
  const auto w = RandomTensor(7, kFilterTensor, s.filter_elements());
  const auto want = NestedLoops(s, x, w);
  const auto got = ReferenceConv(s, x.data(), w.data());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << "at " << i;
  }
  const auto positions = SamplePositions(s, 50, 3);
  const auto at = ReferenceConvAt(s, x.data(), w.data(), positions);
  for (size_t k = 0; k < positions.size(); ++k) {
    ASSERT_NEAR(at[k], want[positions[k]], 1e-12 * (1 + std::abs(want[positions[k]])));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceTest,
    ::testing::Values(Shape{1, 1, 1, 5, 5, 1, 1}, Shape{2, 3, 4, 9, 7, 3, 2},
                      Shape{1, 2, 5, 6, 6, 6, 6}, Shape{3, 5, 2, 11, 13, 4, 5},
                      Shape::KernelBot(16, 4, 8, 2)),
    [](const auto& info) { return info.param.ToString(); });

TEST(SamplePositionsTest, DistinctSortedInRangeWithCorners) {
  const Shape s = Shape::KernelBot(64, 8, 16, 2);
  const auto p = SamplePositions(s, 1000, 11);
  ASSERT_EQ(p.size(), 1000u);
  for (size_t i = 1; i < p.size(); ++i) ASSERT_LT(p[i - 1], p[i]);
  EXPECT_EQ(p.front(), 0);
  EXPECT_EQ(p.back(), s.output_elements() - 1);
  EXPECT_EQ(SamplePositions(s, 1000, 11), p);
  EXPECT_NE(SamplePositions(s, 1000, 12), p);
}

TEST(RandomTest, RealValuedInRangeAndReproducible) {
  const auto v = RandomTensor(42, kInputTensor, 10000);
  int integers = 0;
  for (float f : v) {
    ASSERT_GE(f, -1.0f);
    ASSERT_LT(f, 1.0f);
    integers += (f == std::floor(f));
  }
  EXPECT_LT(integers, 3);
  // Pinned values: tools/kernelbot.py and any other mirror of the generator must agree.
  EXPECT_EQ(RandomValue(42, kInputTensor, 0), v[0]);
  EXPECT_NE(RandomValue(42, kFilterTensor, 0), v[0]);
}

}  // namespace
}  // namespace conv2d

namespace conv2d {
namespace {
TEST(RandomTest, NormalHasUnitVarianceAndIsReproducible) {
  const auto v = RandomTensor(9, kInputTensor, 200000, Distribution::kNormal);
  double sum = 0, sq = 0;
  for (float f : v) {
    ASSERT_TRUE(std::isfinite(f));
    sum += f;
    sq += double{f} * f;
  }
  const double mean = sum / v.size(), var = sq / v.size() - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
  EXPECT_EQ(RandomNormalValue(9, kInputTensor, 123), v[123]);
  EXPECT_NE(RandomTensor(9, kInputTensor, 4, Distribution::kUniform)[0], v[0]);
}
}  // namespace
}  // namespace conv2d
