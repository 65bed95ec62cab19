// fft_depthwise's tiling on the CPU: every output of every plane is in exactly one tile's valid
// part, the tile holds the kernel with no wrap-around, the CTAs cover the planes and images,
// shared memory fits; the forward row pass skips only rows outside the image; the tile chosen
// for the networks' large kernels; the shapes it refuses.
#include "conv/algorithms/fft/fft_depthwise.h"

#include <cstdio>
#include <random>

#include "conv/shape.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace fft_depthwise {
namespace {

void ExpectCovers(const Shape& s, const Tiling& t) {
  SCOPED_TRACE(s.ToString());
  const int64_t th = int64_t{1} << t.log2_th, tw = int64_t{1} << t.log2_tw;
  EXPECT_GE(t.step_h, 1);
  EXPECT_GE(t.step_w, 1);
  // The valid outputs of a tile read only its own input rows and columns: no wrap-around.
  EXPECT_LE(t.step_h + s.kernel_h - 1, th);
  EXPECT_LE(t.step_w + s.kernel_w - 1, tw);
  EXPECT_GE(int64_t{t.tiles_h} * t.step_h, s.out_h());
  EXPECT_LT(int64_t{t.tiles_h - 1} * t.step_h, s.out_h());  // no empty tile
  EXPECT_GE(int64_t{t.tiles_w} * t.step_w, s.out_w());
  EXPECT_LT(int64_t{t.tiles_w - 1} * t.step_w, s.out_w());
  EXPECT_GE(int64_t{t.batch_groups} * 2 * t.pairs, s.batch);
  EXPECT_LT(int64_t{t.batch_groups - 1} * 2 * t.pairs, s.batch);
  EXPECT_EQ(t.ctas, s.out_channels * t.tiles_h * t.tiles_w * t.batch_groups);
  EXPECT_GE(t.pairs, 1);
  EXPECT_LE(t.smem_bytes, 227 * 1024);
  EXPECT_EQ(t.row_pitch % 2, 1);
  EXPECT_GE(t.pair_stride, th * t.row_pitch);
  // The forward row pass transforms every input row of a tile that holds an image row.
  for (int ty = 0; ty < t.tiles_h; ++ty) {
    const RowRange r = ForwardRows(s, t, ty);
    EXPECT_GE(r.first, 0);
    EXPECT_GE(r.count, 0);
    EXPECT_LE(r.first + r.count, th);
    const int64_t iy0 = int64_t{ty} * t.step_h - s.pad_top;
    for (int64_t u = 0; u < th; ++u) {
      if (iy0 + u >= 0 && iy0 + u < s.height) {
        ASSERT_TRUE(u >= r.first && u < r.first + r.count) << "tile row " << ty << ", row " << u;
      }
    }
  }
}

TEST(FftDepthwiseTilingTest, LargeKernelsOfTheNetworks) {
  // RepLKNet's 31x31 on 56x56, batch 32: 64x64 tiles of 34x34 outputs, four per plane, one
  // complex FFT (two images) per CTA in under 40 KB (six CTAs an SM); the forward row pass
  // skips the 15 padding rows above the top tiles and the 27 rows past the image in the lower.
  const Shape big = DepthwiseShape(32, 128, 1, 56, 56, 31, 31, 15);
  absl::StatusOr<Tiling> t = TilingFor(big);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->log2_th, 6);
  EXPECT_EQ(t->log2_tw, 6);
  EXPECT_EQ(t->step_h, 34);
  EXPECT_EQ(t->tiles_h * t->tiles_w, 4);
  EXPECT_EQ(t->pairs, 1);
  EXPECT_LE(t->smem_bytes, 40 * 1024);
  EXPECT_EQ(ForwardRows(big, *t, 0).first, 15);
  EXPECT_EQ(ForwardRows(big, *t, 0).count, 49);
  EXPECT_EQ(ForwardRows(big, *t, 1).first, 0);
  EXPECT_EQ(ForwardRows(big, *t, 1).count, 56 - 19);
  ExpectCovers(big, *t);
  // 13x13 on 7x7: one 32x32 tile a plane, four pairs; 7 of its 32 rows hold the image.
  const Shape small = DepthwiseShape(32, 1024, 1, 7, 7, 13, 13, 6);
  t = TilingFor(small);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->log2_th, 5);
  EXPECT_EQ(t->tiles_h * t->tiles_w, 1);
  EXPECT_EQ(t->pairs, 4);
  EXPECT_EQ(ForwardRows(small, *t, 0).first, 6);
  EXPECT_EQ(ForwardRows(small, *t, 0).count, 7);
  ExpectCovers(small, *t);
}

