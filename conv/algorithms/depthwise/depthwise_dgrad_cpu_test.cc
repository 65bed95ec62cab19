// depthwise_dgrad's gather on the CPU: DepthwiseDgradPixel (the kernel's per-pixel sum, in
// double) against the fp64 reference dgrad at every dx element, over strides 2 and 3 with
// remainders, multipliers, dilation with stride, asymmetric padding, K = 1 and K = H; the
// kernel's whole pass replayed in fp32 (its CTAs' chunks, the zero term) with non-finite taps;
// the block kernel's 2x2 blocks (DepthwiseDgradBlock) replayed likewise on the shapes it takes;
// and what the algorithm declines (stride 1, groups of several channels, no groups).
#include "conv/algorithms/depthwise/depthwise_dgrad.h"

#include <cmath>
#include <memory>
#include <vector>

#include "conv/algorithms/depthwise/depthwise_layers.h"
#include "conv/core/dx_pass.cuh"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace {

using depthwise_internal::DepthwiseChannelFilter;
using depthwise_internal::DepthwiseDgradMaxRows;
using depthwise_internal::DepthwiseDgradPixel;
using depthwise_internal::DepthwiseDgradRows;
using depthwise_internal::DyRows;

Shape Dg(Shape s) {
  s.op = Op::kDgrad;
  s.has_bias = false;
  return s;
}

// A dgrad's inputs (seeded; with a NaN and an infinite tap if `nonfinite`) and its fp64 dx.
struct Case {
  std::vector<float> dy, w;
  std::vector<double> want;
};
Case MakeCase(const Shape& d, int seed, bool nonfinite) {
  Case k;
  k.dy = RandomTensor(seed, kGradTensor, d.output_elements(), Distribution::kNormal);
  k.w = RandomTensor(seed, kFilterTensor, d.filter_elements(), Distribution::kNormal);
  if (nonfinite) {
    k.w[k.w.size() / 3] = NAN;
    k.w[k.w.size() - 1] = INFINITY;
  }
  Tensors in;
  in.dy = k.dy.data();
  in.w = k.w.data();
  k.want = Reference(d, in);
  return k;
}

TEST(DepthwiseDgradCpuTest, TheGatherIsTheReferenceDgrad) {
  for (const Shape& d : DepthwiseDgradShapes(2)) {
    SCOPED_TRACE(d.ToString());
    ASSERT_TRUE(ValidateShape(d).ok());
    const Case k = MakeCase(d, 6, false);
    const std::vector<float>&dy = k.dy, &w = k.w;
    const std::vector<double>& want = k.want;
    const FoldMap m = MakeFoldMap(d);
    const int mult = static_cast<int>(d.out_per_group());
    const int64_t plane = d.out_h() * d.out_w(), taps = d.kernel_h * d.kernel_w;
    for (int64_t b = 0; b < d.batch; ++b) {
      for (int64_t c = 0; c < d.in_channels; ++c) {
        const float* g = dy.data() + (b * d.in_channels + c) * mult * plane;
        const float* f = DepthwiseChannelFilter(w.data(), c, mult, taps);
        for (int y = 0; y < d.height; ++y) {
          for (int x = 0; x < d.width; ++x) {
            const int64_t at = ((b * d.in_channels + c) * d.height + y) * d.width + x;
            const double got = DepthwiseDgradPixel<double>(m, mult, g, 0, plane, f, y, x);
            ASSERT_NEAR(got, want[at], 1e-12 * (1 + std::abs(want[at])))
                << "b " << b << " c " << c << " y " << y << " x " << x;
          }
        }
      }
    }
  }
}

