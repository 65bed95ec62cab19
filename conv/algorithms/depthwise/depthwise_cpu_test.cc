// depthwise's tiling, on the CPU: TilingFor takes the kernel PrefersStaged's rule names; staged,
// every tile covers its plane, every CTA's threads are whole warps within kMaxThreads, every
// staged window holds what the kernel reads (the 16-byte loads' alignment and reach at stride 1),
// shared memory stays within the device's limit, and a plane too large for it is refused;
// streaming, the unrolled size and outputs per thread follow the shape, no shared memory, and the
// threads' groups cover every output exactly once. Both kernels' tilings are checked on every
// shape (the forced variants run either anywhere). Prints the choice and the tilings of the
// networks' depthwise layers.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <random>
#include <set>
#include <vector>

#include "conv/algorithms/depthwise/depthwise.h"
#include "conv/algorithms/depthwise/depthwise_layers.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace depthwise_internal {
namespace {

constexpr int64_t kH200Smem = 232448;  // shared memory one block may opt in to on the H200

Shape Dw(int64_t b, int64_t c, int64_t hw, int64_t k, int64_t pad, int64_t stride) {
  return DepthwiseShape(b, c, 1, hw, hw, k, k, pad, stride);
}

// The rule, restated: staged past 7x7; under it, streaming at stride or dilation > 1, for kernels
// to 5x5, or on planes of at most 196 outputs; staged otherwise (6x6 and 7x7 on larger planes).
bool RuleSaysStaged(const Shape& s) {
  if (s.kernel_h > 7 || s.kernel_w > 7) return true;
  if (s.stride_h > 1 || s.stride_w > 1 || s.dilation_h > 1 || s.dilation_w > 1) return false;
  if (s.kernel_h <= 5 && s.kernel_w <= 5) return false;
  return s.out_h() * s.out_w() > 196;
}

void ExpectValidStreaming(const Shape& s, const Tiling& t) {
  SCOPED_TRACE(s.ToString());
  EXPECT_FALSE(t.staged);
  const std::set<int> unrolled(std::begin(kStreamingUnrolled), std::end(kStreamingUnrolled));
  const bool square_unrolled = s.kernel_h == s.kernel_w && unrolled.count(s.kernel_h) > 0;
  EXPECT_EQ(t.unrolled_kernel, square_unrolled ? s.kernel_h : 0);
  const bool unit_row = s.stride_w == 1 && s.dilation_w == 1;
  EXPECT_EQ(t.outputs_per_thread, square_unrolled && unit_row ? 2 : 1);
  EXPECT_EQ(t.smem_bytes, 0);
  EXPECT_EQ(t.threads % 32, 0);
  EXPECT_GE(t.threads, 32);
  EXPECT_LE(t.threads, kMaxThreads);
  // The kernel's thread -> (plane, row, first column) map, replayed: every output once.
  const int64_t ow = s.out_w(), groups = (ow + t.outputs_per_thread - 1) / t.outputs_per_thread;
  const int64_t items = s.batch * s.out_channels * s.out_h() * groups;
  std::vector<int> seen(s.output_elements(), 0);
  for (int64_t item = 0; item < items; ++item) {
    const int64_t row = item / groups, ox0 = item % groups * t.outputs_per_thread;
    for (int j = 0; j < t.outputs_per_thread; ++j) {
      if (ox0 + j < ow) ++seen[row * ow + ox0 + j];
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), s.output_elements());
}

void ExpectValid(const Shape& s, const Tiling& t) {
  if (!t.staged) return ExpectValidStreaming(s, t);
  SCOPED_TRACE(s.ToString());
  EXPECT_EQ(t.outputs_per_thread, 0);
  EXPECT_EQ(t.unrolled_kernel, 0);
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
  const std::vector<Shape> layers = DepthwiseNetworkLayers();
  for (const Shape& s : layers) {
    absl::StatusOr<Tiling> t = TilingFor(s, kH200Smem);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->staged, RuleSaysStaged(s)) << s.ToString();
    EXPECT_EQ(t->staged, PrefersStaged(s)) << s.ToString();
    ExpectValid(s, *t);
    // The staged tiling of every layer too, so that a layer now streamed can be compared with
    // the row the staged kernel was measured with (round 87).
    absl::StatusOr<Tiling> st = StagedTilingFor(s, kH200Smem);
    ASSERT_TRUE(st.ok()) << st.status();
    ExpectValid(s, *st);
    const Tiling streaming = StreamingTilingFor(s);
    ExpectValid(s, streaming);
    std::printf("%-44s %-9s | staged: rows %d tile %2dx%-2d x %dx%d planes %2d threads %3d "
                "pitch %2d plane %4d filter %4d smem %6lld | streaming: k%d out/thread %d "
                "threads %3d\n",
                s.ToString().c_str(), t->staged ? "staged" : "streaming", st->rows_per_thread,
                st->tile_h, st->tile_w, st->tiles_h, st->tiles_w, st->planes, st->threads,
                st->pitch, st->plane_floats, st->filter_floats,
                static_cast<long long>(st->smem_bytes), streaming.unrolled_kernel,
                streaming.outputs_per_thread, streaming.threads);
  }
}

