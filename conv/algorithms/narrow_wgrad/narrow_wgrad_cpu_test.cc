// narrow_wgrad without a GPU: the gather's index maps against the convolution's definition, the
// runs' partition of the pixels, the kernel's arithmetic replayed (fp32 per stage in the
// kernel's order, double across stages and runs) against the fp64 reference, what it takes and
// refuses, and auto's picks on the networks' narrow layers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "conv/algorithms/narrow_wgrad/narrow_wgrad.h"
#include "conv/conv.h"
#include "conv/shape.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace narrow_wgrad_internal {
namespace {

Shape Wgrad(Shape s, int64_t pt, int64_t pb, int64_t pl, int64_t pr, int64_t sh, int64_t sw,
            int64_t dh, int64_t dw, bool bias) {
  s.pad_top = pt, s.pad_bottom = pb, s.pad_left = pl, s.pad_right = pr;
  s.stride_h = sh, s.stride_w = sw, s.dilation_h = dh, s.dilation_w = dw;
  s.has_bias = bias;
  s.op = Op::kWgrad;
  return s;
}

std::vector<Shape> Shapes() {
  return {
      Wgrad(Shape{2, 3, 8, 17, 15, 3, 3}, 1, 1, 1, 1, 2, 2, 1, 1, false),  // a stem, odd sizes
      Wgrad(Shape{1, 3, 6, 23, 21, 7, 7}, 3, 3, 3, 3, 2, 2, 1, 1, true),   // ResNet's stem form
      Wgrad(Shape{3, 5, 12, 9, 11, 1, 1}, 0, 0, 0, 0, 1, 1, 1, 1, true),   // 1x1, batch 3
      Wgrad(Shape{2, 4, 9, 13, 12, 3, 2}, 2, 0, 1, 3, 3, 2, 2, 1, false),  // asymmetric, dilated
      Wgrad(Shape{1, 2, 5, 40, 40, 4, 4}, 0, 0, 0, 0, 4, 4, 1, 1, true),   // patchify, runs of 1
      Wgrad(Shape{4, 6, 40, 30, 30, 1, 1}, 0, 0, 0, 0, 1, 1, 1, 1, true),  // several runs
  };
}

class NarrowWgradCpuTest : public ::testing::TestWithParam<Shape> {};

// XOffset is x[b, c, i*sh - pt + r*dh, j*sw - pl + s*dw] (or -1 outside x) for every column m =
// (c, r, s) and pixel k = (b, i, j); DyOffset is dy[b, n, i, j].
TEST_P(NarrowWgradCpuTest, GatherIsTheDefinition) {
  const Shape s = GetParam();
  double seconds = 0;
  absl::StatusOr<Params> p = MakeParams(s, &seconds);
  ASSERT_TRUE(p.ok()) << p.status();
  const int64_t oh = s.out_h(), ow = s.out_w();
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const int k = static_cast<int>((b * oh + i) * ow + j);
        for (int64_t c = 0; c < s.in_channels; ++c)
          for (int64_t r = 0; r < s.kernel_h; ++r)
            for (int64_t q = 0; q < s.kernel_w; ++q) {
              const int m = static_cast<int>((c * s.kernel_h + r) * s.kernel_w + q);
              const int64_t y = i * s.stride_h - s.pad_top + r * s.dilation_h;
              const int64_t x = j * s.stride_w - s.pad_left + q * s.dilation_w;
              const bool inside = y >= 0 && y < s.height && x >= 0 && x < s.width;
              const int64_t want = inside ? ((b * s.in_channels + c) * s.height + y) * s.width + x
                                          : -1;
              ASSERT_EQ(XOffset(*p, m, k), want) << "m " << m << " k " << k;
            }
        for (int n = 0; n < s.out_channels; ++n) {
          ASSERT_EQ(DyOffset(*p, n, k), ((b * s.out_channels + n) * oh + i) * ow + j);
        }
      }
}

// The runs cover the pixels once, in whole stages but the last.
TEST_P(NarrowWgradCpuTest, RunsPartitionThePixels) {
  double seconds = 0;
  absl::StatusOr<Params> p = MakeParams(GetParam(), &seconds);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->run % kStagePixels, 0);
  EXPECT_GE(int64_t{p->runs} * p->run, p->k);
  EXPECT_LT(int64_t{p->runs - 1} * p->run, p->k);
  EXPECT_LE(p->m_tiles * p->n_tiles, kThreads);
  EXPECT_LE((p->m_tiles + p->n_tiles) * kTile * kRowFloats * 4, 48 * 1024);
  EXPECT_EQ(SmemBytes(*p), 2 * (p->m_tiles + p->n_tiles) * kTile * kRowFloats * 4);
  EXPECT_FALSE(p->centred);  // these reductions are short
  EXPECT_EQ(p->row_sums, p->db);
  EXPECT_GT(seconds, 0);
}

