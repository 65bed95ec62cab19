// depthwise's weight gradient (depthwise_wgrad.h): the tilings, the streaming and the staged
// slice kernels, the CTA's fixed-order sum they share, and the runner.
#include "conv/algorithms/depthwise/depthwise_wgrad.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/implicit_gemm/wgrad_split.h"
#include "conv/arch/cp_async.cuh"
#include "conv/arch/fast_div.h"
#include "conv/arch/int_math.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace depthwise_internal {

namespace {
int AsInt(int64_t v) { return static_cast<int>(v); }
bool Unrolled(int64_t k) { return k == 1 || k == 3 || k == 5 || k == 7; }
}  // namespace

size_t CentringBytes(const Shape& s) {
  if (!Centred(s)) return 0;
  const int64_t doubles = s.out_channels * (s.kernel_h * s.kernel_w + s.out_h() * s.out_w() +
                                            s.kernel_h * s.out_w());
  return static_cast<size_t>(4 * s.in_channels + 8 + 8 * doubles);
}

bool WgradStreams(const Shape& s) {
  return s.kernel_h == s.kernel_w && Unrolled(s.kernel_h) &&
         s.dilation_h == 1 && s.dilation_w == 1 && (s.stride_w == 1 || s.stride_w == 2);
}

namespace {

// The streaming tiling: slices of whole items, enough for kStreamTargetCtas CTAs unless a
// thread would then take fewer than kStreamMinItems items, and never so few that a thread sums
// more than kMaxContractReduction terms per tap.
WgradTiling StreamingTilingFor(const Shape& s) {
  WgradTiling t;
  t.streaming = true;
  t.tile_p = t.tile_q = AsInt(s.kernel_h);
  t.tiles_p = t.tiles_q = 1;
  t.outputs = s.stride_w == 1 ? 2 : 1;
  t.row_groups = AsInt(CeilDiv(s.out_w(), t.outputs));
  t.items = s.batch * s.out_h() * t.row_groups;  // < 2^31: CheckFitsInt32 bounds dy
  const int64_t most = int64_t{kStreamThreads} * (kMaxContractReduction / t.outputs);
  const int64_t least = int64_t{kStreamThreads} * kStreamMinItems;
  const int64_t slices = std::max(
      CeilDiv(t.items, most),
      std::min(CeilDiv(kStreamTargetCtas, s.out_channels), CeilDiv(t.items, least)));
  t.items_per_slice = AsInt(CeilDiv(t.items, std::max<int64_t>(slices, 1)));
  t.slices = AsInt(CeilDiv(t.items, t.items_per_slice));
  t.ctas = s.out_channels * t.slices;
  t.terms_per_thread = CeilDiv(t.items_per_slice, kStreamThreads) * t.outputs;
  return t;
}

}  // namespace

