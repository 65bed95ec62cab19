// winograd on the CPU: the F(4x4, 3x3) algebra on single tiles, the whole pipeline (the same
// transform functions the kernels call, the same buffer layouts and index algebra, an fp32 GEMM
// standing in for cuBLAS's) against the fp64 reference, and the planning. No GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "conv/shape.h"
#include "conv/algorithms/winograd/winograd_internal.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace winograd {
namespace {

// One tile: A^T [(G g G^T) .* (B^T d B)] A against the 4x4 correlation of d with g in double.
TEST(WinogradAlgebra, OneTileMatchesCorrelation) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const std::vector<float> d = RandomTensor(seed, kInputTensor, 36, Distribution::kNormal);
    const std::vector<float> g = RandomTensor(seed, kFilterTensor, 9, Distribution::kNormal);
    double u[36], v[36], prod[36], y[16];
    FilterTransform(g.data(), u);
    InputTransform(d.data(), v);
    for (int p = 0; p < 36; ++p) prod[p] = u[p] * v[p];
    OutputTransform(prod, y);
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) {
        double want = 0, scale = 0;
        for (int a = 0; a < 3; ++a) {
          for (int b = 0; b < 3; ++b) {
            want += static_cast<double>(d[6 * (i + a) + j + b]) * g[3 * a + b];
            scale += std::fabs(static_cast<double>(d[6 * (i + a) + j + b]) * g[3 * a + b]);
          }
        }
        // All in fp64: only the order of the operations differs from the correlation's.
        ASSERT_NEAR(y[4 * i + j], want, 1e-12 * scale)
            << "seed " << seed << " output (" << i << ", " << j << ")";
      }
    }
  }
}

// A wrong coefficient anywhere must show: a delta input picks out single filter taps.
TEST(WinogradAlgebra, DeltaInputsPickSingleTaps) {
  std::vector<float> g(9);
  for (int i = 0; i < 9; ++i) g[i] = static_cast<float>(i + 1);
  double u[36];
  FilterTransform(g.data(), u);
  for (int pos = 0; pos < 36; ++pos) {
    float d[36] = {};
    double v[36], prod[36], y[16];
    d[pos] = 1.0f;
    InputTransform(d, v);
    for (int p = 0; p < 36; ++p) prod[p] = u[p] * v[p];
    OutputTransform(prod, y);
    const int r = pos / 6, c = pos % 6;
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) {
        const int a = r - i, b = c - j;
        const float want = a >= 0 && a < 3 && b >= 0 && b < 3 ? g[3 * a + b] : 0.0f;
        EXPECT_NEAR(y[4 * i + j], want, 1e-12) << "delta at " << pos << ", output " << i << j;
      }
    }
  }
}

// The pipeline exactly as the kernels and the GEMM lay it out (winograd.cu), on the host.
std::vector<float> Emulate(const Shape& s, const std::vector<float>& x,
                           const std::vector<float>& w) {
  const Geometry g = MakeGeometry(s);
  const int64_t C = s.in_channels, O = s.out_channels, T = g.tiles;
  std::vector<Real> u(kPoints * O * C), v(kPoints * C * T), m(kPoints * O * T);
  for (int64_t n = 0; n < O * C; ++n) {  // filter kernel, thread n
    Real out[36];
    FilterTransform(&w[9 * n], out);
    for (int p = 0; p < kPoints; ++p) u[p * O * C + n] = out[p];
  }
  const int tiles = static_cast<int>(T), tiles_h = static_cast<int>(g.tiles_h),
            tiles_w = static_cast<int>(g.tiles_w);
  for (int64_t n = 0; n < C * T; ++n) {  // input kernel, thread n
    const TileIndex ti = TileOfThread(static_cast<int>(n), tiles, tiles_h, tiles_w);
    float d[36];
    for (int i = 0; i < 6; ++i) {
      for (int j = 0; j < 6; ++j) {
        const int64_t row = ti.row0 + i, col = ti.col0 + j;
        d[6 * i + j] = row < s.height && col < s.width
                           ? x[((ti.b * C + ti.channel) * s.height + row) * s.width + col]
                           : 0.0f;
      }
    }
    Real out[36];
    InputTransform(d, out);
    for (int p = 0; p < kPoints; ++p) v[p * C * T + n] = out[p];
  }
  // cuBLAS column-major: C'(t, o) = sum_c A'(t, c) B'(c, o), A' = V_p (lda T), B' = U_p (ldb C),
  // C' = M_p (ldc T); fp64 accumulation like DGEMM.
  for (int p = 0; p < kPoints; ++p) {
    const Real* a = &v[p * C * T];
    const Real* bm = &u[p * O * C];
    Real* cm = &m[p * O * T];
    for (int64_t o = 0; o < O; ++o) {
      for (int64_t t = 0; t < T; ++t) {
        Real acc = 0;
        for (int64_t c = 0; c < C; ++c) acc = std::fma(a[c * T + t], bm[o * C + c], acc);
        cm[o * T + t] = acc;
      }
    }
  }
  std::vector<float> y(s.output_elements(), std::nanf(""));
  for (int64_t n = 0; n < O * T; ++n) {  // output kernel, thread n
    Real mm[36], out[16];
    for (int p = 0; p < kPoints; ++p) mm[p] = m[p * O * T + n];
    OutputTransform(mm, out);
    const TileIndex ti = TileOfThread(static_cast<int>(n), tiles, tiles_h, tiles_w);
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) {
        const int64_t row = ti.row0 + i, col = ti.col0 + j;
        if (row < s.out_h() && col < s.out_w()) {
          y[((ti.b * O + ti.channel) * s.out_h() + row) * s.out_w() + col] =
              static_cast<float>(out[4 * i + j]);
        }
      }
    }
  }
  return y;
}