// The kernel replayed: DxPassDimsFor's CTAs, each its DxPassChunkOf pixels from its staged window
// (DepthwiseDgradRows' dy rows, no more than DepthwiseDgradMaxRows, between guard rows of NaN
// that a read outside the window would bring into dx), each pixel DepthwiseDgradPixel in fp32
// plus the channel's zero term (NaN where one of DepthwiseChannelFilter's values is not finite).
// Every dx written once, within the bar of the fp64 reference, and non-finite exactly where it
// is, with a NaN and an infinite tap planted.
TEST(DepthwiseDgradCpuTest, TheKernelsPassIsTheReferenceDgrad) {
  for (const Shape& d : DepthwiseDgradShapes(2)) {
    SCOPED_TRACE(d.ToString());
    const Case k = MakeCase(d, 7, true);
    const std::vector<float>&dy = k.dy, &w = k.w;
    const std::vector<double>& want = k.want;
    const FoldMap m = MakeFoldMap(d);
    const int mult = static_cast<int>(d.out_per_group());
    const int64_t taps = d.kernel_h * d.kernel_w;
    const int plane = static_cast<int>(d.height * d.width);
    const int64_t out_plane = d.out_h() * d.out_w(), guard = d.kernel_h * d.dilation_h;
    const DxPassDims dims = DxPassDimsFor(d.batch * d.in_channels, plane);
    std::vector<float> dx(d.input_elements(), 0.0f);
    std::vector<int> writes(d.input_elements(), 0);
    for (int64_t block = 0; block < dims.blocks; ++block) {
      const DxPassChunk ch = DxPassChunkOf(block, dims.chunks, plane);
      const int64_t c = ch.bc % d.in_channels;
      const DyRows rows = DepthwiseDgradRows(m, ch.begin / m.w, (ch.end - 1) / m.w);
      ASSERT_LE(rows.rows, DepthwiseDgradMaxRows(m));
      const int64_t window_plane = (rows.rows + 2 * guard) * m.out_w;
      std::vector<float> window(mult * window_plane, NAN);
      for (int k = 0; k < mult; ++k) {
        for (int64_t e = 0; e < int64_t{rows.rows} * m.out_w; ++e) {
          window[k * window_plane + guard * m.out_w + e] =
              dy[(ch.bc * mult + k) * out_plane + int64_t{rows.lo} * m.out_w + e];
        }
      }
      const float* f = DepthwiseChannelFilter(w.data(), c, mult, taps);
      bool finite = true;
      for (int64_t e = 0; e < mult * taps; ++e) finite &= std::isfinite(f[e]);
      const float z = finite ? 0.0f : NAN;
      for (int i = ch.begin; i < ch.end; ++i) {
        const int y = i / m.w, x = i - y * m.w;
        dx[ch.bc * plane + i] =
            DepthwiseDgradPixel<float>(m, mult, window.data() + guard * m.out_w, rows.lo,
                                       window_plane, f, y, x) +
            z;
        ++writes[ch.bc * plane + i];
      }
    }
    for (size_t i = 0; i < dx.size(); ++i) {
      ASSERT_EQ(writes[i], 1) << "at " << i;
      ASSERT_EQ(std::isnan(dx[i]), std::isnan(want[i])) << "at " << i;
      ASSERT_EQ(std::isinf(dx[i]), std::isinf(want[i])) << "at " << i;
      if (std::isfinite(want[i])) {
        ASSERT_LE(std::abs(dx[i] - want[i]), 1e-3 + 1e-3 * std::abs(want[i])) << "at " << i;
      }
    }
  }
}

// dx through DepthwiseDgradBlock<kK, kV> for every 2x2 block of every plane, plus the channel's
// zero term; counts the writes.
template <int kK, int kV>
void ReplayBlocks(const Shape& d, const Case& k, std::vector<float>* dx, std::vector<int>* writes) {
  constexpr int kLo = depthwise_internal::DgradBlockLo(kK, kV);
  const int h = static_cast<int>(d.height), w = static_cast<int>(d.width);
  const int oh = static_cast<int>(d.out_h()), ow = static_cast<int>(d.out_w());
  const int uh = static_cast<int>(d.pad_top / 2), uw = static_cast<int>(d.pad_left / 2);
  for (int64_t bc = 0; bc < d.batch * d.in_channels; ++bc) {
    const float* f = DepthwiseChannelFilter(k.w.data(), bc % d.in_channels, 1, kK * kK);
    bool finite = true;
    for (int e = 0; e < kK * kK; ++e) finite &= std::isfinite(f[e]);
    for (int by = 0; by < (h + 1) / 2; ++by) {
      for (int bx = 0; bx < (w + 1) / 2; ++bx) {
        float out[2][2];
        depthwise_internal::DepthwiseDgradBlock<kK, kV>(k.dy.data() + bc * oh * ow, f, oh, ow,
                                                        by + uh + kLo, bx + uw + kLo, out);
        for (int a = 0; a < 2; ++a) {
          for (int b = 0; b < 2; ++b) {
            const int y = 2 * by + a, x = 2 * bx + b;
            if (y >= h || x >= w) continue;
            (*dx)[(bc * h + y) * w + x] = out[a][b] + (finite ? 0.0f : NAN);
            ++(*writes)[(bc * h + y) * w + x];
          }
        }
      }
    }
  }
}