absl::StatusOr<WgradTiling> WgradTilingFor(const Shape& s, int64_t smem_limit, WgradPath path) {
  if (path == WgradPath::kStreaming && !WgradStreams(s)) {
    return absl::UnimplementedError(
        "depthwise wgrad's streaming kernel takes square kernels of 1, 3, 5 or 7, dilation 1 "
        "and stride_w 1 or 2 only");
  }
  // By rule the staged kernel keeps 7x7 at stride 1 on planes past 14x14, as the forward's rule
  // does: its staged x rows serve 49 taps where the streaming kernel loads 56 values an item
  // through the L1 (ConvNeXt's 56x56 and 28x28: 0.151 and 0.083 ms staged against 0.166 and
  // 0.091 streaming; at 14x14 and 7x7 streaming wins, 0.049 and 0.037 against 0.056 and 0.061;
  // H100, PERF.md round 105).
  const bool staged_by_rule = s.kernel_h == 7 && s.stride_h == 1 && s.stride_w == 1 &&
                              s.out_h() * s.out_w() > 14 * 14;
  if (path == WgradPath::kStreaming || (path == WgradPath::kByRule && WgradStreams(s) &&
                                        !staged_by_rule)) {
    const WgradTiling t = StreamingTilingFor(s);
    if (t.ctas > (int64_t{1} << 31) - 1) {
      return absl::OutOfRangeError("depthwise wgrad: more than 2^31 - 1 CTAs");
    }
    return t;
  }
  WgradTiling t;
  const bool square = s.kernel_h == s.kernel_w && Unrolled(s.kernel_h);
  if (s.stride_w == 1 && s.dilation_w == 1) {
    t.cols = WgradCols::kUnit;
  } else if (s.stride_w == 2 && s.dilation_w == 1) {
    t.cols = WgradCols::kStride2;
  }
  // The exact tile where the kernel is an unrolled square; 8x8 tiles otherwise (the taps past
  // the kernel are summed and dropped: their window is staged, so they read nothing outside it).
  t.tile_p = t.tile_q = square && t.cols != WgradCols::kRuntime ? AsInt(s.kernel_h) : 8;
  t.tiles_p = AsInt(CeilDiv(s.kernel_h, t.tile_p));
  t.tiles_q = AsInt(CeilDiv(s.kernel_w, t.tile_q));
  const int64_t oh = s.out_h(), ow = s.out_w();
  t.segs = AsInt(CeilDiv(ow, kSeg));
  // A stage holds about kItemsPerThread items a thread: whole images when an image has fewer,
  // else even bands of one image; fewer (down to 32) where its window would pass kStageBudget
  // (stride 2 stages twice the x columns), so that two buffers leave room for three CTAs an SM.
  constexpr int64_t kStageBudget = 36 << 10;
  const int64_t per_image = oh * t.segs;
  for (int64_t per_stage = int64_t{kWgradThreads} * kItemsPerThread;; per_stage /= 2) {
    if (per_image <= per_stage) {
      t.images = AsInt(std::min<int64_t>(s.batch, per_stage / per_image));
      t.rows = AsInt(oh);
      t.bands = 1;
      t.stages = CeilDiv(s.batch, t.images);
    } else {
      t.images = 1;
      t.bands = AsInt(CeilDiv(per_image, per_stage));
      t.rows = AsInt(CeilDiv(oh, t.bands));
      t.bands = AsInt(CeilDiv(oh, t.rows));
      t.stages = s.batch * t.bands;
    }
    t.x_rows = AsInt((t.rows - 1) * s.stride_h + (t.tile_p - 1) * s.dilation_h + 1);
    t.x_cols =
        AsInt((int64_t{t.segs} * kSeg - 1) * s.stride_w + (t.tile_q - 1) * s.dilation_w + 1);
    t.x_pitch = t.x_cols | 1;  // odd: a warp's lanes on consecutive rows hit different banks
    t.dy_pitch = t.segs * kSeg + 1;
    t.x_plane = t.x_rows * t.x_pitch;
    t.dy_plane = t.rows * t.dy_pitch;
    if (4 * int64_t{t.images} * (t.x_plane + t.dy_plane) <= kStageBudget || per_stage <= 32) break;
  }
  // Slices: enough CTAs to fill the GPU, and few enough stages per slice that a thread's fp32
  // sum stays within kMaxContractReduction terms per tap.
  const int64_t items_per_thread = CeilDiv(t.items_per_stage(), kWgradThreads);
  const int64_t max_stages = std::max<int64_t>(
      1, kMaxContractReduction / (items_per_thread * kSeg));
  const int64_t per_slice_ctas = s.out_channels * t.tiles_p * t.tiles_q;
  int64_t slices = std::max(CeilDiv(t.stages, max_stages), CeilDiv(kTargetCtas, per_slice_ctas));
  slices = std::min(slices, t.stages);
  t.stages_per_slice = AsInt(CeilDiv(t.stages, slices));
  t.slices = AsInt(CeilDiv(t.stages, t.stages_per_slice));
  t.terms_per_thread = int64_t{t.stages_per_slice} * items_per_thread * kSeg;
  t.buffers = t.stages_per_slice > 1 ? 2 : 1;
  t.ctas = per_slice_ctas * t.slices;
  const int64_t stage_bytes = 4 * int64_t{t.images} * (t.x_plane + t.dy_plane);
  t.smem_bytes = std::max<int64_t>(stage_bytes * t.buffers,
                                   int64_t{kWgradThreads / 32} * 64 * sizeof(double));
  if (stage_bytes > smem_limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "depthwise wgrad: one stage needs ", stage_bytes, " bytes of shared memory; the device ",
        "allows ", smem_limit));
  }
  if (t.smem_bytes > smem_limit) {  // one buffer: the copies then wait for the sums
    t.buffers = 1;
    t.smem_bytes = std::max<int64_t>(stage_bytes, int64_t{kWgradThreads / 32} * 64 * 8);
  }
  if (t.ctas > (int64_t{1} << 31) - 1) {
    return absl::OutOfRangeError("depthwise wgrad: more than 2^31 - 1 CTAs");
  }
  return t;
}

