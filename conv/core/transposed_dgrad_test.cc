// dgrad equals the forwards DgradAsForwards makes, on the filters TransposedFilterSource
// rearranges, each phase's output scattered to its pixels: the CPU reference of both, element for
// element, and every dx pixel in exactly one phase.
#include "conv/core/transposed_dgrad.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "conv/testing/shapes.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace {

Shape Dgrad(Shape s, int64_t pt, int64_t pb, int64_t pl, int64_t pr, int64_t sh, int64_t sw,
            int64_t dh, int64_t dw, int64_t groups) {
  s.pad_top = pt, s.pad_bottom = pb, s.pad_left = pl, s.pad_right = pr;
  s.stride_h = sh, s.stride_w = sw;
  s.dilation_h = dh, s.dilation_w = dw, s.groups = groups;
  s.op = Op::kDgrad;
  return s;
}

// The zero term of input channel c: NaN where one of its taps is not finite, else 0.
double ZeroTerm(const Shape& d, const std::vector<float>& w, int64_t c) {
  for (int64_t o = 0; o < d.out_per_group(); ++o) {
    for (int64_t t = 0; t < d.kernel_h * d.kernel_w; ++t) {
      const float v = w[((c / d.in_per_group() * d.out_per_group() + o) * d.in_per_group() +
                         c % d.in_per_group()) * d.kernel_h * d.kernel_w + t];
      if (!std::isfinite(v)) return NAN;
    }
  }
  return 0.0;
}

// dx as the runner computes it, on the CPU: every phase's forward by the reference, scattered,
// plus the zero terms (NaN for a channel with a non-finite tap) at stride > 1.
std::vector<double> ByPhases(const Shape& d, const std::vector<float>& dy,
                             const std::vector<float>& w, std::vector<int>* hits,
                             std::vector<std::vector<double>>* outs = nullptr) {
  std::vector<DgradPhase> phases;
  EXPECT_TRUE(DgradAsForwards(d, &phases)) << d.ToString();
  std::vector<double> dx(d.input_elements(), -7.0);
  hits->assign(d.input_elements(), 0);
  const int64_t sh = d.strided() ? d.stride_h : 1, sw = d.strided() ? d.stride_w : 1;
  for (const DgradPhase& p : phases) {
    std::vector<double> out;
    const Shape& f = p.forward;
    if (!p.empty()) {
      EXPECT_EQ(f.op, Op::kFprop);
      EXPECT_FALSE(f.strided());
      std::vector<float> wt(f.filter_elements());
      for (size_t e = 0; e < wt.size(); ++e) {
        wt[e] = w[TransposedFilterSource(e, d.in_per_group(), d.out_per_group(), d.kernel_h,
                                         d.kernel_w, f.kernel_h, f.kernel_w, p.p0h, p.p0w, sh,
                                         sw)];
      }
      out = ReferenceConv(f, dy.data(), wt.data());
      if (outs != nullptr) outs->push_back(out);
      if (!d.strided()) {
        EXPECT_EQ(f.output_elements(), d.input_elements());
      } else {
        EXPECT_GE(f.out_h(), p.rows);
        EXPECT_GE(f.out_w(), p.cols);
      }
    }
    for (int64_t bc = 0; bc < d.batch * d.in_channels; ++bc) {
      const int64_t c = bc % d.in_channels;
      const double zero = d.strided() ? ZeroTerm(d, w, c) : 0.0;
      for (int64_t u = 0; u < p.rows; ++u) {
        for (int64_t v = 0; v < p.cols; ++v) {
          const int64_t at = (bc * d.height + p.rh + sh * u) * d.width + p.rw + sw * v;
          const double y = p.empty() ? 0.0 : out[(bc * f.out_h() + u) * f.out_w() + v];
          dx[at] = y + zero;
          ++(*hits)[at];
        }
      }
    }
  }
  return dx;
}

// dx as the fold computes it, on the CPU: the 1x1 forward by the reference on FoldFilterSource's
// filter, then FoldPixel per pixel plus the channel's zero term.
std::vector<double> ByFold(const Shape& d, const std::vector<float>& dy,
                           const std::vector<float>& w) {
  DgradPhase fold;
  EXPECT_TRUE(DgradAsFold(d, &fold)) << d.ToString();
  const Shape& f = fold.forward;
  EXPECT_EQ(f.kernel_h * f.kernel_w, 1);
  EXPECT_EQ(f.filter_elements(), d.filter_elements());
  const int64_t taps = d.kernel_h * d.kernel_w;
  std::vector<float> wf(f.filter_elements());
  for (size_t e = 0; e < wf.size(); ++e) {
    wf[e] = w[FoldFilterSource(e, d.in_per_group(), d.out_per_group(), taps)];
  }
  const std::vector<double> cols = ReferenceConv(f, dy.data(), wf.data());
  const FoldMap m = MakeFoldMap(d);
  std::vector<double> dx(d.input_elements());
  for (int64_t bc = 0; bc < d.batch * d.in_channels; ++bc) {
    const double zero = ZeroTerm(d, w, bc % d.in_channels);
    for (int y = 0; y < d.height; ++y) {
      for (int x = 0; x < d.width; ++x) {
        dx[(bc * d.height + y) * d.width + x] = FoldPixel<double>(m, cols.data(), bc, y, x) + zero;
      }
    }
  }
  return dx;
}

