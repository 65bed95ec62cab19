// What the tests of the two implicit-GEMM kernels (implicit_gemm_3xtf32, implicit_gemm_wgmma)
// share: they compute the same GEMM view of the convolution with the same 32-bit limits, so the
// shapes that exercise their gathers, the check of a replayed gather against that view, the
// shape limits and the GPU tests' case lists are written once here. Test-only.
#ifndef CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_TESTING_H_
#define CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_TESTING_H_

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "conv/core/registry.h"
#include "conv/shape.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace implicit_gemm_testing {

// Shapes that take each gather path of both kernels with overhang in M, N and K (Kw = 1 and
// W % 4 = 0: the 16-byte input gather; K % 4 = 0: implicit_gemm_3xtf32's 16-byte filter gather).
inline std::vector<Shape> GatherShapes() {
  return {
      {3, 8, 65, 10, 12, 2, 1},   // both 16-byte, K = 16, Cout = 65
      {2, 5, 70, 12, 20, 3, 1},   // 16-byte input, K = 15
      {2, 4, 1, 31, 29, 3, 3},    // 16-byte filter (K = 36), Cout = 1
      {1, 33, 130, 9, 11, 3, 2},  // scalar both, K = 198, 3 N tiles (2 at BN = 128)
      {2, 40, 8, 20, 20, 4, 4},   // K = 640: several folds, no K tail
      {1, 3, 5, 300, 7, 1, 7},    // K = 21, tall thin image
  };
}

// The shapes a CPU replay runs: the edge and KernelBot test shapes, GatherShapes and `extra`,
// without those whose padded GEMM (`work` of the shape) exceeds max_work, to keep it quick.
template <class WorkFn>
std::vector<Shape> ReplayShapes(const std::vector<Shape>& extra, WorkFn work, double max_work) {
  std::vector<Shape> shapes = EdgeShapes();
  for (const std::vector<Shape>& list : {KernelBotTestShapes(), GatherShapes(), extra}) {
    shapes.insert(shapes.end(), list.begin(), list.end());
  }
  std::vector<Shape> out;
  for (const Shape& s : shapes) {
    if (work(s) <= max_work) out.push_back(s);
  }
  return out;
}

// x's offset of A[m][k] in the GEMM view, from its definition (m = (b, oh, ow), k = (c, kp, kq),
// the tap at row oh*sh - pt + kp*dh, column ow*sw - pl + kq*dw), independent of the kernels'
// gathers; -1 for a tap in the padding. c0: the first input channel of the GEMM's group. P:
// either kernel's Params.
template <class P>
int64_t XOffsetOf(const P& p, int m, int k, int c0 = 0) {
  const int b = m / p.p, pix = m % p.p, oh = pix / p.ow, ow = pix % p.ow;
  const int c = k / (p.kh * p.kw), kp = (k / p.kw) % p.kh, kq = k % p.kw;
  const int64_t row = int64_t{oh} * p.sh - p.pt + int64_t{kp} * p.dh;
  const int64_t col = int64_t{ow} * p.sw - p.pl + int64_t{kq} * p.dw;
  if (row < 0 || row >= p.h || col < 0 || col >= p.w) return -1;
  return ((int64_t{b} * p.cin + c0 + c) * p.h + row) * p.w + col;
}

// One replayed A-gather copy of k-tile kt of the tile at pixel m0: `width` (1 or 4) floats into
// stage floats si.. (a [bk][a_stride] stage of bm pixel columns) from x offset g, or zeros when
// !valid. Checks that the copy is aligned, inside the stage and off its padding, reads the
// element the GEMM view puts there, and is left out only where that element is zero (past M or
// K, or a tap in the image's padding); put(stage float, value) stores it. c0: the first input
// channel of the tile's group (g then includes the group's offset).
template <class P, class Put>
void ReplayAGatherCopy(const P& p, int kt, int m0, int bm, int bk, int a_stride, int width,
                       const std::vector<float>& x, int si, int g, bool valid, Put put,
                       int c0 = 0) {
  ASSERT_EQ(si % width, 0);
  ASSERT_EQ(g % width, 0) << "16-byte gather from an unaligned x offset";
  for (int j = 0; j < width; ++j) {
    const int sj = si + j;
    ASSERT_TRUE(sj >= 0 && sj < bk * a_stride);
    ASSERT_LT(sj % a_stride, bm) << "write into the padding";
    const int k = kt * bk + sj / a_stride, m = m0 + sj % a_stride;
    if (valid) {
      ASSERT_TRUE(g + j >= 0 && g + j < static_cast<int64_t>(x.size()));
      ASSERT_LT(k, p.k);
      ASSERT_LT(m, p.m);
      ASSERT_EQ(g + j, XOffsetOf(p, m, k, c0)) << "m " << m << " k " << k;
    } else {
      ASSERT_EQ(g, 0);
      // Left out only past M or K, or in the padding.
      if (k < p.k && m < p.m) {
        ASSERT_EQ(XOffsetOf(p, m, k, c0), -1) << "m " << m << " k " << k;
      }
    }
    put(sj, valid ? x[g + j] : 0.f);
  }
}

// The limits both kernels share: every edge and KernelBot shape runs; 2^31 input elements or no
// room for the tile overhang past M is OutOfRange; a reduction past 2^18 terms (accuracy
// unverified) is Unimplemented, 2^18 itself runs; the model's estimates are finite.
inline void ExpectCommonShapeLimits(const std::string& name) {
  const Algorithm* a = Registry::Global().Find(name);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->name(), name);
  for (const std::vector<Shape>& list :
       {EdgeShapes(), KernelBotTestShapes(), KernelBotBenchmarkShapes()}) {
    for (const Shape& s : list) EXPECT_TRUE(a->CanImplement(s).ok()) << s.ToString();
  }
  EXPECT_EQ(a->CanImplement(Shape{64, 512, 64, 256, 256, 1, 1}).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(a->CanImplement(Shape{1, 1, 1, 1, 2147483600, 1, 1}).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(a->CanImplement(Shape{1, 1025, 1, 16, 16, 16, 16}).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(a->CanImplement(Shape{1, 1024, 1, 16, 16, 16, 16}).ok());
  for (const Shape& s : KernelBotBenchmarkShapes()) {
    const double t = a->EstimateSeconds(s);
    EXPECT_TRUE(std::isfinite(t) && t > 0) << s.ToString();
  }
}

// A GPU test case: a shape and how many output positions to compare (all of a smaller output).
struct Case {
  Shape shape;
  int64_t max_positions;
};
inline void PrintTo(const Case& c, std::ostream* os) {
  *os << c.shape.ToString() << " (" << c.max_positions << " positions)";
}

// The GPU tests' cases: every element of the edge shapes, the KernelBot test shapes, GatherShapes
// and `extra`; then the long KernelBot reductions (16384 and 131072 terms) and `sampled` at 4096
// positions.
inline std::vector<Case> GpuCases(const std::vector<Shape>& extra,
                                  const std::vector<Shape>& sampled) {
  constexpr int64_t kAll = 1 << 16;
  std::vector<Case> cases;
  for (const std::vector<Shape>& list :
       {EdgeShapes(), KernelBotTestShapes(), GatherShapes(), extra}) {
    for (const Shape& s : list) cases.push_back({s, kAll});
  }
  for (const Shape& s : {Shape::KernelBot(128, 16, 64, 4), Shape::KernelBot(256, 32, 128, 1)}) {
    cases.push_back({s, 4096});
  }
  for (const Shape& s : sampled) cases.push_back({s, 4096});
  return cases;
}

}  // namespace implicit_gemm_testing
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_TESTING_H_
