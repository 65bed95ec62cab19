// depthwise's wgrad tilings on the CPU: the staged kernel's partition (slices, tap tiles, stages,
// items, pixels: WgradStageOrigin and WgradItemOf, as the kernel calls them) and the streaming
// kernel's (slices, threads, items: WgradStreamItemOf) replayed term by term.
// Every term dy[b, i, j] * x[.., i*sh - pt + p*dh, j*sw - pl + q*dw] of every tap is summed
// exactly once, from inside the staged window, at the x position the definition names; each
// thread sums at most kMaxContractReduction terms per tap in fp32; shared memory within the
// limit. Mutants (a slice dropped, a tap tile dropped, the last stage of each slice dropped)
// must fail the replay; the streaming kernel's likewise (a slice dropped, each slice's last item
// dropped), and it takes the shapes WgradStreams names, the staged kernel the rest. Prints the
// tilings of the networks' layers.
#include <cstdio>
#include <random>
#include <vector>

#include "conv/algorithms/depthwise/depthwise_layers.h"
#include "conv/algorithms/depthwise/depthwise_wgrad.h"
#include "conv/testing/shapes.h"
#include "gtest/gtest.h"

namespace conv2d {
namespace depthwise_internal {
namespace {

constexpr int64_t kH200Smem = 232448;

Shape Wg(int64_t b, int64_t c, int64_t hw, int64_t k, int64_t pad, int64_t stride) {
  Shape s = DepthwiseShape(b, c, 1, hw, hw, k, k, pad, stride);
  s.op = Op::kWgrad;
  return s;
}

enum class Mutant { kNone, kDropSlice, kDropTile, kDropLastStage, kDropLastItem };

// The streaming kernel replayed (depthwise_wgrad.h): each slice's threads over their items.
void ReplayStream(const Shape& s, const WgradTiling& t, Mutant m, std::vector<int>* seen,
                  int64_t* max_thread_terms) {
  const int64_t oh = s.out_h(), ow = s.out_w(), taps = s.kernel_h * s.kernel_w;
  seen->assign(s.batch * oh * ow * taps, 0);
  *max_thread_terms = 0;
  const FastDiv by_row_groups(static_cast<uint32_t>(t.row_groups));
  const FastDiv by_oh(static_cast<uint32_t>(oh));
  const int slices = m == Mutant::kDropSlice ? t.slices - 1 : t.slices;
  for (int slice = 0; slice < slices; ++slice) {
    int end = static_cast<int>(std::min<int64_t>(t.items, int64_t{slice + 1} * t.items_per_slice));
    if (m == Mutant::kDropLastItem) --end;
    for (int thread = 0; thread < kStreamThreads; ++thread) {
      int64_t terms = 0;
      for (int it = slice * t.items_per_slice + thread; it < end; it += kStreamThreads) {
        const WgradStreamItem item = WgradStreamItemOf(it, by_row_groups, by_oh);
        ASSERT_LT(item.b, s.batch);
        for (int j = 0; j < t.outputs && item.g * t.outputs + j < ow; ++j) {
          ++terms;
          const int64_t px = (int64_t{item.b} * oh + item.i) * ow + item.g * t.outputs + j;
          for (int64_t tap = 0; tap < taps; ++tap) ++(*seen)[px * taps + tap];
        }
      }
      *max_thread_terms = std::max(*max_thread_terms, terms);
    }
  }
}

void ExpectStreamValid(const Shape& s, const WgradTiling& t) {
  SCOPED_TRACE(s.ToString());
  EXPECT_TRUE(WgradStreams(s));
  EXPECT_EQ(t.tile_p, s.kernel_h);
  EXPECT_EQ(t.outputs, s.stride_w == 1 ? 2 : 1);
  EXPECT_EQ(t.items, s.batch * s.out_h() * t.row_groups);
  EXPECT_GE(int64_t{t.row_groups} * t.outputs, s.out_w());
  EXPECT_LT(int64_t{t.row_groups - 1} * t.outputs, s.out_w());
  EXPECT_LT(int64_t{t.slices - 1} * t.items_per_slice, t.items);  // no empty slice
  EXPECT_GE(int64_t{t.slices} * t.items_per_slice, t.items);
  EXPECT_EQ(t.ctas, s.out_channels * t.slices);
  EXPECT_LE(t.terms_per_thread, kMaxContractReduction);
  std::vector<int> seen;
  int64_t max_terms = 0;
  ReplayStream(s, t, Mutant::kNone, &seen, &max_terms);
  int64_t once = 0;
  for (int n : seen) once += n == 1;
  EXPECT_EQ(once, static_cast<int64_t>(seen.size()));
  EXPECT_LE(max_terms, t.terms_per_thread);
  for (Mutant m : {Mutant::kDropSlice, Mutant::kDropLastItem}) {
    if (m == Mutant::kDropSlice && t.slices == 1) continue;
    ReplayStream(s, t, m, &seen, &max_terms);
    int64_t mut_once = 0;
    for (int n : seen) mut_once += n == 1;
    EXPECT_LT(mut_once, static_cast<int64_t>(seen.size())) << "mutant " << static_cast<int>(m);
  }
}

// Counts how often each (b, i, j, tap) term is summed, replaying the kernel's loops for one
// channel; false with a message at the first term read outside its window or from the wrong x.
bool Replay(const Shape& s, const WgradTiling& t, Mutant m, std::vector<int>* seen,
            int64_t* max_thread_terms, std::string* error) {
  const int64_t oh = s.out_h(), ow = s.out_w(), taps = s.kernel_h * s.kernel_w;
  seen->assign(s.batch * oh * ow * taps, 0);
  *max_thread_terms = 0;
  const int slices = m == Mutant::kDropSlice ? t.slices - 1 : t.slices;
  const int tiles = t.tiles_p * t.tiles_q - (m == Mutant::kDropTile ? 1 : 0);
  const int items = static_cast<int>(t.items_per_stage());
  for (int slice = 0; slice < slices; ++slice) {
    const int64_t first = int64_t{slice} * t.stages_per_slice;
    int64_t count = std::min<int64_t>(t.stages_per_slice, t.stages - first);
    if (m == Mutant::kDropLastStage && count > 1) --count;
    for (int tile = 0; tile < tiles; ++tile) {
      const int p0 = tile / t.tiles_q * t.tile_p, q0 = tile % t.tiles_q * t.tile_q;
      std::vector<int64_t> thread_terms(kWgradThreads, 0);
      for (int64_t k = 0; k < count; ++k) {
        int64_t image0;
        int row0;
        WgradStageOrigin(first + k, t.images, t.bands, t.rows, &image0, &row0);
        for (int it = 0; it < items; ++it) {
          const WgradItem item = WgradItemOf(it, t.rows, t.segs);
          const int64_t b = image0 + item.image, i = row0 + item.row;
          if (b >= s.batch || i >= oh) continue;
          const int j0 = item.seg * kSeg;
          const int nj = static_cast<int>(std::min<int64_t>(kSeg, ow - j0));
          thread_terms[it % kWgradThreads] += nj;
          for (int tp = 0; tp < t.tile_p; ++tp) {
            for (int j = 0; j < nj; ++j) {
              for (int tq = 0; tq < t.tile_q; ++tq) {
                const int64_t r = item.row * s.stride_h + tp * s.dilation_h;
                const int64_t c = (j0 + j) * s.stride_w + tq * s.dilation_w;
                if (item.image >= t.images || r >= t.x_rows || c >= t.x_cols) {
                  *error = "read outside the staged window";
                  return false;
                }
                const int64_t p = p0 + tp, q = q0 + tq;
                if (p >= s.kernel_h || q >= s.kernel_w) continue;  // summed, then dropped
                const int64_t gy = row0 * s.stride_h - s.pad_top + p0 * s.dilation_h + r;
                const int64_t gx = -s.pad_left + q0 * s.dilation_w + c;
                if (gy != i * s.stride_h - s.pad_top + p * s.dilation_h ||
                    gx != (j0 + j) * s.stride_w - s.pad_left + q * s.dilation_w) {
                  *error = "x position differs from the definition";
                  return false;
                }
                ++(*seen)[((b * oh + i) * ow + j0 + j) * taps + p * s.kernel_w + q];
              }
            }
          }
        }
      }
      for (int64_t n : thread_terms) *max_thread_terms = std::max(*max_thread_terms, n);
    }
  }
  return true;
}

void ExpectValid(const Shape& s, const WgradTiling& t) {
  if (t.streaming) return ExpectStreamValid(s, t);
  SCOPED_TRACE(s.ToString());
  EXPECT_TRUE(!WgradStreams(s) || t.tile_p > 0);
  EXPECT_GE(t.slices, 1);
  EXPECT_LE(int64_t{t.slices - 1} * t.stages_per_slice, t.stages - 1);  // no empty slice
  EXPECT_GE(int64_t{t.slices} * t.stages_per_slice, t.stages);
  EXPECT_EQ(t.ctas, s.out_channels * t.tiles_p * t.tiles_q * t.slices);
  EXPECT_LE(t.smem_bytes, kH200Smem);
  EXPECT_GE(t.smem_bytes, 4 * int64_t{t.images} * (t.x_plane + t.dy_plane) * t.buffers);
  EXPECT_EQ(t.x_pitch % 2, 1);
  EXPECT_EQ(t.dy_pitch % 2, 1);
  EXPECT_GE(t.dy_pitch, t.segs * kSeg);
  EXPECT_LE(t.terms_per_thread, kMaxContractReduction);
  EXPECT_TRUE(t.buffers == 1 || t.stages_per_slice > 1);
  std::vector<int> seen;
  int64_t max_terms = 0;
  std::string error;
  ASSERT_TRUE(Replay(s, t, Mutant::kNone, &seen, &max_terms, &error)) << error;
  int64_t once = 0;
  for (int n : seen) once += n == 1;
  EXPECT_EQ(once, static_cast<int64_t>(seen.size()));
  EXPECT_LE(max_terms, t.terms_per_thread);
  for (Mutant m : {Mutant::kDropSlice, Mutant::kDropTile, Mutant::kDropLastStage}) {
    if (m == Mutant::kDropSlice && t.slices == 1) continue;
    if (m == Mutant::kDropTile && t.tiles_p * t.tiles_q == 1) continue;
    if (m == Mutant::kDropLastStage && t.stages_per_slice == 1) continue;
    ASSERT_TRUE(Replay(s, t, m, &seen, &max_terms, &error)) << error;
    int64_t mut_once = 0;
    for (int n : seen) mut_once += n == 1;
    EXPECT_LT(mut_once, static_cast<int64_t>(seen.size())) << "mutant " << static_cast<int>(m);
  }
}

TEST(DepthwiseWgradTilingTest, NetworksLayers) {
  // The replay counts every term: the large kernels at batch 2.
  std::vector<Shape> layers;
  for (Shape s : DepthwiseNetworkLayers()) {
    if (s.kernel_h > 8) s.batch = 2;
    s.op = Op::kWgrad;
    layers.push_back(s);
  }
  for (const Shape& s : layers) {
    for (WgradPath path : {WgradPath::kByRule, WgradPath::kStaged}) {
    absl::StatusOr<WgradTiling> t = WgradTilingFor(s, kH200Smem, path);
    ASSERT_TRUE(t.ok()) << t.status();
    const bool seven_large = s.kernel_h == 7 && s.stride_h == 1 && s.out_h() > 14;
    EXPECT_EQ(t->streaming, path == WgradPath::kByRule && WgradStreams(s) && !seven_large);
    ExpectValid(s, *t);
    if (t->streaming) {
      std::printf("%-40s streaming: %d pixels an item, %lld items a channel, slices %3d x %6d "
                  "ctas %6lld terms/thread %4lld  model %.1f us\n",
                  s.ToString().c_str(), t->outputs, static_cast<long long>(t->items), t->slices,
                  t->items_per_slice, static_cast<long long>(t->ctas),
                  static_cast<long long>(t->terms_per_thread), 1e6 * WgradSeconds(s, *t));
      continue;
    }
    std::printf("%-40s tile %dx%d x %dx%d cols %d segs %d stage %2d img x %3d rows (%d bands) "
                "stages %4lld slices %3d x %2d ctas %6lld smem %6lld terms/thread %4lld  "
                "model %.1f us\n",
                s.ToString().c_str(), t->tile_p, t->tile_q, t->tiles_p, t->tiles_q,
                static_cast<int>(t->cols), t->segs, t->images, t->rows, t->bands,
                static_cast<long long>(t->stages), t->slices, t->stages_per_slice,
                static_cast<long long>(t->ctas), static_cast<long long>(t->smem_bytes),
                static_cast<long long>(t->terms_per_thread), 1e6 * WgradSeconds(s, *t));
    }
  }
}

TEST(DepthwiseWgradTilingTest, RandomGeometries) {
  std::mt19937 rng(91);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int checked = 0, streamed = 0;
  for (int n = 0; n < 600; ++n) {
    const int c = pick(1, 6);
    Shape s{pick(1, 5), c, c * pick(1, 3), pick(1, 70), pick(1, 70), pick(1, 12), pick(1, 12)};
    s.groups = c;
    s.op = Op::kWgrad;
    s.pad_top = pick(0, 4), s.pad_bottom = pick(0, 4), s.pad_left = pick(0, 4),
    s.pad_right = pick(0, 4);
    if (pick(0, 1)) s.stride_h = pick(1, 3), s.stride_w = pick(1, 3);
    if (pick(0, 3) == 0) s.dilation_h = pick(1, 3), s.dilation_w = pick(1, 3);
    if (pick(0, 2) == 0) {  // one the streaming kernel takes
      s.kernel_h = s.kernel_w = 2 * pick(0, 3) + 1;
      s.dilation_h = s.dilation_w = 1;
      s.stride_w = pick(1, 2);
    }
    if (!ValidateShape(s).ok()) continue;
    for (WgradPath path : {WgradPath::kStaged, WgradPath::kStreaming}) {
      absl::StatusOr<WgradTiling> t = WgradTilingFor(s, kH200Smem, path);
      if (path == WgradPath::kStreaming && !WgradStreams(s)) {
        EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented) << s.ToString();
        continue;
      }
      ASSERT_TRUE(t.ok()) << s.ToString() << ": " << t.status();
      ExpectValid(s, *t);
      streamed += t->streaming;
    }
    ++checked;
  }
  EXPECT_GT(checked, 300);
  EXPECT_GT(streamed, 100);
}

// A long reduction (batch 256 at 56x56: 802,816 terms a tap) is cut into enough slices that no
// thread sums more than kMaxContractReduction terms in fp32; batch 1 on a 1x1 image is one term.
TEST(DepthwiseWgradTilingTest, SlicesBoundEachThreadsSum) {
  for (const Shape& s : {Wg(256, 8, 56, 3, 1, 1), Wg(1, 1, 1, 1, 0, 1), Wg(64, 2, 224, 7, 3, 2),
                         Wg(256, 8, 56, 9, 4, 1)}) {
    absl::StatusOr<WgradTiling> t = WgradTilingFor(s, kH200Smem);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_LE(t->terms_per_thread, kMaxContractReduction) << s.ToString();
    // The split is the shape's alone: the same on a device of less shared memory, or refused.
    absl::StatusOr<WgradTiling> staged = WgradTilingFor(s, kH200Smem, WgradPath::kStaged);
    ASSERT_TRUE(staged.ok()) << staged.status();
    EXPECT_LE(staged->terms_per_thread, kMaxContractReduction) << s.ToString();
    absl::StatusOr<WgradTiling> small = WgradTilingFor(s, 100 << 10);
    if (small.ok()) {
      EXPECT_EQ(small->slices, t->slices) << s.ToString();
    }
  }
}

// The streaming kernel's runner is built on the host alone (no device call before a launch): it
// holds the streaming kernel's parameters only (the staged kernel's divisors are 0 for it).
TEST(DepthwiseWgradTilingTest, StreamingRunnerBuildsOnTheHost) {
  for (const Shape& s : {Wg(32, 96, 112, 3, 1, 2), Wg(2, 3, 7, 7, 3, 1), Wg(1, 1, 1, 1, 0, 1)}) {
    absl::StatusOr<WgradTiling> t = WgradTilingFor(s, kH200Smem, WgradPath::kStreaming);
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<std::unique_ptr<Runner>> runner = MakeWgradRunner(s, *t, kH200Smem);
    ASSERT_TRUE(runner.ok()) << runner.status();
    EXPECT_EQ((*runner)->workspace_bytes(), t->workspace_bytes(s) + 16) << s.ToString();
  }
}

// Past wgrad_split::kCenterK terms a tap both kernels take x centred, and the workspace holds
// the centres and dy's channel sums after the partials; at or below it, the partials alone.
TEST(DepthwiseWgradTilingTest, CentringPastCenterK) {
  const Shape centred = Wg(24, 8, 56, 31, 15, 1);  // 24 * 56 * 56 = 75,264 terms
  const Shape not_centred = Wg(23, 8, 56, 31, 15, 1);  // 72,128
  EXPECT_TRUE(Centred(centred));
  EXPECT_FALSE(Centred(not_centred));
  EXPECT_TRUE(Centred(Wg(32, 128, 56, 31, 15, 1)));  // RepLKNet's, the class that missed
  EXPECT_TRUE(Centred(Wg(32, 96, 112, 3, 1, 2)));    // EfficientNet's 3x3/2: 56x56 out
  EXPECT_FALSE(Centred(Wg(32, 144, 56, 5, 2, 2)));   // 28x28 out
  for (const WgradPath path : {WgradPath::kStaged, WgradPath::kByRule}) {
    for (const Shape& s : {centred, not_centred, Wg(6, 4, 112, 3, 1, 1)}) {
      absl::StatusOr<WgradTiling> t = WgradTilingFor(s, kH200Smem, path);
      ASSERT_TRUE(t.ok()) << t.status();
      const size_t partials = static_cast<size_t>(t->slices) * s.out_channels * s.kernel_h *
                              s.kernel_w * sizeof(double);
      const size_t centring = Centred(s) ? 4 * s.in_channels + 8 * s.out_channels : 0;
      EXPECT_GE(t->workspace_bytes(s), partials + centring) << s.ToString();
      if (!Centred(s)) {
        EXPECT_EQ(t->workspace_bytes(s), partials) << s.ToString();
      }
    }
  }
}

// TapRange names exactly the outputs whose tap lies inside x, on every small geometry (the
// centring's per-tap sums of dy add over them).
TEST(DepthwiseWgradTilingTest, TapRangeIsTheInsideOutputs) {
  int checked = 0;
  for (int in = 1; in <= 9; ++in) {
    for (int k = 1; k <= 5; ++k) {
      for (int pad = 0; pad <= 4; ++pad) {
        for (int stride = 1; stride <= 3; ++stride) {
          for (int dil = 1; dil <= 3; ++dil) {
            const int out = (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
            if (in + 2 * pad - dil * (k - 1) - 1 < 0) continue;
            for (int t = 0; t < k; ++t) {
              int lo, hi;
              TapRange(pad, t, dil, stride, in, out, &lo, &hi);
              ASSERT_LE(0, lo);
              ASSERT_LE(lo, hi);
              ASSERT_LE(hi, out);
              for (int i = 0; i < out; ++i) {
                const int v = i * stride - pad + t * dil;
                EXPECT_EQ(i >= lo && i < hi, v >= 0 && v < in)
                    << "in " << in << " k " << k << " pad " << pad << " stride " << stride
                    << " dilation " << dil << " tap " << t << " output " << i;
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

}  // namespace
}  // namespace depthwise_internal
}  // namespace conv2d