// FoldAxis's run is exactly the taps that reach v, in tap order, with their outputs: against
// every tap tried, strides 1-5, dilations 1-4 (1: the one-division path), kernels 1-9.
TEST(FoldAxisTest, IsEveryTapThatReaches) {
  for (int s = 1; s <= 5; ++s) {
    for (int d = 1; d <= 4; ++d) {
      const int g = std::gcd(s, d);
      const FastDiv by_s(static_cast<uint32_t>(s));
      for (int k = 1; k <= 9; ++k) {
        for (int out = 1; out <= 7; ++out) {
          for (int pad = 0; pad <= 4; ++pad) {
            for (int v = 0; v < 3 * out + 5; ++v) {
              std::vector<std::pair<int, int>> want, got;
              for (int p = 0; p < k; ++p) {
                const int at = v + pad - p * d;
                if (at >= 0 && at % s == 0 && at / s < out) want.emplace_back(p, at / s);
              }
              const FoldRun r = FoldAxis(v, pad, k, by_s, d, out, s / g, d / g);
              for (int a = r.k0; a <= r.k1; ++a) {
                got.emplace_back(r.first + s / g * a, r.out0 - d / g * a);
              }
              ASSERT_EQ(got, want) << "s " << s << " d " << d << " k " << k << " out " << out
                                   << " pad " << pad << " v " << v;
            }
          }
        }
      }
    }
  }
}

class TransposedDgradTest : public ::testing::TestWithParam<Shape> {};

// The fold: the reference dgrad within fp64 rounding; NaN and infinity where the reference has
// them with a non-finite tap.
TEST_P(TransposedDgradTest, FoldEqualsTheReferenceDgrad) {
  const Shape d = GetParam();
  const auto dy = RandomTensor(4, kGradTensor, d.output_elements(), Distribution::kNormal);
  auto w = RandomTensor(4, kFilterTensor, d.filter_elements(), Distribution::kNormal);
  Tensors in;
  in.dy = dy.data();
  in.w = w.data();
  std::vector<double> want = Reference(d, in), got = ByFold(d, dy, w);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-11 * (1 + std::abs(want[i]))) << "at " << i;
  }
  for (const float bad : {NAN, INFINITY}) {
    auto w2 = w;
    w2[w2.size() / 2] = bad;
    w2[0] = -bad;
    in.w = w2.data();
    want = Reference(d, in);
    got = ByFold(d, dy, w2);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << bad << " at " << i;
      ASSERT_EQ(std::isinf(got[i]), std::isinf(want[i])) << bad << " at " << i;
    }
  }
}

TEST_P(TransposedDgradTest, EqualsTheReferenceDgrad) {
  const Shape d = GetParam();
  std::vector<DgradPhase> phases;
  if (!DgradAsForwards(d, &phases)) GTEST_SKIP() << "stride with dilation: the fold's alone";
  const auto dy = RandomTensor(3, kGradTensor, d.output_elements(), Distribution::kNormal);
  auto w = RandomTensor(3, kFilterTensor, d.filter_elements(), Distribution::kNormal);
  Tensors in;
  in.dy = dy.data();
  in.w = w.data();
  std::vector<int> hits;
  std::vector<double> want = Reference(d, in), got = ByPhases(d, dy, w, &hits);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(hits[i], 1) << "dx pixel " << i << " is in " << hits[i] << " phases";
    ASSERT_NEAR(got[i], want[i], 1e-11 * (1 + std::abs(want[i]))) << "at " << i;
  }
  // A NaN tap reaches every dx of its input channel, in the reference and by the phases alike.
  w[w.size() / 2] = NAN;
  in.w = w.data();
  want = Reference(d, in);
  got = ByPhases(d, dy, w, &hits);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << "at " << i;
  }
}

