// The backward cases that the implicit-GEMM kernels' CPU replays and GPU tests share
// (implicit_gemm_3xtf32's dgrad and wgrad, implicit_gemm_wgmma's wgrad), and the replays' inputs
// and comparison with the fp64 reference. Test-only.
#ifndef CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_3XTF32_BACKWARD_TESTING_H_
#define CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_3XTF32_BACKWARD_TESTING_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "conv/algorithms/implicit_gemm/wgrad_split.h"
#include "conv/shape.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace implicit_gemm_3xtf32_backward_testing {

inline Shape AsOp(Shape s, Op op) {
  s.op = op;
  s.has_bias = false;  // db is Plan::Run's generic pass
  return s;
}

// The backward's cases: odd sizes, batch 1, K = 1, K = H, stride 2 and 3 with remainder rows,
// dilation, asymmetric padding, groups, depthwise, channel multipliers, Cin != Cout, H != W,
// several M and N tiles in each GEMM.
inline std::vector<Shape> BackwardShapes() {
  std::vector<Shape> shapes = EdgeShapes();
  for (const Shape& s : GeometryShapes()) shapes.push_back(s);
  for (const Shape& s : {
           WithGeometry({1, 5, 3, 20, 17, 3, 3}, 1, 1, 1, 1, 2, 2),     // stride 2, remainder
           WithGeometry({2, 4, 6, 16, 14, 3, 2}, 0, 2, 1, 0, 3, 3),     // stride 3, asymmetric
           WithGeometry({2, 3, 5, 11, 13, 2, 2}, 0, 0, 0, 0, 3, 2),     // stride > kernel
           DepthwiseShape(2, 6, 3, 13, 11, 3, 3, 1, 2),                 // multiplier 3, stride 2
           DepthwiseShape(1, 5, 1, 12, 10, 3, 3, 2, 1, 2),              // depthwise, dilated
           GroupedShape(1, 8, 4, 4, 9, 7, 1, 1),                        // groups, K = 1
           Shape{1, 70, 3, 6, 5, 2, 2},                                 // dgrad: 2 N tiles
           Shape{1, 3, 70, 8, 7, 2, 2},                                 // wgrad: 2 N tiles
           Shape{2, 20, 4, 9, 9, 3, 3},                                 // wgrad: 2 M tiles
       }) {
    shapes.push_back(s);
  }
  return shapes;
}

// ResNet-50's 3x3, 64-channel layer at 56x56, batch 32.
inline Shape Resnet64(Op op) {
  return AsOp(WithGeometry({32, 64, 64, 56, 56, 3, 3}, 1, 1, 1, 1, 1, 1), op);
}

// A replay's tensors: seeded randn x, w and dy.
struct ReplayInputs {
  std::vector<float> x, w, dy;
};
inline ReplayInputs MakeReplayInputs(const Shape& s, uint64_t seed) {
  return {RandomTensor(seed, kInputTensor, s.input_elements()),
          RandomTensor(seed, kFilterTensor, s.filter_elements()),
          RandomTensor(seed, kGradTensor, s.output_elements())};
}

// wgrad's centring as its prologue kernels compute it: each input channel's centre from image 0
// of x (wgrad_split::Center) and dy's channel sums in double, one run.
struct ReplayCentring {
  std::vector<float> centers;
  std::vector<double> dy_sums;
};
inline ReplayCentring CentringOf(const Shape& s, const ReplayInputs& in) {
  ReplayCentring r;
  const int64_t hw = s.height * s.width, plane = s.out_h() * s.out_w();
  for (int64_t c = 0; c < s.in_channels; ++c) {
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < hw; ++i) {
      const double v = in.x[c * hw + i];
      sum += v;
      sum_sq += v * v;
    }
    r.centers.push_back(wgrad_split::Center(sum, sum_sq, static_cast<int>(hw)));
  }
  r.dy_sums.assign(s.out_channels, 0.0);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t o = 0; o < s.out_channels; ++o) {
      const float* dy = in.dy.data() + (b * s.out_channels + o) * plane;
      for (int64_t i = 0; i < plane; ++i) r.dy_sums[o] += dy[i];
    }
  }
  return r;
}

// Elements of a replay's result off the fp64 reference: the replays' sums are exact products
// added in double in another order, rounded to float at most once (wgrad's slices' sum).
inline int64_t ReplayMismatches(const Shape& s, const std::vector<double>& got,
                                const ReplayInputs& in) {
  Tensors t;
  t.x = in.x.data();
  t.w = in.w.data();
  t.dy = in.dy.data();
  const std::vector<double> ref = Reference(s, t);
  EXPECT_EQ(ref.size(), got.size());
  int64_t bad = 0;
  for (size_t i = 0; i < std::min(ref.size(), got.size()); ++i) {
    if (!(std::abs(got[i] - ref[i]) <= 1e-6 * (1 + std::abs(ref[i])))) ++bad;
  }
  return bad;
}

}  // namespace implicit_gemm_3xtf32_backward_testing
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_3XTF32_BACKWARD_TESTING_H_