// Staged: the FMAs the kernel issues (the tiles' dropped taps and the last segment's idle lanes
// included) at 20 T/s where a tap row's x values sit in registers, 6 T/s where each term loads
// one from shared memory (not measured: the forward's rate and a quarter-rate guess); the
// staged windows (x once per tap tile and output channel) and dy at 3 TB/s; two launches.
// Streaming: the FMAs at 20 T/s; x read once per output channel and dy once at 3 TB/s (the L1
// serves the windows' overlap), the partials written and read; two launches.
double WgradSeconds(const Shape& s, const WgradTiling& t) {
  if (t.streaming) {
    const double fmas = static_cast<double>(s.out_channels) * t.items * t.outputs *
                        s.kernel_h * s.kernel_w;
    const double bytes = 4.0 * (s.output_elements() + static_cast<double>(s.batch) *
                                                          s.out_channels * s.height * s.width) +
                         2.0 * static_cast<double>(t.workspace_bytes(s));
    return std::max(fmas / 20e12, bytes / 3e12) + 5e-6;
  }
  const double fmas = static_cast<double>(s.batch) * s.out_channels * s.out_h() * t.segs * kSeg *
                      t.tile_p * t.tile_q * t.tiles_p * t.tiles_q;
  const double rate = t.cols == WgradCols::kRuntime ? 6e12 : 20e12;
  const double bytes = (4.0 * (s.output_elements() + static_cast<double>(s.batch) *
                                                         s.out_channels * s.height * s.width)) *
                           t.tiles_p * t.tiles_q +
                       2.0 * static_cast<double>(t.workspace_bytes(s));
  return std::max(fmas / rate, bytes / 3e12) + 5e-6;
}

namespace {

struct WgradParams {
  int h, w, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
  int batch, out_channels, multiplier;
  int tiles_p, tiles_q, tile_p, tile_q;
  int images, rows, bands, segs, stages, stages_per_slice, slices;
  int x_rows, x_cols, x_pitch, dy_pitch, x_plane, dy_plane, buffers;
  FastDiv by_x_plane, by_x_pitch, by_dy_plane, by_dy_pitch;
};

// The CTA's tap sums, acc[a][b] for taps (p0 + a, q0 + b) of each of its kThreads threads, added
// in double in a fixed order (a shuffle tree within each warp, then the warps in order) and
// written to out[tap] for the taps inside the kh x kw kernel. `red`: kThreads / 32 * kTp * kTq
// doubles of shared memory, free once every thread has passed the barrier before the call.
template <int kTp, int kTq, int kThreads>
__device__ __forceinline__ void WriteCtaSums(const float (&acc)[kTp][kTq], double* red, int kh,
                                             int kw, int p0, int q0, double* __restrict__ out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int a = 0; a < kTp; ++a) {
#pragma unroll
    for (int b = 0; b < kTq; ++b) {
      double v = acc[a][b];
#pragma unroll
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) red[warp * (kTp * kTq) + a * kTq + b] = v;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kTp * kTq; e += kThreads) {
    const int a = e / kTq, b = e % kTq;
    if (p0 + a >= kh || q0 + b >= kw) continue;
    double sum = 0;
    for (int wi = 0; wi < kThreads / 32; ++wi) sum += red[wi * (kTp * kTq) + e];
    out[(p0 + a) * kw + q0 + b] = sum;
  }
}

// Copies stage `stage` of channel `o` (tap tile origin p0, q0) into `buf`: the x windows then the
// dy rows of its images; `pad` where a window leaves the image or the batch (x's centre, which
// the sums take off again: 0 there), zeros in dy's.
__device__ __forceinline__ void StageCopy(const WgradParams& p, const float* __restrict__ x,
                                          const float* __restrict__ dy, int o, int p0, int q0,
                                          int stage, float pad, float* buf) {
  int64_t image0;
  int row0;
  WgradStageOrigin(stage, p.images, p.bands, p.rows, &image0, &row0);
  const int c = o / p.multiplier;
  const int gy0 = row0 * p.sh - p.pt + p0 * p.dh, gx0 = -p.pl + q0 * p.dw;
  const int x_floats = p.images * p.x_plane;
  for (int e = threadIdx.x; e < x_floats; e += blockDim.x) {
    int g, rem, r, col;
    p.by_x_plane.DivMod(e, &g, &rem);
    p.by_x_pitch.DivMod(rem, &r, &col);
    const int b = static_cast<int>(image0) + g, gy = gy0 + r, gx = gx0 + col;
    const bool valid = b < p.batch && col < p.x_cols && static_cast<unsigned>(gy) < unsigned(p.h) &&
                       static_cast<unsigned>(gx) < unsigned(p.w);
    if (valid) {
      CpAsync<4>(buf + e,
                 x + ((int64_t{b} * (p.out_channels / p.multiplier) + c) * p.h + gy) * p.w + gx,
                 true);
    } else {
      buf[e] = pad;  // read after the stage's barrier, as the copies are
    }
  }
  float* dbuf = buf + x_floats;
  for (int e = threadIdx.x; e < p.images * p.dy_plane; e += blockDim.x) {
    int g, rem, r, col;
    p.by_dy_plane.DivMod(e, &g, &rem);
    p.by_dy_pitch.DivMod(rem, &r, &col);
    const int b = static_cast<int>(image0) + g, i = row0 + r;
    const bool valid = b < p.batch && i < p.oh && col < p.ow;
    const float* src =
        valid ? dy + ((int64_t{b} * p.out_channels + o) * p.oh + i) * p.ow + col : dy;
    CpAsync<4>(dbuf + e, src, valid);
  }
}