// The runner's one-pass scatter: the phases' outputs packed by MakeScatterMap and read back per
// dx pixel through ScatterSource give ByPhases's dx (its own per-phase placement), bit for bit;
// every output lies inside the packed outputs.
TEST_P(TransposedDgradTest, OnePassScatterEqualsThePhases) {
  const Shape d = GetParam();
  if (!d.strided()) GTEST_SKIP() << "stride 1: the one forward writes dx, no scatter";
  if (d.dilated()) GTEST_SKIP() << "stride with dilation: the fold's alone";
  const auto dy = RandomTensor(5, kGradTensor, d.output_elements(), Distribution::kNormal);
  const auto w = RandomTensor(5, kFilterTensor, d.filter_elements(), Distribution::kNormal);
  std::vector<int> hits;
  std::vector<std::vector<double>> outs;
  const std::vector<double> want = ByPhases(d, dy, w, &hits, &outs);
  std::vector<DgradPhase> phases;
  ASSERT_TRUE(DgradAsForwards(d, &phases));
  const ScatterMap m = MakeScatterMap(d, phases);
  std::vector<double> packed(m.outputs, NAN);
  size_t k = 0;
  for (size_t i = 0; i < phases.size(); ++i) {
    if (phases[i].empty()) {
      EXPECT_EQ(m.offset[i], -1);
      continue;
    }
    ASSERT_LT(k, outs.size());
    std::copy(outs[k].begin(), outs[k].end(), packed.begin() + m.offset[i]);
    ++k;
  }
  ASSERT_EQ(k, outs.size());
  for (int64_t bc = 0; bc < d.batch * d.in_channels; ++bc) {
    for (int y = 0; y < d.height; ++y) {
      for (int x = 0; x < d.width; ++x) {
        const int64_t src = ScatterSource(m, bc, y, x);
        ASSERT_LT(src, m.outputs);
        const double got = src >= 0 ? packed[src] : 0.0;
        const int64_t at = (bc * d.height + y) * d.width + x;
        ASSERT_EQ(got, want[at]) << "bc " << bc << " y " << y << " x " << x;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TransposedDgradTest,
    ::testing::Values(Dgrad(Shape{2, 3, 5, 9, 7, 3, 3}, 1, 1, 1, 1, 1, 1, 1, 1, 1),
                      Dgrad(Shape{1, 4, 6, 11, 10, 3, 5}, 2, 0, 1, 3, 1, 1, 1, 1, 2),
                      Dgrad(Shape{2, 6, 6, 12, 13, 3, 3}, 2, 2, 1, 3, 1, 1, 2, 2, 6),
                      Dgrad(Shape{1, 4, 8, 9, 9, 5, 3}, 0, 0, 0, 0, 1, 1, 1, 2, 4),
                      Dgrad(Shape{3, 2, 2, 5, 5, 1, 1}, 0, 0, 0, 0, 1, 1, 1, 1, 1),
                      Dgrad(Shape{1, 3, 2, 6, 6, 6, 6}, 0, 0, 0, 0, 1, 1, 1, 1, 1),
                      // strided: ResNet's 3x3 and 1x1 (a phase no tap reaches), the 7x7 stem,
                      // ConvNeXt's patchify 4x4/4 and 2x2/2, depthwise 5x5/2, remainders,
                      // asymmetric padding, stride 3x2, groups
                      Dgrad(Shape{2, 4, 6, 12, 12, 3, 3}, 1, 1, 1, 1, 2, 2, 1, 1, 1),
                      Dgrad(Shape{2, 6, 4, 11, 9, 1, 1}, 0, 0, 0, 0, 2, 2, 1, 1, 1),
                      Dgrad(Shape{1, 3, 4, 23, 21, 7, 7}, 3, 3, 3, 3, 2, 2, 1, 1, 1),
                      Dgrad(Shape{1, 3, 5, 16, 16, 4, 4}, 0, 0, 0, 0, 4, 4, 1, 1, 1),
                      Dgrad(Shape{2, 4, 8, 10, 10, 2, 2}, 0, 0, 0, 0, 2, 2, 1, 1, 1),
                      Dgrad(Shape{2, 6, 6, 15, 13, 5, 5}, 2, 2, 2, 2, 2, 2, 1, 1, 6),
                      Dgrad(Shape{1, 4, 6, 17, 14, 5, 4}, 2, 1, 0, 3, 3, 2, 1, 1, 2),
                      // stride with dilation (the fold alone: no phases), co-prime and not
                      Dgrad(Shape{2, 3, 4, 19, 17, 3, 3}, 2, 1, 2, 0, 2, 3, 2, 2, 1),
                      Dgrad(Shape{1, 4, 4, 21, 20, 4, 3}, 3, 3, 1, 2, 2, 2, 3, 2, 2)),
    [](const auto& info) { return GtestName(info.param); });

// The filter launches (PhaseFilterLaunches) cover every phase's filter once, each element from
// where its phase's TransposedFilterSource takes it, in launches of at most kPhasesPerLaunch
// phases; ChannelTransposeFilters is the transpose. (TransposeFilterKernel reads them through
// PhaseFilterSource alone.)
TEST(TransposedDgradTest, FilterLaunchesAreEachPhasesFilter) {
  for (const Shape& d : {Dgrad(Shape{2, 6, 4, 15, 13, 3, 3}, 1, 1, 1, 1, 2, 2, 1, 1, 1),
                         Dgrad(Shape{2, 6, 6, 15, 13, 5, 5}, 2, 2, 2, 2, 2, 2, 1, 1, 6),
                         Dgrad(Shape{1, 4, 6, 17, 14, 5, 4}, 2, 1, 0, 3, 3, 2, 1, 1, 2),
                         Dgrad(Shape{2, 3, 5, 9, 9, 3, 3}, 1, 1, 1, 1, 1, 1, 2, 2, 1),
                         Dgrad(Shape{1, 2, 3, 8, 8, 1, 1}, 0, 0, 0, 0, 2, 2, 1, 1, 1),
                         Dgrad(Shape{1, 2, 2, 32, 32, 9, 9}, 0, 0, 0, 0, 8, 8, 1, 1, 1)}) {
    std::vector<DgradPhase> phases;
    ASSERT_TRUE(DgradAsForwards(d, &phases)) << d.ToString();
    const std::vector<PhaseFilters> launches = PhaseFilterLaunches(d, phases);
    std::vector<int64_t> expected, got;
    int64_t filled = 0;
    int counted = 0;
    for (const DgradPhase& ph : phases) {
      if (ph.empty()) continue;
      const Shape& f = ph.forward;
      for (int64_t e = 0; e < f.filter_elements(); ++e) {
        expected.push_back(TransposedFilterSource(e, d.in_per_group(), d.out_per_group(),
                                                  d.kernel_h, d.kernel_w, f.kernel_h,
                                                  f.kernel_w, ph.p0h, ph.p0w, d.stride_h,
                                                  d.stride_w));
      }
      ++counted;
    }
    int phases_launched = 0;
    for (const PhaseFilters& f : launches) {
      ASSERT_GE(f.count, 1);
      ASSERT_LE(f.count, kPhasesPerLaunch);
      EXPECT_EQ(f.base, filled) << d.ToString();  // the launches one after another
      for (int64_t e = 0; e < f.total; ++e) got.push_back(PhaseFilterSource(f, e));
      filled += f.total;
      phases_launched += f.count;
    }
    EXPECT_EQ(phases_launched, counted) << d.ToString();
    EXPECT_EQ(got, expected) << d.ToString();
  }
  const int64_t rows = 5, cols = 3;  // out[c][r] = in[r][c]
  const PhaseFilters t = ChannelTransposeFilters(rows, cols);
  ASSERT_EQ(t.total, rows * cols);
  for (int64_t e = 0; e < t.total; ++e) {
    EXPECT_EQ(PhaseFilterSource(t, e), (e % rows) * cols + e / rows) << e;
  }
}

TEST(TransposedDgradTest, WhereThereIsNoForward) {
  std::vector<DgradPhase> phases;
  Shape d = Dgrad(Shape{1, 2, 2, 9, 9, 3, 3}, 1, 1, 1, 1, 1, 1, 1, 1, 1);
  EXPECT_TRUE(DgradAsForwards(d, &phases));
  EXPECT_EQ(phases.size(), 1u);
  d.pad_left = 3;  // more than (K-1)*dilation = 2: the forward would need padding -1
  EXPECT_FALSE(DgradAsForwards(d, &phases));
  d.pad_left = 1;
  d.stride_h = 2;
  EXPECT_TRUE(DgradAsForwards(d, &phases));
  EXPECT_EQ(phases.size(), 2u);
  d.dilation_w = 2;  // stride and dilation together: not by phases
  EXPECT_FALSE(DgradAsForwards(d, &phases));
  d.dilation_w = 1;
  {
    Shape big = Dgrad(Shape{1, 2, 2, 32, 32, 9, 9}, 0, 0, 0, 0, 8, 8, 1, 1, 1);
    EXPECT_TRUE(DgradAsForwards(big, &phases));  // 64 phases: the scatter's map holds them
    EXPECT_EQ(phases.size(), 64u);
    big.stride_w = 9;  // 72: more than it holds
    EXPECT_FALSE(DgradAsForwards(big, &phases));
    // A dx plane of 2^31 pixels or more: the scatter indexes a plane in 32 bits.
    Shape wide = Dgrad(Shape{1, 1, 1, 46341, 46341, 1, 1}, 0, 0, 0, 0, 2, 2, 1, 1, 1);
    EXPECT_FALSE(DgradAsForwards(wide, &phases));
    wide.height = 46340;  // 46340^2 < 2^31
    EXPECT_TRUE(DgradAsForwards(wide, &phases));
  }
  d.op = Op::kWgrad;
  EXPECT_FALSE(DgradAsForwards(d, &phases));
}

}  // namespace
}  // namespace conv2d
