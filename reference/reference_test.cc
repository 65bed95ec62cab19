// The Eigen reference against the plain nested-loop definition of the operation.
#include "reference/reference.h"

#include <cmath>

#include "conv/testing/shapes.h"
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

// The backward against its definition: every product of the forward (the index map written
// once more here, as plain loops) sent back to the element of x or w it came from.
namespace conv2d {
namespace {

struct Backward {
  std::vector<double> dx, dw, db;
};
Backward BackwardLoops(const Shape& s, const std::vector<float>& x, const std::vector<float>& w,
                       const std::vector<float>& dy) {
  Backward r{std::vector<double>(s.input_elements()), std::vector<double>(s.filter_elements()),
             std::vector<double>(s.out_channels)};
  const int64_t cg = s.in_per_group(), og = s.out_per_group();
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t o = 0; o < s.out_channels; ++o)
      for (int64_t i = 0; i < s.out_h(); ++i)
        for (int64_t j = 0; j < s.out_w(); ++j) {
          const double g = dy[((b * s.out_channels + o) * s.out_h() + i) * s.out_w() + j];
          r.db[o] += g;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t p = 0; p < s.kernel_h; ++p)
              for (int64_t q = 0; q < s.kernel_w; ++q) {
                const int64_t row = i * s.stride_h - s.pad_top + p * s.dilation_h;
                const int64_t col = j * s.stride_w - s.pad_left + q * s.dilation_w;
                if (row < 0 || row >= s.height || col < 0 || col >= s.width) continue;
                const int64_t xi =
                    ((b * s.in_channels + o / og * cg + c) * s.height + row) * s.width + col;
                const int64_t wi = ((o * cg + c) * s.kernel_h + p) * s.kernel_w + q;
                r.dx[xi] += g * w[wi];
                r.dw[wi] += g * x[xi];
              }
        }
  return r;
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-11 * (1 + std::abs(want[i]))) << what << " at " << i;
  }
}

class BackwardReferenceTest : public ::testing::TestWithParam<Shape> {};

TEST_P(BackwardReferenceTest, MatchesTheForwardsAdjointLoops) {
  const Shape s = GetParam();
  const auto x = RandomTensor(5, kInputTensor, s.input_elements(), Distribution::kNormal);
  const auto w = RandomTensor(5, kFilterTensor, s.filter_elements(), Distribution::kNormal);
  const auto dy = RandomTensor(5, kGradTensor, s.output_elements(), Distribution::kNormal);
  const Backward want = BackwardLoops(s, x, w, dy);
  Tensors in;
  in.x = x.data();
  in.w = w.data();
  in.dy = dy.data();
  const Shape d = WithOp(s, Op::kDgrad), g = WithOp(s, Op::kWgrad);
  const std::vector<double> dx = Reference(d, in), dw = Reference(g, in);
  ExpectNear(dx, want.dx, "dx");
  std::vector<double> want_dw = want.dw;
  if (s.has_bias) want_dw.insert(want_dw.end(), want.db.begin(), want.db.end());
  ExpectNear(dw, want_dw, "dw, db");
  // The sampled forms agree with the whole.
  for (const Shape& op : {d, g}) {
    const auto positions = SamplePositions(op, 40, 9);
    const auto at = ReferenceAt(op, in, positions);
    const auto& whole = op.op == Op::kDgrad ? dx : dw;
    for (size_t k = 0; k < positions.size(); ++k) {
      ASSERT_NEAR(at[k], whole[positions[k]], 1e-11 * (1 + std::abs(whole[positions[k]])))
          << OpName(op.op) << " at " << positions[k];
    }
  }
}

// The identity that ties the three references together, in fp64:
// <dy, conv(x, w) + bias> = <dgrad(dy, w), x> + <db, bias> = <wgrad(x, dy), w> + <db, bias>.
TEST_P(BackwardReferenceTest, AdjointIdentity) {
  const Shape s = GetParam();
  const auto x = RandomTensor(6, kInputTensor, s.input_elements(), Distribution::kNormal);
  const auto w = RandomTensor(6, kFilterTensor, s.filter_elements(), Distribution::kNormal);
  const auto bias = RandomTensor(6, kBiasTensor, s.bias_elements(), Distribution::kNormal);
  const auto dy = RandomTensor(6, kGradTensor, s.output_elements(), Distribution::kNormal);
  Tensors in;
  in.x = x.data();
  in.w = w.data();
  in.bias = s.has_bias ? bias.data() : nullptr;
  in.dy = dy.data();
  auto dot = [](const std::vector<double>& a, const float* b, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += a[i] * b[i];
    return sum;
  };
  const std::vector<double> y = Reference(s, in);
  double lhs = 0, scale = 0;
  for (size_t i = 0; i < y.size(); ++i) lhs += y[i] * dy[i], scale += std::abs(y[i] * dy[i]);
  const std::vector<double> dx = Reference(WithOp(s, Op::kDgrad), in);
  const std::vector<double> dwdb = Reference(WithOp(s, Op::kWgrad), in);
  const size_t nw = static_cast<size_t>(s.filter_elements());
  double bias_term = 0;
  for (int64_t o = 0; o < s.bias_elements(); ++o) bias_term += dwdb[nw + o] * bias[o];
  EXPECT_NEAR(dot(dx, x.data(), dx.size()) + bias_term, lhs, 1e-12 * scale);
  EXPECT_NEAR(dot(dwdb, w.data(), nw) + bias_term, lhs, 1e-12 * scale);
  // And the identity can fail: a dx off by one part in 1e6 at one element breaks it.
  std::vector<double> wrong = dx;
  wrong[dx.size() / 2] += 1e-3 * (1 + std::abs(wrong[dx.size() / 2]));
  EXPECT_GT(std::abs(dot(wrong, x.data(), dx.size()) + bias_term - lhs), 1e-12 * scale);
}

Shape Geo(Shape s, int64_t pt, int64_t pb, int64_t pl, int64_t pr, int64_t sh, int64_t sw,
          int64_t dh, int64_t dw, int64_t groups, bool bias) {
  s.pad_top = pt, s.pad_bottom = pb, s.pad_left = pl, s.pad_right = pr;
  s.stride_h = sh, s.stride_w = sw, s.dilation_h = dh, s.dilation_w = dw;
  s.groups = groups, s.has_bias = bias;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BackwardReferenceTest,
    ::testing::Values(Shape{1, 1, 1, 5, 5, 1, 1}, Shape{2, 3, 4, 9, 7, 3, 2},
                      Geo(Shape{2, 4, 6, 11, 9, 3, 3}, 1, 1, 1, 1, 2, 2, 1, 1, 1, true),
                      Geo(Shape{1, 6, 6, 10, 13, 3, 5}, 2, 0, 1, 3, 3, 2, 1, 2, 2, true),
                      Geo(Shape{2, 4, 8, 12, 12, 3, 3}, 2, 2, 2, 2, 1, 1, 2, 2, 4, false),
                      Geo(Shape{1, 5, 5, 8, 8, 7, 7}, 3, 3, 3, 3, 1, 1, 1, 1, 5, true),
                      Geo(Shape{3, 2, 3, 9, 8, 1, 1}, 0, 0, 0, 0, 2, 3, 1, 1, 1, true),
                      Geo(Shape{1, 3, 3, 6, 6, 6, 6}, 0, 0, 0, 0, 1, 1, 1, 1, 1, false)),
    [](const auto& info) { return GtestName(info.param); });

}  // namespace
}  // namespace conv2d