// One item: kSeg pixels of one dy row against every tap of the tile. kSw, kDw: the column step
// compiled in (0: the run-time one, each term's x read from shared memory).
// kCentred: x's values less `center`, its channel's centre (the padding, staged as `center`,
// becomes 0); compiled apart so that an uncentred channel pays nothing for it.
template <int kTp, int kTq, int kSw, int kDw, bool kCentred>
__device__ __forceinline__ void Item(const WgradParams& p, const float* xs, const float* ds,
                                     int nj, float center, float (&acc)[kTp][kTq]) {
  float d[kSeg];
#pragma unroll
  for (int j = 0; j < kSeg; ++j) d[j] = ds[j];
#pragma unroll
  for (int tp = 0; tp < kTp; ++tp) {
    const float* xr = xs + tp * p.dh * p.x_pitch;
    if constexpr (kSw > 0) {
      constexpr int kSpan = (kSeg - 1) * kSw + (kTq - 1) * kDw + 1;
      float xv[kSpan];
#pragma unroll
      for (int c = 0; c < kSpan; ++c) xv[c] = kCentred ? xr[c] - center : xr[c];
#pragma unroll
      for (int j = 0; j < kSeg; ++j) {
        if (j < nj) {
#pragma unroll
          for (int tq = 0; tq < kTq; ++tq) acc[tp][tq] = fmaf(d[j], xv[j * kSw + tq * kDw], acc[tp][tq]);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < kSeg; ++j) {
        if (j < nj) {
#pragma unroll
          for (int tq = 0; tq < kTq; ++tq) {
            const float xv = xr[j * p.sw + tq * p.dw];
            acc[tp][tq] = fmaf(d[j], kCentred ? xv - center : xv, acc[tp][tq]);
          }
        }
      }
    }
  }
}

// CTA = (slice, channel, tap tile), slice outermost. Writes the CTA's double sums to
// partial[(slice * Cout + o) * Kh*Kw + tap]. `centers`: x's channel centres (Centred), or null.
template <int kTp, int kTq, int kSw, int kDw>
__global__ void __launch_bounds__(kWgradThreads)
    WgradSliceKernel(const float* __restrict__ x, const float* __restrict__ dy,
                     const float* __restrict__ centers, double* __restrict__ partial,
                     const WgradParams p) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int tiles = p.tiles_p * p.tiles_q;
  const int cta = static_cast<int>(blockIdx.x);
  const int slice = cta / (p.out_channels * tiles);
  const int rem = cta - slice * (p.out_channels * tiles);
  const int o = rem / tiles, tile = rem - o * tiles;
  const int p0 = tile / p.tiles_q * kTp, q0 = tile % p.tiles_q * kTq;
  const int first = slice * p.stages_per_slice;
  const int count = min(p.stages_per_slice, p.stages - first);
  const int stage_floats = p.images * (p.x_plane + p.dy_plane);
  const int items = p.images * p.rows * p.segs;

  float acc[kTp][kTq];
#pragma unroll
  for (int a = 0; a < kTp; ++a)
#pragma unroll
    for (int b = 0; b < kTq; ++b) acc[a][b] = 0.0f;

  PdlWait();
  const float center = centers != nullptr ? centers[o / p.multiplier] : 0.0f;
  StageCopy(p, x, dy, o, p0, q0, first, center, smem);
  CpAsyncCommit();
  for (int k = 0; k < count; ++k) {
    float* buf = smem + (k % p.buffers) * stage_floats;
    if (p.buffers == 2 && k + 1 < count) {  // the next stage's copy overlaps this one's sums
      StageCopy(p, x, dy, o, p0, q0, first + k + 1, center, smem + ((k + 1) % 2) * stage_floats);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    int64_t image0;
    int row0;
    WgradStageOrigin(first + k, p.images, p.bands, p.rows, &image0, &row0);
    for (int it = threadIdx.x; it < items; it += kWgradThreads) {
      const WgradItem item = WgradItemOf(it, p.rows, p.segs);
      if (image0 + item.image >= p.batch || row0 + item.row >= p.oh) continue;
      const int j0 = item.seg * kSeg;
      const float* xs = buf + item.image * p.x_plane + item.row * p.sh * p.x_pitch + j0 * p.sw;
      const float* ds = buf + p.images * p.x_plane + item.image * p.dy_plane +
                        item.row * p.dy_pitch + j0;
      if (center != 0.0f) {
        Item<kTp, kTq, kSw, kDw, true>(p, xs, ds, min(kSeg, p.ow - j0), center, acc);
      } else {
        Item<kTp, kTq, kSw, kDw, false>(p, xs, ds, min(kSeg, p.ow - j0), center, acc);
      }
    }
    __syncthreads();  // the buffer is refilled next
    if (p.buffers == 1 && k + 1 < count) {
      StageCopy(p, x, dy, o, p0, q0, first + k + 1, center, smem);
      CpAsyncCommit();
    }
  }

  WriteCtaSums<kTp, kTq, kWgradThreads>(acc, reinterpret_cast<double*>(smem), p.kh, p.kw, p0, q0,
                                        partial + (int64_t{slice} * p.out_channels + o) *
                                                      (p.kh * p.kw));
  PdlLaunchDependents();
}

// The streaming kernel's parameters.
struct StreamParams {
  int h, w, oh, ow, sh, pt, pl;
  int out_channels, in_channels, multiplier;
  int items, items_per_slice;
  FastDiv by_row_groups, by_oh;
};

// The streaming kernel's item `it` of channel o (x's channel c) into acc; kCentred: x less
// `center` inside x, 0 in its padding.
template <int kK, int kOut, int kSw, bool kCentred>
__device__ __forceinline__ void StreamItem(const float* __restrict__ x,
                                           const float* __restrict__ dy, const StreamParams& p,
                                           int o, int c, int it, float center,
                                           float (&acc)[kK][kK]) {
  constexpr int kIn = (kOut - 1) * kSw + kK;  // x columns an item's window spans
  const WgradStreamItem item = WgradStreamItemOf(it, p.by_row_groups, p.by_oh);
  const int j0 = item.g * kOut;
  const float* d_row = dy + ((int64_t{item.b} * p.out_channels + o) * p.oh + item.i) * p.ow + j0;
  // The row's last item may hold one pixel: its second is skipped, not multiplied.
  const bool both = kOut == 1 || j0 + 1 < p.ow;
  float d[kOut];
  d[0] = __ldg(d_row);
  if constexpr (kOut == 2) d[1] = both ? __ldg(d_row + 1) : 0.0f;
  const int iy0 = item.i * p.sh - p.pt, ix0 = j0 * kSw - p.pl;
  const float* plane = x + (int64_t{item.b} * p.in_channels + c) * p.h * p.w;
  bool col_in[kIn];
#pragma unroll
  for (int cc = 0; cc < kIn; ++cc) col_in[cc] = static_cast<unsigned>(ix0 + cc) < unsigned(p.w);
#pragma unroll
  for (int r = 0; r < kK; ++r) {
    const int gy = iy0 + r;
    const bool row_in = static_cast<unsigned>(gy) < unsigned(p.h);
    const float* xr = plane + (row_in ? gy * p.w + ix0 : 0);
    float xv[kIn];
#pragma unroll
    for (int cc = 0; cc < kIn; ++cc) {
      const bool in = row_in && col_in[cc];
      xv[cc] = kCentred ? (in ? __ldg(xr + cc) - center : 0.0f) : (in ? __ldg(xr + cc) : 0.0f);
    }
#pragma unroll
    for (int j = 0; j < kOut; ++j) {
      if (j == 0 || both) {
#pragma unroll
        for (int q = 0; q < kK; ++q) acc[r][q] = fmaf(d[j], xv[j * kSw + q], acc[r][q]);
      }
    }
  }
}

// CTA = (slice, channel), slice outermost; thread t takes the slice's items t, t + kStreamThreads,
// ... (depthwise_wgrad.h). kOut dy pixels an item, x's columns kSw apart per pixel.
// `centers` as the staged kernel's.
template <int kK, int kOut, int kSw>
__global__ void __launch_bounds__(kStreamThreads)
    WgradStreamKernel(const float* __restrict__ x, const float* __restrict__ dy,
                      const float* __restrict__ centers, double* __restrict__ partial,
                      const StreamParams p) {
  __shared__ double red[kStreamThreads / 32 * kK * kK];
  const int cta = static_cast<int>(blockIdx.x);
  const int slice = cta / p.out_channels, o = cta - slice * p.out_channels;
  const int c = o / p.multiplier;
  const int end = min(p.items, (slice + 1) * p.items_per_slice);
  float acc[kK][kK] = {};

  PdlWait();
  const float center = centers != nullptr ? centers[c] : 0.0f;
  const int first = slice * p.items_per_slice + static_cast<int>(threadIdx.x);
  if (center != 0.0f) {
    for (int it = first; it < end; it += kStreamThreads) {
      StreamItem<kK, kOut, kSw, true>(x, dy, p, o, c, it, center, acc);
    }
  } else {
    for (int it = first; it < end; it += kStreamThreads) {
      StreamItem<kK, kOut, kSw, false>(x, dy, p, o, c, it, center, acc);
    }
  }
  WriteCtaSums<kK, kK, kStreamThreads>(acc, red, kK, kK, 0, 0,
                                       partial + (int64_t{slice} * p.out_channels + o) * (kK * kK));
  PdlLaunchDependents();
}

using SliceKernelFn = void (*)(const float*, const float*, const float*, double*,
                               const WgradParams);

template <int kTp, int kTq>
SliceKernelFn ForCols(WgradCols cols) {
  return cols == WgradCols::kUnit ? &WgradSliceKernel<kTp, kTq, 1, 1>
                                  : &WgradSliceKernel<kTp, kTq, 2, 1>;
}

// The kernel compiled for the tiling (WgradTilingFor's tiles: 1, 3, 5, 7 with a compiled
// column step, 8 otherwise; the run-time column step only at 8).
SliceKernelFn SliceKernelFor(const WgradTiling& t) {
  if (t.cols == WgradCols::kRuntime) return &WgradSliceKernel<8, 8, 0, 0>;
  switch (t.tile_p) {
    case 1: return ForCols<1, 1>(t.cols);
    case 3: return ForCols<3, 3>(t.cols);
    case 5: return ForCols<5, 5>(t.cols);
    case 7: return ForCols<7, 7>(t.cols);
    default: return ForCols<8, 8>(t.cols);
  }
}

using StreamKernelFn = void (*)(const float*, const float*, const float*, double*,
                                const StreamParams);

template <int kK>
StreamKernelFn StreamForStride(int stride_w) {
  return stride_w == 1 ? &WgradStreamKernel<kK, 2, 1> : &WgradStreamKernel<kK, 1, 2>;
}

// The streaming kernel compiled for the shape (WgradStreams's: kernels 1, 3, 5, 7; stride_w 1
// or 2).
StreamKernelFn StreamKernelFor(const Shape& s) {
  const int sw = AsInt(s.stride_w);
  switch (s.kernel_h) {
    case 1: return StreamForStride<1>(sw);
    case 3: return StreamForStride<3>(sw);
    case 5: return StreamForStride<5>(sw);
    default: return StreamForStride<7>(sw);
  }
}

StreamParams MakeStreamParams(const Shape& s, const WgradTiling& t) {
  StreamParams p = {};
  p.h = AsInt(s.height), p.w = AsInt(s.width), p.oh = AsInt(s.out_h()), p.ow = AsInt(s.out_w());
  p.sh = AsInt(s.stride_h), p.pt = AsInt(s.pad_top), p.pl = AsInt(s.pad_left);
  p.out_channels = AsInt(s.out_channels), p.in_channels = AsInt(s.in_channels);
  p.multiplier = AsInt(s.out_per_group());
  p.items = AsInt(t.items), p.items_per_slice = t.items_per_slice;
  p.by_row_groups = FastDiv(static_cast<uint32_t>(t.row_groups));
  p.by_oh = FastDiv(static_cast<uint32_t>(p.oh));
  return p;
}

WgradParams MakeParams(const Shape& s, const WgradTiling& t) {
  WgradParams p = {};
  p.h = AsInt(s.height), p.w = AsInt(s.width), p.kh = AsInt(s.kernel_h), p.kw = AsInt(s.kernel_w);
  p.sh = AsInt(s.stride_h), p.sw = AsInt(s.stride_w);
  p.dh = AsInt(s.dilation_h), p.dw = AsInt(s.dilation_w);
  p.pt = AsInt(s.pad_top), p.pl = AsInt(s.pad_left);
  p.oh = AsInt(s.out_h()), p.ow = AsInt(s.out_w());
  p.batch = AsInt(s.batch), p.out_channels = AsInt(s.out_channels);
  p.multiplier = AsInt(s.out_per_group());
  p.tiles_p = t.tiles_p, p.tiles_q = t.tiles_q, p.tile_p = t.tile_p, p.tile_q = t.tile_q;
  p.images = t.images, p.rows = t.rows, p.bands = t.bands, p.segs = t.segs;
  p.stages = AsInt(t.stages), p.stages_per_slice = t.stages_per_slice, p.slices = t.slices;
  p.x_rows = t.x_rows, p.x_cols = t.x_cols, p.x_pitch = t.x_pitch, p.dy_pitch = t.dy_pitch;
  p.x_plane = t.x_plane, p.dy_plane = t.dy_plane, p.buffers = t.buffers;
  p.by_x_plane = FastDiv(static_cast<uint32_t>(t.x_plane));
  p.by_x_pitch = FastDiv(static_cast<uint32_t>(t.x_pitch));
  p.by_dy_plane = FastDiv(static_cast<uint32_t>(t.dy_plane));
  p.by_dy_pitch = FastDiv(static_cast<uint32_t>(t.dy_pitch));
  return p;
}

// The centring's per-tap sums of dy (Centred), in three passes over small double arrays, a
// thread per value, each sum in a fixed order; channels whose centre is 0 are skipped (their
// sums are never read). The geometry they need:
struct TapSumParams {
  int batch, out_channels, multiplier, oh, ow, kh, kw;
  int h, w, pt, pl, sh, sw, dh, dw;
};

// d[o][pix] = the sum over b of dy[b, o, pix], in batch order.
__global__ void DyBatchSumKernel(const float* __restrict__ dy, const float* __restrict__ centers,
                                 double* __restrict__ d, const TapSumParams p) {
  const int o = static_cast<int>(blockIdx.y);
  const int64_t plane = int64_t{p.oh} * p.ow;
  const int64_t pix = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (centers[o / p.multiplier] == 0.0f || pix >= plane) return;
  double sum = 0;
  for (int b = 0; b < p.batch; ++b) sum += dy[(int64_t{b} * p.out_channels + o) * plane + pix];
  d[o * plane + pix] = sum;
}

// e[o][r][j] = the sum of d[o][i][j] over the rows i whose tap row r lies inside x, in order.
__global__ void TapRowSumKernel(const double* __restrict__ d, const float* __restrict__ centers,
                                double* __restrict__ e, const TapSumParams p) {
  const int o = static_cast<int>(blockIdx.z), r = static_cast<int>(blockIdx.y);
  const int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (centers[o / p.multiplier] == 0.0f || j >= p.ow) return;
  int lo, hi;
  TapRange(p.pt, r, p.dh, p.sh, p.h, p.oh, &lo, &hi);
  const double* col = d + int64_t{o} * p.oh * p.ow + j;
  double sum = 0;
  for (int i = lo; i < hi; ++i) sum += col[int64_t{i} * p.ow];
  e[(int64_t{o} * p.kh + r) * p.ow + j] = sum;
}

// tap[o][r*kw + q] = the sum of e[o][r][j] over the columns j whose tap column q lies inside x.
__global__ void TapSumKernel(const double* __restrict__ e, const float* __restrict__ centers,
                             double* __restrict__ tap, const TapSumParams p) {
  const int o = static_cast<int>(blockIdx.y);
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (centers[o / p.multiplier] == 0.0f || t >= p.kh * p.kw) return;
  const int r = t / p.kw, q = t - r * p.kw;
  int lo, hi;
  TapRange(p.pl, q, p.dw, p.sw, p.w, p.ow, &lo, &hi);
  const double* row = e + (int64_t{o} * p.kh + r) * p.ow;
  double sum = 0;
  for (int j = lo; j < hi; ++j) sum += row[j];
  tap[int64_t{o} * p.kh * p.kw + t] = sum;
}

TapSumParams MakeTapSumParams(const Shape& s) {
  TapSumParams p = {};
  p.batch = AsInt(s.batch), p.out_channels = AsInt(s.out_channels);
  p.multiplier = AsInt(s.out_per_group());
  p.oh = AsInt(s.out_h()), p.ow = AsInt(s.out_w()), p.kh = AsInt(s.kernel_h);
  p.kw = AsInt(s.kernel_w), p.h = AsInt(s.height), p.w = AsInt(s.width);
  p.pt = AsInt(s.pad_top), p.pl = AsInt(s.pad_left), p.sh = AsInt(s.stride_h);
  p.sw = AsInt(s.stride_w), p.dh = AsInt(s.dilation_h), p.dw = AsInt(s.dilation_w);
  return p;
}

// The centring's buffers in the workspace (CentringBytes), from `at`.
struct CentringBuffers {
  float* centers = nullptr;
  double *tap = nullptr, *d = nullptr, *e = nullptr;
};
CentringBuffers CarveCentring(void* at, const Shape& s) {
  CentringBuffers b;
  b.centers = static_cast<float*>(at);
  b.tap = reinterpret_cast<double*>(
      (reinterpret_cast<uintptr_t>(b.centers + s.in_channels) + 7) & ~uintptr_t{7});
  b.d = b.tap + s.out_channels * s.kernel_h * s.kernel_w;
  b.e = b.d + s.out_channels * s.out_h() * s.out_w();
  return b;
}

class WgradRunner : public Runner {
 public:
  static constexpr uintptr_t kAlign = 16;
  WgradRunner(const Shape& s, const WgradTiling& t)
      // Only the tiling's kernel's parameters: the other's divisors are 0 (FastDiv(0) would
      // divide by zero).
      : s_(s), t_(t), p_(t.streaming ? WgradParams{} : MakeParams(s, t)),
        stream_p_(t.streaming ? MakeStreamParams(s, t) : StreamParams{}),
        sum_(wgrad_split::SumOf(s, wgrad_split::SplitK{t.slices, t.stages_per_slice})) {}
  // The caller's workspace needs no alignment (Plan::Run's contract): the partials start at the
  // first 16-byte boundary in it, the centring's buffers after them.
  size_t workspace_bytes() const override { return t_.workspace_bytes(s_) + kAlign; }
  absl::Status Run(const RunArgs& a) const override {
    const uintptr_t base = reinterpret_cast<uintptr_t>(a.workspace);
    double* partial = reinterpret_cast<double*>((base + kAlign - 1) / kAlign * kAlign);
    wgrad_split::Sum sum = sum_;
    if (Centred(s_)) {
      const CentringBuffers b = CarveCentring(
          partial + static_cast<size_t>(t_.slices) * static_cast<size_t>(s_.filter_elements()), s_);
      RETURN_IF_ERROR(wgrad_split::Centers(s_, a.x, b.centers, a.stream));
      RETURN_IF_ERROR(TapSums(a, b));
      sum.centers = b.centers;
      sum.tap_dy_sums = b.tap;
    }
    const float* centers = sum.centers;
    const cudaError_t launched =
        t_.streaming
            ? LaunchPdl(/*pdl=*/false, StreamKernelFor(s_), static_cast<unsigned>(t_.ctas),
                        static_cast<unsigned>(kStreamThreads), size_t{0}, a.stream, a.x, a.dy,
                        centers, partial, stream_p_)
            : LaunchPdl(/*pdl=*/false, SliceKernelFor(t_), static_cast<unsigned>(t_.ctas),
                        static_cast<unsigned>(kWgradThreads), static_cast<size_t>(t_.smem_bytes),
                        a.stream, a.x, a.dy, centers, partial, p_);
    RETURN_IF_ERROR(CudaStatus(launched, "depthwise wgrad kernel launch"));
    return wgrad_split::SumSlices(sum, static_cast<const double*>(partial), a.dw,
                                  s_.filter_elements(), a.stream);
  }
  bool records_launches() const override { return true; }

 private:
  // The centring's per-tap sums of dy into b.tap (the three passes above).
  absl::Status TapSums(const RunArgs& a, const CentringBuffers& b) const {
    constexpr unsigned kThreads = 256;
    const TapSumParams p = MakeTapSumParams(s_);
    const auto blocks = [](int64_t n) { return static_cast<unsigned>(CeilDiv(n, kThreads)); };
    const unsigned cout = static_cast<unsigned>(s_.out_channels);
    RETURN_IF_ERROR(CudaStatus(
        LaunchPdl(false, &DyBatchSumKernel, dim3(blocks(s_.out_h() * s_.out_w()), cout),
                  dim3(kThreads), size_t{0}, a.stream, a.dy, b.centers, b.d, p),
        "depthwise wgrad: dy's batch sums launch"));
    RETURN_IF_ERROR(CudaStatus(
        LaunchPdl(false, &TapRowSumKernel,
                  dim3(blocks(s_.out_w()), static_cast<unsigned>(s_.kernel_h), cout),
                  dim3(kThreads), size_t{0}, a.stream, b.d, b.centers, b.e, p),
        "depthwise wgrad: dy's tap row sums launch"));
    return CudaStatus(LaunchPdl(false, &TapSumKernel,
                                dim3(blocks(s_.kernel_h * s_.kernel_w), cout), dim3(kThreads),
                                size_t{0}, a.stream, b.e, b.centers, b.tap, p),
                      "depthwise wgrad: dy's tap sums launch");
  }

  Shape s_;
  WgradTiling t_;
  WgradParams p_;          // the staged kernel's
  StreamParams stream_p_;  // the streaming kernel's
  wgrad_split::Sum sum_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Runner>> MakeWgradRunner(const Shape& s, const WgradTiling& t,
                                                         int smem_optin) {
  if (t.streaming) return std::unique_ptr<Runner>(new WgradRunner(s, t));
  RETURN_IF_ERROR(AllowOptinSmem(reinterpret_cast<const void*>(SliceKernelFor(t)), smem_optin,
                                 "depthwise wgrad: cudaFuncSetAttribute (shared memory size)"));
  return std::unique_ptr<Runner>(new WgradRunner(s, t));
}

}  // namespace depthwise_internal
}  // namespace conv2d