TEST(FftDepthwiseTilingTest, RandomGeometriesAreCovered) {
  std::mt19937 rng(5);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < 2000; ++i) {
    const int64_t kh = pick(1, 63), kw = pick(1, 63);
    Shape s = DepthwiseShape(pick(1, 9), pick(1, 6), pick(1, 3), pick(1, 200), pick(1, 200), kh,
                             kw, 0);
    s.pad_top = pick(0, static_cast<int>(kh) - 1);
    s.pad_bottom = pick(0, static_cast<int>(kh) - 1);
    s.pad_left = pick(0, static_cast<int>(kw) - 1);
    s.pad_right = pick(0, static_cast<int>(kw) - 1);
    if (!ValidateShape(s).ok()) continue;
    absl::StatusOr<Tiling> t = TilingFor(s);
    ASSERT_TRUE(t.ok()) << s.ToString() << ": " << t.status();
    ExpectCovers(s, *t);
    if (i < 12) {
      std::printf("%-44s tile %dx%d step %dx%d tiles %dx%d pairs %d smem %lld ctas %lld\n",
                  s.ToString().c_str(), 1 << t->log2_th, 1 << t->log2_tw, t->step_h, t->step_w,
                  t->tiles_h, t->tiles_w, t->pairs, static_cast<long long>(t->smem_bytes),
                  static_cast<long long>(t->ctas));
    }
  }
}

// Padding past the kernel and past a tile: tile rows with no image row at all (nothing to
// transform) and middle tile rows that reach outside the image (transformed whole).
TEST(FftDepthwiseTilingTest, PaddingPastTheTileIsCovered) {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int empty_rows = 0, partial_middle = 0;
  for (int i = 0; i < 2000; ++i) {
    const int64_t kh = pick(1, 40), kw = pick(1, 40);
    Shape s = DepthwiseShape(pick(1, 5), pick(1, 3), 1, pick(1, 40), pick(1, 40), kh, kw, 0);
    s.pad_top = pick(0, 150);
    s.pad_bottom = pick(0, 150);
    s.pad_left = pick(0, 60);
    s.pad_right = pick(0, 60);
    if (!ValidateShape(s).ok()) continue;
    absl::StatusOr<Tiling> t = TilingFor(s);
    ASSERT_TRUE(t.ok()) << s.ToString() << ": " << t.status();
    ExpectCovers(s, *t);
    for (int ty = 0; ty < t->tiles_h; ++ty) {
      const int64_t iy0 = int64_t{ty} * t->step_h - s.pad_top;
      const int64_t th = int64_t{1} << t->log2_th;
      if (ForwardRows(s, *t, ty).count == 0) ++empty_rows;
      if (ty > 0 && ty < t->tiles_h - 1 && (iy0 < 0 || iy0 + th > s.height)) ++partial_middle;
    }
  }
  EXPECT_GT(empty_rows, 0);      // the cases this test is for were drawn
  EXPECT_GT(partial_middle, 0);
}

TEST(FftDepthwiseTilingTest, RefusesWhatItDoesNotCompute) {
  Shape strided = DepthwiseShape(1, 4, 1, 32, 32, 15, 15, 7);
  strided.stride_h = 2;
  EXPECT_EQ(TilingFor(strided).status().code(), absl::StatusCode::kUnimplemented);
  Shape dilated = DepthwiseShape(1, 4, 1, 64, 64, 15, 15, 7);
  dilated.dilation_w = 2;
  EXPECT_EQ(TilingFor(dilated).status().code(), absl::StatusCode::kUnimplemented);
  Shape grouped{1, 8, 8, 32, 32, 15, 15};
  grouped.groups = 4;  // two input channels per group
  EXPECT_EQ(TilingFor(grouped).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(TilingFor(DepthwiseShape(1, 2, 1, 80, 80, 64, 64, 0)).status().code(),
            absl::StatusCode::kUnimplemented);  // past kMaxKernel
  std::unique_ptr<Algorithm> a = MakeFftDepthwise();
  EXPECT_EQ(a->CanImplement(strided).code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(a->CanImplement(DepthwiseShape(2, 3, 2, 40, 41, 31, 29, 14)).ok());
}

}  // namespace
}  // namespace fft_depthwise
}  // namespace conv2d