// The rule on the layers it was drawn from (batch 32, H200, the forced variants): streamed where
// streaming measured faster, staged where staged did (7x7 at 56x56, 13x13, 31x31) or tied (7x7 at
// 28x28).
TEST(DepthwiseTilingTest, StreamsWhereStreamingMeasuredFaster) {
  const std::vector<Shape> streamed = {
      Dw(32, 96, 112, 3, 1, 2),  Dw(32, 240, 28, 3, 1, 2), Dw(32, 672, 14, 5, 2, 2),
      Dw(32, 1152, 7, 3, 1, 1),  Dw(32, 1152, 7, 5, 2, 1), Dw(32, 480, 14, 3, 1, 1),
      Dw(32, 768, 7, 7, 3, 1),   Dw(32, 384, 14, 7, 3, 1), Dw(32, 480, 14, 5, 2, 1),
      Dw(32, 672, 14, 5, 2, 1),  Dw(32, 144, 56, 5, 2, 2), Dw(32, 32, 112, 3, 1, 1),
      Dw(32, 144, 56, 3, 1, 1),  Dw(32, 240, 28, 5, 2, 1)};
  const std::vector<Shape> staged = {Dw(32, 96, 56, 7, 3, 1), Dw(32, 192, 28, 7, 3, 1),
                                     Dw(32, 128, 56, 31, 15, 1), Dw(32, 1024, 7, 13, 6, 1)};
  for (const Shape& s : streamed) {
    EXPECT_FALSE(PrefersStaged(s)) << s.ToString();
    absl::StatusOr<Tiling> t = TilingFor(s, kH200Smem);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_FALSE(t->staged) << s.ToString();
  }
  for (const Shape& s : staged) {
    EXPECT_TRUE(PrefersStaged(s)) << s.ToString();
    absl::StatusOr<Tiling> t = TilingFor(s, kH200Smem);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(t->staged) << s.ToString();
  }
  // The edges: 7x7 streams on 14x14 outputs and not on 15x15; 6x6 is a 7x7 here, 5x5 streams
  // on any plane; past 7 a side nothing streams, strided or not; stride or dilation in one
  // direction only is enough.
  EXPECT_FALSE(PrefersStaged(Dw(1, 8, 14, 7, 3, 1)));
  EXPECT_TRUE(PrefersStaged(Dw(1, 8, 15, 7, 3, 1)));
  EXPECT_TRUE(PrefersStaged(Dw(1, 8, 64, 6, 3, 1)));
  EXPECT_FALSE(PrefersStaged(Dw(1, 8, 200, 5, 2, 1)));
  Shape wide = Dw(1, 8, 14, 7, 3, 1);
  wide.kernel_w = 8;
  EXPECT_TRUE(PrefersStaged(wide));
  EXPECT_TRUE(PrefersStaged(Dw(1, 8, 64, 9, 4, 2)));
  Shape rows = Dw(1, 8, 64, 7, 3, 1);
  rows.stride_h = 2;
  EXPECT_FALSE(PrefersStaged(rows));
  Shape dilated = Dw(1, 8, 64, 7, 6, 1);
  dilated.dilation_w = 2;
  EXPECT_FALSE(PrefersStaged(dilated));
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
    EXPECT_EQ(t->staged, RuleSaysStaged(s)) << s.ToString();
    ExpectValid(s, *t);
    absl::StatusOr<Tiling> st = StagedTilingFor(s, kH200Smem);
    ASSERT_TRUE(st.ok()) << s.ToString() << ": " << st.status();
    ExpectValid(s, *st);
    ExpectValid(s, StreamingTilingFor(s));
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