// The kernel's sums replayed (uncentred: these reductions are short): per run and stage each dw
// element's products in fp32 (fmaf, in pixel order), added in double; dy's row sums in double;
// the runs in order. Against the fp64 reference: a tenth of the bar (fp32 summation's error over
// 64-term stages), dw and db.
TEST_P(NarrowWgradCpuTest, ReplayMatchesReference) {
  const Shape s = GetParam();
  double seconds = 0;
  absl::StatusOr<Params> p = MakeParams(s, &seconds);
  ASSERT_TRUE(p.ok()) << p.status();
  const auto x = RandomTensor(7, kInputTensor, s.input_elements(), Distribution::kNormal);
  const auto dy = RandomTensor(7, kGradTensor, s.output_elements(), Distribution::kNormal);
  std::vector<double> total(p->slot, 0.0);
  for (int r = 0; r < p->runs; ++r) {
    const int begin = r * p->run, end = std::min(begin + p->run, p->k);
    std::vector<double> run(p->slot, 0.0);
    for (int k0 = begin; k0 < end; k0 += kStagePixels) {
      for (int n = 0; n < p->n; ++n) {
        for (int m = 0; m < p->m; ++m) {
          float part = 0.0f;
          for (int k = k0; k < std::min(k0 + kStagePixels, end); ++k) {
            const int64_t at = XOffset(*p, m, k);
            part = std::fmaf(at >= 0 ? x[at] : 0.0f, dy[DyOffset(*p, n, k)], part);
          }
          run[n * p->m + m] += part;
        }
        if (p->row_sums) {
          for (int k = k0; k < std::min(k0 + kStagePixels, end); ++k) {
            run[p->m * p->n + n] += dy[DyOffset(*p, n, k)];
          }
        }
      }
    }
    for (int e = 0; e < p->slot; ++e) total[e] += run[e];
  }
  Tensors in;
  in.x = x.data();
  in.dy = dy.data();
  const std::vector<double> want = Reference(s, in);  // dw, then db
  ASSERT_EQ(static_cast<int64_t>(want.size()), p->slot);
  for (size_t e = 0; e < want.size(); ++e) {
    const double got = static_cast<float>(total[e]);
    ASSERT_LE(std::abs(got - want[e]), 0.1 * (1e-3 + 1e-3 * std::abs(want[e])))
        << (static_cast<int>(e) < p->m * p->n ? "dw " : "db ") << e;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, NarrowWgradCpuTest, ::testing::ValuesIn(Shapes()),
                         [](const auto& info) { return GtestName(info.param); });

TEST(NarrowWgradPlanTest, TakesAndRefuses) {
  std::unique_ptr<Algorithm> a = MakeNarrowWgrad();
  const Shape stem = Wgrad(Shape{32, 3, 32, 224, 224, 3, 3}, 1, 1, 1, 1, 2, 2, 1, 1, false);
  EXPECT_TRUE(a->CanImplement(stem).ok());
  EXPECT_TRUE(a->MeetsContract(stem).ok());
  EXPECT_EQ(a->CanImplement(WithOp(stem, Op::kFprop)).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(a->CanImplement(WithOp(stem, Op::kDgrad)).code(), absl::StatusCode::kUnimplemented);
  Shape grouped = Wgrad(Shape{2, 8, 8, 10, 10, 3, 3}, 1, 1, 1, 1, 1, 1, 1, 1, false);
  grouped.groups = 2;
  EXPECT_EQ(a->CanImplement(grouped).code(), absl::StatusCode::kUnimplemented);
  // 64 x 147 (ResNet's stem): more staged rows than fit; 24 x 160 fits the rows (24 + 160),
  // and 96 x 48 passes both bounds no more.
  EXPECT_EQ(a->CanImplement(Wgrad(Shape{32, 3, 64, 224, 224, 7, 7}, 3, 3, 3, 3, 2, 2, 1, 1,
                                  false)).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(a->CanImplement(Wgrad(Shape{2, 24, 160, 8, 8, 1, 1}, 0, 0, 0, 0, 1, 1, 1, 1,
                                    false)).ok());
  EXPECT_EQ(a->CanImplement(Wgrad(Shape{2, 96, 96, 8, 8, 1, 1}, 0, 0, 0, 0, 1, 1, 1, 1,
                                  false)).code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace narrow_wgrad_internal
}  // namespace conv2d