// The block kernel replayed on every shape it takes (EfficientNet-B0's four among them), on
// randn and with a NaN and an infinite tap planted: every dx written once, within the bar of the
// fp64 reference, non-finite exactly where it is.
TEST(DepthwiseDgradCpuTest, TheBlocksAreTheReferenceDgrad) {
  int taken = 0;
  for (const Shape& d : DepthwiseDgradShapes(2)) {
    if (!depthwise_internal::DgradTakesBlocks(d)) continue;
    ++taken;
    for (bool nonfinite : {false, true}) {
      SCOPED_TRACE(d.ToString() + (nonfinite ? " with non-finite taps" : ""));
      const Case k = MakeCase(d, 8, nonfinite);
      std::vector<float> dx(d.input_elements(), 0.0f);
      std::vector<int> writes(d.input_elements(), 0);
      const bool odd = d.pad_top % 2 == 1;
      if (d.kernel_h == 3) {
        odd ? ReplayBlocks<3, 1>(d, k, &dx, &writes) : ReplayBlocks<3, 0>(d, k, &dx, &writes);
      } else if (d.kernel_h == 5) {
        odd ? ReplayBlocks<5, 1>(d, k, &dx, &writes) : ReplayBlocks<5, 0>(d, k, &dx, &writes);
      } else {
        odd ? ReplayBlocks<7, 1>(d, k, &dx, &writes) : ReplayBlocks<7, 0>(d, k, &dx, &writes);
      }
      for (size_t i = 0; i < dx.size(); ++i) {
        ASSERT_EQ(writes[i], 1) << "at " << i;
        ASSERT_EQ(std::isnan(dx[i]), std::isnan(k.want[i])) << "at " << i;
        ASSERT_EQ(std::isinf(dx[i]), std::isinf(k.want[i])) << "at " << i;
        if (std::isfinite(k.want[i])) {
          ASSERT_LE(std::abs(dx[i] - k.want[i]), 1e-3 + 1e-3 * std::abs(k.want[i])) << "at " << i;
        }
      }
    }
  }
  EXPECT_EQ(taken, 9);  // the networks' four, K = H, three odd sizes, one asymmetric
}

TEST(DepthwiseDgradCpuTest, TakesStridedDepthwiseDgradsOnly) {
  const std::unique_ptr<Algorithm> alg = MakeDepthwiseDgrad();
  EXPECT_TRUE(alg->CanImplement(Dg(DepthwiseShape(32, 96, 1, 112, 112, 3, 3, 1, 2))).ok());
  EXPECT_TRUE(alg->CanImplement(Dg(DepthwiseShape(2, 3, 2, 17, 13, 5, 5, 2, 2))).ok());
  EXPECT_FALSE(alg->CanImplement(Dg(DepthwiseShape(32, 96, 1, 56, 56, 3, 3, 1))).ok());  // stride 1
  EXPECT_FALSE(alg->CanImplement(Dg(GroupedShape(2, 8, 8, 4, 12, 12, 3, 3, 1, 2))).ok());
  EXPECT_FALSE(alg->CanImplement(Dg(Shape{2, 1, 4, 12, 12, 3, 3})).ok());  // Cin = 1, no groups
  Shape fwd = DepthwiseShape(2, 4, 1, 12, 12, 3, 3, 1, 2);
  EXPECT_FALSE(alg->CanImplement(fwd).ok());  // the forward: not this algorithm's
}

}  // namespace
}  // namespace conv2d
