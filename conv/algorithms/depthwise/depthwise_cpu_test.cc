// depthwise's tiling, on the CPU: every tile covers its plane, every CTA's threads are whole
// warps within kMaxThreads, every staged window holds what the kernel reads (the 16-byte loads'
// alignment and reach at stride 1), shared memory stays within the device's limit, and a plane
// too large for it is refused. Prints the tilings of the networks' depthwise layers.
#include <cstdio>
#include <random>
#include <vector>

#include "conv/algorithms/depthwise/depthwise.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace depthwise_internal {
namespace {

constexpr int64_t kH200Smem = 232448;  // shared memory one block may opt in to on the H200

Shape Dw(int64_t b, int64_t c, int64_t hw, int64_t k, int64_t pad, int64_t stride) {
  Shape s{b, c, c, hw, hw, k, k};
  s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = pad;
  s.stride_h = s.stride_w = stride;
  s.groups = c;
  return s;
}

void ExpectValid(const Shape& s, const Tiling& t) {
  SCOPED_TRACE(s.ToString());
  const bool unit = !s.strided() && !s.dilated();
  EXPECT_EQ(t.rows_per_thread == 4, unit && t.rows_per_thread != 1);
  EXPECT_EQ(t.tile_w % kCols, 0);
  EXPECT_EQ(t.tile_h % t.rows_per_thread, 0);
  EXPECT_GE(int64_t{t.tiles_w} * t.tile_w, s.out_w());
  EXPECT_GE(int64_t{t.tiles_h} * t.tile_h, s.out_h());
  EXPECT_LT(int64_t{t.tiles_w - 1} * t.tile_w, s.out_w());  // no empty tile
  EXPECT_LT(int64_t{t.tiles_h - 1} * t.tile_h, s.out_h());
  const int per_plane = (t.tile_h / t.rows_per_thread) * (t.tile_w / kCols);
  EXPECT_GE(t.planes, 1);
  EXPECT_LE(t.planes, s.batch * s.out_channels);
  EXPECT_GE(t.threads, t.planes * per_plane);
  EXPECT_EQ(t.threads % 32, 0);
  EXPECT_LE(t.threads, std::max(kMaxThreads, (per_plane + 31) / 32 * 32));
  EXPECT_EQ(t.in_rows, (t.tile_h - 1) * s.stride_h + s.span_h());
  EXPECT_EQ(t.in_cols, (t.tile_w - 1) * s.stride_w + s.span_w());
  EXPECT_GE(t.pitch, t.in_cols);
  EXPECT_GE(t.plane_floats, t.in_rows * t.pitch);
  EXPECT_GE(t.filter_pitch, s.kernel_w);
  EXPECT_GE(t.filter_floats, s.kernel_h * t.filter_pitch);
  EXPECT_EQ(t.filter_floats % 4, 0);  // the windows after the filters stay 16-byte aligned
  if (unit) {
    EXPECT_EQ(t.pitch % 4, 0);
    EXPECT_EQ(t.plane_floats % 4, 0);
    EXPECT_EQ(t.filter_pitch % 4, 0);
    // The last thread's last 8-float window load of a row.
    EXPECT_LE(t.tile_w - kCols + t.filter_pitch - 4 + 8, t.pitch);
  }
  EXPECT_EQ(t.smem_bytes, 4 * int64_t{t.plane_floats + t.filter_floats} * t.planes);
  EXPECT_LE(t.smem_bytes, kH200Smem);
}

TEST(DepthwiseTilingTest, NetworksLayers) {
  const std::vector<Shape> layers = {
      Dw(32, 96, 56, 7, 3, 1),    Dw(32, 192, 28, 7, 3, 1),  Dw(32, 384, 14, 7, 3, 1),
      Dw(32, 768, 7, 7, 3, 1),    Dw(32, 32, 112, 3, 1, 1),  Dw(32, 96, 112, 3, 1, 2),
      Dw(32, 144, 56, 3, 1, 1),   Dw(32, 144, 56, 5, 2, 2),  Dw(32, 240, 28, 5, 2, 1),
      Dw(32, 240, 28, 3, 1, 2),   Dw(32, 480, 14, 3, 1, 1),  Dw(32, 480, 14, 5, 2, 1),
      Dw(32, 672, 14, 5, 2, 1),   Dw(32, 672, 14, 5, 2, 2),  Dw(32, 1152, 7, 5, 2, 1),
      Dw(32, 1152, 7, 3, 1, 1),   Dw(32, 128, 56, 31, 15, 1), Dw(32, 1024, 7, 13, 6, 1)};
  for (const Shape& s : layers) {
    absl::StatusOr<Tiling> t = TilingFor(s, kH200Smem);
    ASSERT_TRUE(t.ok()) << t.status();
    ExpectValid(s, *t);
    std::printf("%-44s rows %d tile %2dx%-2d x %dx%d planes %2d threads %3d pitch %2d plane %4d "
                "filter %4d smem %6lld\n",
                s.ToString().c_str(), t->rows_per_thread, t->tile_h, t->tile_w, t->tiles_h,
                t->tiles_w, t->planes, t->threads, t->pitch, t->plane_floats, t->filter_floats,
                static_cast<long long>(t->smem_bytes));
  }
}

TEST(DepthwiseTilingTest, RandomGeometries) {
  std::mt19937 rng(87);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int checked = 0;
  for (int i = 0; i < 2000; ++i) {
    const int c = pick(1, 40);
    Shape s{pick(1, 4), c, c * pick(1, 3), pick(1, 90), pick(1, 90), pick(1, 15), pick(1, 15)};
    s.groups = c;
    s.pad_top = pick(0, 4), s.pad_bottom = pick(0, 4), s.pad_left = pick(0, 4),
    s.pad_right = pick(0, 4);
    if (pick(0, 1)) s.stride_h = pick(1, 4), s.stride_w = pick(1, 4);
    if (pick(0, 3) == 0) s.dilation_h = pick(1, 3), s.dilation_w = pick(1, 3);
    if (!ValidateShape(s).ok()) continue;
    absl::StatusOr<Tiling> t = TilingFor(s, kH200Smem);
    ASSERT_TRUE(t.ok()) << s.ToString() << ": " << t.status();
    ExpectValid(s, *t);
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

TEST(DepthwiseTilingTest, RefusesAPlaneTooLargeForSharedMemory) {
  absl::StatusOr<Tiling> t = TilingFor(Dw(1, 1, 200, 63, 31, 1), 16 << 10);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted) << t.status();
}

}  // namespace
}  // namespace depthwise_internal
}  // namespace conv2d