class WinogradPipeline : public ::testing::TestWithParam<Shape> {};

TEST_P(WinogradPipeline, MatchesFp64Reference) {
  const Shape s = GetParam();
  ASSERT_TRUE(CheckShape(s).ok()) << CheckShape(s);
  for (Distribution dist : {Distribution::kUniform, Distribution::kNormal}) {
    const std::vector<float> x = RandomTensor(7, kInputTensor, s.input_elements(), dist);
    const std::vector<float> w = RandomTensor(7, kFilterTensor, s.filter_elements(), dist);
    const std::vector<double> want = ReferenceConv(s, x.data(), w.data());
    const std::vector<float> got = Emulate(s, x, w);
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double tol = kAbsTol + kRelTol * std::fabs(want[i]);
      const double err = std::fabs(got[i] - want[i]);
      ASSERT_TRUE(err <= tol) << s.ToString() << " element " << i << ": " << got[i] << " vs "
                              << want[i];  // NaN (unwritten) fails too
      worst = std::max(worst, err / tol);
    }
    std::printf("%s %s worst ratio %.5f\n", s.ToString().c_str(), DistributionName(dist), worst);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, WinogradPipeline,
    ::testing::Values(Shape{1, 1, 1, 3, 3, 3, 3},      // K = H = W: one output
                      Shape{3, 4, 2, 6, 6, 3, 3},      // one whole tile per image
                      Shape{1, 3, 16, 33, 31, 3, 3},   // odd sizes, Cin != Cout
                      Shape{2, 5, 7, 10, 13, 3, 3},    // partial tiles in both dimensions
                      Shape{1, 2, 3, 7, 3, 3, 3},      // W = K, H != W
                      Shape{2, 64, 9, 9, 9, 3, 3},     // a longer reduction, 7x7 outputs
                      // fp32 accumulation fails this one (1.44x the tolerance).
                      Shape{2, 256, 256, 14, 14, 3, 3}),
    [](const auto& info) { return info.param.ToString(); });

TEST(WinogradPlan, Geometry) {
  const Geometry g = MakeGeometry(Shape{32, 256, 256, 14, 14, 3, 3});
  EXPECT_EQ(g.tiles_h, 3);
  EXPECT_EQ(g.tiles_w, 3);
  EXPECT_EQ(g.tiles, 288);
  const Geometry h = MakeGeometry(Shape{2, 1, 1, 10, 13, 3, 3});  // outputs 8 x 11
  EXPECT_EQ(h.tiles_h, 2);
  EXPECT_EQ(h.tiles_w, 3);
  EXPECT_EQ(h.tiles, 12);
}

TEST(WinogradPlan, WorkspaceLayout) {
  const Shape s{2, 5, 7, 10, 13, 3, 3};
  const WorkspaceLayout l = MakeWorkspaceLayout(s);
  EXPECT_EQ(l.bytes[kFilter], 8u * 36 * 7 * 5);
  EXPECT_EQ(l.bytes[kInput], 8u * 36 * 5 * 12);
  EXPECT_EQ(l.bytes[kProduct], 8u * 36 * 7 * 12);
  EXPECT_EQ(l.bytes[kBlasWork], kBlasWorkspaceBytes);
  for (int b = 0; b < kNumBuffers; ++b) {
    EXPECT_EQ(l.offset[b] % kAlignment, 0u);
    if (b + 1 < kNumBuffers) {
      EXPECT_GE(l.offset[b + 1], l.offset[b] + l.bytes[b]);
    }
  }
  EXPECT_GE(l.total_bytes, l.offset[kBlasWork] + l.bytes[kBlasWork] + kAlignment);
}

TEST(WinogradPlan, RefusesWhatItCannotDo) {
  EXPECT_EQ(CheckShape(Shape{1, 4, 4, 9, 9, 5, 5}).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(CheckShape(Shape{1, 4, 4, 9, 9, 3, 1}).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(CheckShape(Shape{1, 4, 4, 9, 9, 1, 3}).code(), absl::StatusCode::kUnimplemented);
  // 36 x 4096 x 4096 x 8 B of filter transform alone: 4.8 GB.
  EXPECT_EQ(CheckShape(Shape{1, 4096, 4096, 8, 8, 3, 3}).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(CheckShape(Shape{32, 256, 256, 14, 14, 3, 3}).ok());
  EXPECT_TRUE(CheckShape(Shape{1, 1, 1, 3, 3, 3, 3}).ok());
}

TEST(WinogradPlan, CostGrowsWithWork) {
  const Cost small = EstimateCost(Shape{32, 64, 64, 56, 56, 3, 3});
  const Cost large = EstimateCost(Shape{32, 128, 128, 56, 56, 3, 3});
  EXPECT_GT(small.seconds, 0);
  EXPECT_GT(large.seconds, small.seconds);
  EXPECT_DOUBLE_EQ(small.gemm_flops, 2.0 * 36 * 64 * 64 * (32 * 14 * 14));
}

}  // namespace
}  // namespace winograd
}  // namespace conv2d
