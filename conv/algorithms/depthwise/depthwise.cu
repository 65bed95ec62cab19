// "depthwise" (depthwise.h): two kernels, TilingFor choosing (PrefersStaged). The staged kernel: a
// CTA computes one tile of `planes` output planes at once: whole planes, several to a CTA, when
// they are small (EfficientNet's and ConvNeXt's late stages run at 7x7 and 14x14 with hundreds of
// channels: one plane per CTA would leave most threads idle and every CTA waiting on one short
// load), one tile of one plane when they are large. It stages each plane's filter and input window
// in shared memory with cp.async (zero-filled where the window leaves the image: the padding is
// never materialised in global memory, and every copy is in flight at once), then each thread sums
// Kh*Kw terms in fp32 for each of its outputs (at most kMaxKernel^2 = 3969 terms, within the
// direct-summation contract's 4608) and adds the bias.
//
// At stride 1 and dilation 1 a thread computes kCols consecutive outputs of 4 rows (or of 1 row
// where StagedTilingFor says so) and walks the input rows its outputs read: each row's eight-value
// window, two 16-byte shared loads, serves four filter taps of up to four output rows (up to 64
// multiply-adds for 2 + 4 loads: the direct sum stays on the FMA pipe, not on shared-memory
// bandwidth, which matters at 31x31). A filter row's last chunk of taps, past kernel_w, is skipped
// rather than multiplied by zero: the input there is another output's, and 0 * Inf would put a NaN
// where F.conv2d has none. Otherwise a thread computes kCols outputs of one row, threads_per_row
// apart, with 4-byte loads. StagedTilingFor pads the rows and planes in shared memory so that one
// warp's loads spread over the banks.
//
// The streaming kernel (where PrefersStaged says the copy loop costs more than the reuse it buys:
// kernels to 5x5, and 7x7 when strided, dilated or on planes of at most 14x14) stages nothing and
// has no barrier. A thread computes outputs_per_thread consecutive outputs of one row; consecutive
// threads take consecutive groups in the flattened (plane, row, group) order, so that a warp's
// loads and stores cover adjacent columns, rows and planes. It reads its taps straight from global
// memory through the L1, which holds the input rows that neighbouring warps share. A tap outside
// the image is a predicated zero, never a load, and is multiplied like the staged kernel's zeros
// (0 * Inf = NaN, as in F.conv2d). Two outputs a thread where the row steps one column (stride_w =
// dilation_w = 1): they share kw - 1 of their kw + 1 input columns (a third to three sevenths fewer
// loads for 3x3 to 7x7) and halve the filter loads and index arithmetic per output, while a warp's
// loads still span two 128-byte lines. Otherwise one: with dilation two outputs share no column,
// and at column stride s a warp's loads would span 2s lines instead of s, for at most kw - s shared
// columns; lines per output, which the L1 serves one a cycle, are the tighter limit there by our
// count (not yet measured). 3x3, 5x5 and 7x7 are unrolled (immediate tap offsets, the column
// predicates once per thread); other sizes take a run-time loop. Both kernels sum each output's
// taps in row-major order with fmaf from zero and then add the bias, so their outputs agree bit for
// bit.
//
// "grouped_direct" (depthwise.h) runs the streaming kernel too, with a loop over the group's input
// planes around the taps: a grouped layer is the same per-output direct sum, only longer, and one
// implementation keeps its padding, stride, dilation and bias handling the one depthwise's tests
// check. Its column predicates serve every channel, and a thread computes four output channels of
// the group where out_per_group allows (kGroupedChannels), so that each input value it loads
// serves four filters: with one a thread the group's inputs were re-read out_per_group times
// through the L1 and L2, 2x slower at 8 and 32 channels per group (round 88).
#include "conv/algorithms/depthwise/depthwise.h"
#include "conv/algorithms/depthwise/depthwise_wgrad.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/arch/cp_async.cuh"
#include "conv/arch/fast_div.h"
#include "conv/arch/int_math.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace depthwise_internal {

namespace {
// conv/arch/int_math.h's, in the int the tiling's fields are.
int CeilDivInt(int64_t a, int64_t b) { return static_cast<int>(CeilDiv(a, b)); }
int RoundUpInt(int64_t a, int64_t b) { return static_cast<int>(RoundUp(a, b)); }

// The shared-memory wavefronts of the first warp's loads, per kernel step, for a candidate
// layout: with four rows a thread the 16-byte window and filter loads (a quarter-warp per wavefront, eight
// 16-byte bank groups), otherwise the 4-byte ones (a warp per wavefront, 32 banks). Lanes of
// different planes and thread rows read at the planes' and rows' strides; a layout whose strides
// are multiples of the bank width puts them on the same banks (up to 4-way on 7x7 planes).
int Wavefronts(const Tiling& t, const Shape& s, int per_plane) {
  const bool four_rows = t.rows_per_thread > 1;
  const int tpr = t.tile_w / kCols;
  const int lanes = std::min(32, t.planes * per_plane);
  const int phase = four_rows ? 8 : 32, granule = four_rows ? 4 : 1, banks = four_rows ? 8 : 32;
  int window = 0, filter = 0;
  for (int first = 0; first < lanes; first += phase) {
    int64_t win_addr[32], fil_addr[32];
    int n = 0;
    for (int l = first; l < std::min(lanes, first + phase); ++l, ++n) {
      const int pp = l / per_plane, ti = l % per_plane, ty = ti / tpr, tx = ti % tpr;
      const int64_t row = four_rows ? int64_t{ty} * t.rows_per_thread : int64_t{ty} * s.stride_h;
      const int64_t col = four_rows ? int64_t{tx} * kCols : int64_t{tx} * s.stride_w;
      win_addr[n] = (pp * int64_t{t.plane_floats} + row * t.pitch + col) / granule;
      fil_addr[n] = pp * int64_t{t.filter_floats} / granule;
    }
    // The wavefronts of one load: the most distinct addresses that share a bank.
    auto ways = [&](const int64_t* addr) {
      int64_t distinct[32];
      std::copy(addr, addr + n, distinct);
      std::sort(distinct, distinct + n);
      const int m = static_cast<int>(std::unique(distinct, distinct + n) - distinct);
      int count[32] = {};
      int worst = 1;
      for (int i = 0; i < m; ++i) worst = std::max(worst, ++count[distinct[i] % banks]);
      return worst;
    };
    window += ways(win_addr);
    filter += ways(fil_addr);
  }
  // Per chunk of four taps at stride 1: two window loads and up to four filter loads; per tap
  // otherwise: four window loads and one filter load.
  return four_rows ? 2 * window + t.rows_per_thread * filter : kCols * window + filter;
}

}  // namespace

absl::StatusOr<Tiling> TilingWith(const Shape& s, int rows_per_thread, int64_t smem_limit) {
  Tiling t;
  const bool unit = !s.strided() && !s.dilated();
  const int oh = static_cast<int>(s.out_h()), ow = static_cast<int>(s.out_w());
  t.rows_per_thread = rows_per_thread;
  // At most 8 threads across a tile row (32 outputs) and 16 thread rows: tiles that cover the
  // plane evenly (56 = 2 x 28, not 32 + 24).
  t.tiles_w = CeilDivInt(ow, 8 * kCols);
  t.tile_w = RoundUpInt(CeilDivInt(ow, t.tiles_w), kCols);
  t.tiles_h = CeilDivInt(oh, 16 * t.rows_per_thread);
  t.tile_h = RoundUpInt(CeilDivInt(oh, t.tiles_h), t.rows_per_thread);
  const int per_plane = (t.tile_h / t.rows_per_thread) * (t.tile_w / kCols);
  t.in_rows = static_cast<int>((t.tile_h - 1) * s.stride_h + s.span_h());
  t.in_cols = static_cast<int>((t.tile_w - 1) * s.stride_w + s.span_w());
  t.filter_pitch = RoundUpInt(static_cast<int>(s.kernel_w), 4);
  // At stride 1, 16-byte rows, and the four-row path's last window load reads up to column
  // tile_w + filter_pitch - 1 (columns from in_cols on are loaded, never used, and not staged).
  // One-row tilings at stride 1 keep that layout too (as measured in round 87), though their
  // 4-byte loads stop at in_cols.
  const int min_pitch = unit ? RoundUpInt(std::max(t.in_cols, t.tile_w + t.filter_pitch), 4)
                             : t.in_cols;
  auto plane_bytes = [&](const Tiling& c) { return 4 * int64_t{c.plane_floats + c.filter_floats}; };
  t.pitch = min_pitch;
  t.plane_floats = t.in_rows * t.pitch;
  t.filter_floats = static_cast<int>(s.kernel_h) * t.filter_pitch;
  if (plane_bytes(t) > smem_limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "depthwise: one plane's tile needs ", plane_bytes(t), " bytes of shared memory; the ",
        "device allows ", smem_limit));
  }
  // Planes per CTA: as many as fill kMaxThreads, no more than there are, and at most 56 KB
  // so that four such CTAs share an SM.
  const int64_t total = s.batch * s.out_channels;
  const int64_t budget = std::min<int64_t>(smem_limit, 56 << 10);
  int64_t planes = std::max(1, kMaxThreads / per_plane);
  planes = std::min({planes, total, std::max<int64_t>(1, budget / plane_bytes(t))});
  t.planes = static_cast<int>(planes);
  // The row pitch and the padding after each plane's window and filter with the fewest
  // shared-memory wavefronts (then the least memory), within the planes' budget.
  // (Eight 16-byte groups at stride 1; 16 4-byte steps otherwise, enough for the lanes'
  // strides of 1 to 4 to spread over the banks, and the filter's offsets in 16-byte steps.)
  const int step = unit ? 4 : 1, span = unit ? 32 : 16;
  Tiling best = t;
  int best_cost = Wavefronts(t, s, per_plane);
  for (int pitch = min_pitch; pitch < min_pitch + span; pitch += step) {
    for (int pad = 0; pad < span; pad += step) {
      for (int fpad = 0; fpad < (unit ? 32 : 16); fpad += 4) {
        Tiling c = t;
        c.pitch = pitch;
        c.plane_floats = t.in_rows * pitch + pad;
        c.filter_floats = t.filter_floats + fpad;
        if (plane_bytes(c) * t.planes > std::max(budget, plane_bytes(t) * t.planes)) continue;
        const int cost = Wavefronts(c, s, per_plane);
        if (cost < best_cost ||
            (cost == best_cost && plane_bytes(c) < plane_bytes(best))) {
          best = c, best_cost = cost;
        }
      }
    }
  }
  t = best;
  t.threads = RoundUpInt(t.planes * per_plane, 32);
  t.smem_bytes = plane_bytes(t) * t.planes;
  return t;
}

absl::StatusOr<Tiling> StagedTilingFor(const Shape& s, int64_t smem_limit) {
  const bool unit = !s.strided() && !s.dilated();
  if (!unit) return TilingWith(s, 1, smem_limit);
  // Four rows a thread (an input row's window serves four output rows: fewer shared loads per
  // multiply-add) on tall planes and kernels of 5 and more, unless the tile then has so few
  // threads for its shared memory that an SM holds fewer than 512 of them (a 13x13 kernel on 7x7
  // planes: 4 threads per 2.8 KB plane); one row a thread shares each plane's window among four
  // times as many. One row measured faster for 3x3 on 7x7 and 14x14 planes, four for 5x5 and
  // 7x7 there (round 87).
  if (s.out_h() < 16 && s.kernel_h < 5) return TilingWith(s, 1, smem_limit);
  absl::StatusOr<Tiling> four = TilingWith(s, 4, smem_limit);
  if (four.ok()) {
    const int per_plane = (four->tile_h / 4) * (four->tile_w / kCols);
    const double bytes_per_thread =
        static_cast<double>(four->smem_bytes) / (int64_t{four->planes} * per_plane);
    if (bytes_per_thread * 512 <= static_cast<double>(smem_limit)) return four;
  }
  absl::StatusOr<Tiling> one = TilingWith(s, 1, smem_limit);
  return one.ok() ? one : four;
}

bool PrefersStaged(const Shape& s) {
  if (s.kernel_h > 7 || s.kernel_w > 7) return true;
  if (s.strided() || s.dilated() || (s.kernel_h <= 5 && s.kernel_w <= 5)) return false;
  return s.out_h() * s.out_w() > 196;
}

Tiling StreamingTilingFor(const Shape& s) {
  Tiling t;
  t.staged = false;
  for (int k : kStreamingUnrolled) {
    if (s.kernel_h == k && s.kernel_w == k) t.unrolled_kernel = k;
  }
  t.outputs_per_thread = t.unrolled_kernel != 0 && s.stride_w == 1 && s.dilation_w == 1 ? 2 : 1;
  const int64_t items =
      s.batch * s.out_channels * s.out_h() * CeilDiv(s.out_w(), t.outputs_per_thread);
  t.threads = RoundUpInt(std::min<int64_t>(kMaxThreads, items), 32);
  return t;
}

absl::StatusOr<Tiling> TilingFor(const Shape& s, int64_t smem_limit) {
  if (PrefersStaged(s)) return StagedTilingFor(s, smem_limit);
  return StreamingTilingFor(s);
}

namespace {

struct Params {
  int h, w, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
  int out_channels;
  int total_planes;  // batch * out_channels
  int tile_h, tile_w, tiles_w, tiles, planes, threads_per_row, threads_per_plane;
  // A plane's staged window is in_rows x pitch floats at a stride of plane_floats (padded for
  // the banks), its filter kernel_h x filter_pitch at a stride of filter_floats.
  int in_rows, in_cols, pitch, filter_pitch, plane_floats, filter_floats;
  // The staging loop's stride (the CTA's threads) in planes, rows and columns of the window.
  int step_planes, step_rows, step_cols;
  FastDiv by_window_floats, by_pitch, by_filter_floats, by_filter_pitch, by_out_channels,
      by_multiplier;
  // The streaming kernel's threads with work (planes x rows x groups of a row's outputs).
  int items;
  FastDiv by_row_groups, by_out_h;
  // grouped_direct's input channels per output (Cin / groups); depthwise's kernels never read
  // it (theirs is 1 at compile time).
  int in_per_group;
  // grouped_direct's output channels per thread (kGroupedChannels where out_per_group allows,
  // else 1), and Cout over it: the output planes are then q = b * Cout + block * it + i.
  int channels_per_thread;
  FastDiv by_out_blocks;
};

// The output plane q = b * Cout + o reads input plane b * Cin + o / multiplier = q / multiplier
// (Cout = Cin * multiplier) and filter o.
__device__ __forceinline__ int InputPlaneOf(const Params& p, int q) {
  return p.by_multiplier.Div(q);
}

// Four taps (kTaps of them; the rest of the chunk lies past kernel_w) of one filter row against
// an eight-value input window, into up to four output rows: the row at offset `i` from the
// thread's first input row is row i - r of output r's window.
template <int kRows, int kTaps>
__device__ __forceinline__ void Chunk(const float* row, const float* filter, int filter_pitch,
                                      int kh, int i, int kq0, float (&acc)[kRows][kCols]) {
  const float4 a = *reinterpret_cast<const float4*>(row + kq0);
  const float4 b = *reinterpret_cast<const float4*>(row + kq0 + 4);
  const float win[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int kp = i - r;
    if (kp < 0 || kp >= kh) continue;
    const float4 f4 = *reinterpret_cast<const float4*>(filter + kp * filter_pitch + kq0);
    const float f[4] = {f4.x, f4.y, f4.z, f4.w};
#pragma unroll
    for (int t = 0; t < kTaps; ++t) {
#pragma unroll
      for (int j = 0; j < kCols; ++j) acc[r][j] = fmaf(win[j + t], f[t], acc[r][j]);
    }
  }
}

template <bool kFourRows>
__global__ void DepthwiseKernel(const float* __restrict__ x, const float* __restrict__ w,
                                const float* __restrict__ bias, float* __restrict__ y,
                                const Params p) {
  constexpr int kRows = kFourRows ? 4 : 1;
  extern __shared__ float4 smem4[];
  float* filters = reinterpret_cast<float*>(smem4);
  float* tiles = filters + p.planes * p.filter_floats;
  const int tid = static_cast<int>(threadIdx.x);
  const int group = static_cast<int>(blockIdx.x) / p.tiles;
  const int tile = static_cast<int>(blockIdx.x) - group * p.tiles;
  const int tile_y = tile / p.tiles_w, tile_x = tile - tile_y * p.tiles_w;
  const int oy0 = tile_y * p.tile_h, ox0 = tile_x * p.tile_w;
  const int iy0 = oy0 * p.sh - p.pt, ix0 = ox0 * p.sw - p.pl;
  const int q0 = group * p.planes;

  for (int i = tid; i < p.planes * p.filter_floats; i += blockDim.x) {
    int pp, rem, kp, kq;
    p.by_filter_floats.DivMod(i, &pp, &rem);
    p.by_filter_pitch.DivMod(rem, &kp, &kq);
    const int q = q0 + pp;
    if (kq >= p.kw || kp >= p.kh) continue;  // never read (the tap loops stop at kernel_w)
    const bool valid = q < p.total_planes;
    const int o = valid ? q - p.by_out_channels.Div(q) * p.out_channels : 0;
    CpAsync<4>(filters + i, w + (static_cast<int64_t>(o) * p.kh + kp) * p.kw + kq, valid);
  }
  // The window, one element per thread per step; the element's (plane, row, column) advances by
  // the step with carries instead of being divided out again (this loop is the kernel's cost on
  // small planes).
  {
    int pp, rem, r, col;
    p.by_window_floats.DivMod(tid, &pp, &rem);
    p.by_pitch.DivMod(rem, &r, &col);
    for (int i = tid; i < p.planes * p.in_rows * p.pitch; i += blockDim.x) {
      if (col < p.in_cols) {
        const int q = q0 + pp, gy = iy0 + r, gx = ix0 + col;
        const bool inside = q < p.total_planes && gy >= 0 && gy < p.h && gx >= 0 && gx < p.w;
        const float* src =
            x + (static_cast<int64_t>(InputPlaneOf(p, inside ? q : 0)) * p.h + gy) * p.w + gx;
        CpAsync<4>(tiles + pp * p.plane_floats + r * p.pitch + col, inside ? src : x, inside);
      }
      col += p.step_cols;
      r += p.step_rows;
      pp += p.step_planes;
      if (col >= p.pitch) col -= p.pitch, ++r;
      if (r >= p.in_rows) r -= p.in_rows, ++pp;
    }
  }
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();

  const int pp = tid / p.threads_per_plane;
  const int t = tid - pp * p.threads_per_plane;
  const int ty = t / p.threads_per_row, tx = t - ty * p.threads_per_row;
  const int q = q0 + pp;
  if (pp >= p.planes || q >= p.total_planes) return;
  const float* tile_in = tiles + pp * p.plane_floats;
  const float* filter = filters + pp * p.filter_floats;
  float acc[kRows][kCols] = {};
  if constexpr (kFourRows) {
    const float* base = tile_in + ty * kRows * p.pitch + tx * kCols;
    const int full = p.kw / 4 * 4, tail = p.kw - full;
    for (int i = 0; i < kRows + p.kh - 1; ++i) {
      const float* row = base + i * p.pitch;
      for (int kq0 = 0; kq0 < full; kq0 += 4) {
        Chunk<kRows, 4>(row, filter, p.filter_pitch, p.kh, i, kq0, acc);
      }
      if (tail == 1) Chunk<kRows, 1>(row, filter, p.filter_pitch, p.kh, i, full, acc);
      if (tail == 2) Chunk<kRows, 2>(row, filter, p.filter_pitch, p.kh, i, full, acc);
      if (tail == 3) Chunk<kRows, 3>(row, filter, p.filter_pitch, p.kh, i, full, acc);
    }
  } else {
    // Thread tx owns columns tx, tx + threads_per_row, ...: neighbouring lanes read input
    // columns `stride` apart (consecutive outputs per thread would put them 4 * stride apart,
    // on fewer banks).
    for (int kp = 0; kp < p.kh; ++kp) {
      const float* row = tile_in + (ty * p.sh + kp * p.dh) * p.pitch + tx * p.sw;
      const float* f = filter + kp * p.filter_pitch;
      for (int kq = 0; kq < p.kw; ++kq) {
        const float fv = f[kq];
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          acc[0][j] = fmaf(row[(j * p.threads_per_row) * p.sw + kq * p.dw], fv, acc[0][j]);
        }
      }
    }
  }
  const int o = q - p.by_out_channels.Div(q) * p.out_channels;
  const float add = bias != nullptr ? bias[o] : 0.0f;
  // With four rows a thread's columns are consecutive, otherwise threads_per_row apart.
  const int ox = ox0 + (kFourRows ? tx * kCols : tx);
  const int col_step = kFourRows ? 1 : p.threads_per_row;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int oy = oy0 + ty * kRows + r;
    if (oy >= p.oh) break;
    float* out = y + (static_cast<int64_t>(q) * p.oh + oy) * p.ow;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      if (ox + j * col_step < p.ow) out[ox + j * col_step] = acc[r][j] + add;
    }
  }
}

// One input value of the streaming kernel: zero outside the image, and then no load (`src` may
// then point outside the tensor).
__device__ __forceinline__ float Tap(const float* src, bool inside) {
  return inside ? __ldg(src) : 0.0f;
}

// One input plane's taps against its filter, into the thread's sums, row-major: the run-time
// loop (one output a thread).
// kOC filters filter_stride apart (grouped_direct's output channels of one thread) share each
// input value.
template <int kOC>
__device__ __forceinline__ void RuntimeTaps(const float* plane, const float* filter,
                                            int filter_stride, const Params& p, int iy0,
                                            int ix0, float (&acc)[kOC][1]) {
  for (int kp = 0; kp < p.kh; ++kp) {
    const int iy = iy0 + kp * p.dh;
    const bool row_inside = static_cast<unsigned>(iy) < static_cast<unsigned>(p.h);
    for (int kq = 0; kq < p.kw; ++kq) {
      const int ix = ix0 + kq * p.dw;
      const bool inside = row_inside && static_cast<unsigned>(ix) < static_cast<unsigned>(p.w);
      const float v = Tap(plane + (iy * p.w + ix), inside);
#pragma unroll
      for (int oc = 0; oc < kOC; ++oc) {
        acc[oc][0] = fmaf(v, __ldg(filter + oc * filter_stride + kp * p.kw + kq), acc[oc][0]);
      }
    }
  }
}

// The same, unrolled for a kK x kK filter: kInCols input columns a kernel row (kOut + kK - 1
// adjacent ones shared by the outputs, or, one output a thread, the kK taps dilation_w apart),
// `col_inside` their predicates.
template <int kK, int kOut, int kInCols, int kOC>
__device__ __forceinline__ void UnrolledTaps(const float* plane, const float* filter,
                                             int filter_stride, const Params& p, int iy0,
                                             int ix0, int col_step,
                                             const bool (&col_inside)[kInCols],
                                             float (&acc)[kOC][kOut]) {
#pragma unroll
  for (int kp = 0; kp < kK; ++kp) {
    const int iy = iy0 + kp * p.dh;
    const bool row_inside = static_cast<unsigned>(iy) < static_cast<unsigned>(p.h);
    // One pointer a row, the columns' offsets from it immediate where col_step is 1.
    const float* src = plane + (iy * p.w + ix0);
    float in[kInCols];
#pragma unroll
    for (int c = 0; c < kInCols; ++c) {
      in[c] = Tap(src + c * col_step, row_inside && col_inside[c]);
    }
#pragma unroll
    for (int kq = 0; kq < kK; ++kq) {
#pragma unroll
      for (int oc = 0; oc < kOC; ++oc) {
        const float f = __ldg(filter + oc * filter_stride + kp * kK + kq);
#pragma unroll
        for (int j = 0; j < kOut; ++j) acc[oc][j] = fmaf(in[j + kq], f, acc[oc][j]);
      }
    }
  }
}

// kK: the unrolled kernel size (0: the run-time loop); kOut: outputs per thread, consecutive in
// one row (2 only where the row steps one column: stride_w = dilation_w = 1). kGrouped:
// grouped_direct's instantiation, summing the in_per_group input planes of the output's group
// one after the other, channel-major and then the taps row-major, into one fmaf chain per output.
// Depthwise's (false) calls the taps once, without the channel loop, so that its code is the
// one-plane kernel's, not a loop the compiler must first prove runs once (its PTX differed in
// the address arithmetic when it was).
template <int kK, int kOut, bool kGrouped, int kOC>
__global__ void __launch_bounds__(kMaxThreads)
    StreamingKernel(const float* __restrict__ x, const float* __restrict__ w,
                    const float* __restrict__ bias, float* __restrict__ y, const Params p) {
  static_assert(kOut == 1 || kK > 0, "the run-time loop computes one output a thread");
  const int item = static_cast<int>(blockIdx.x) * static_cast<int>(blockDim.x) +
                   static_cast<int>(threadIdx.x);
  if (item >= p.items) return;
  int row, group, qb, oy;
  p.by_row_groups.DivMod(item, &row, &group);  // row = qb * oh + oy
  p.by_out_h.DivMod(row, &qb, &oy);
  // The thread's first output plane q (and channel o); kOC > 1: qb counts blocks of kOC planes
  // of one image, all of one group (out_per_group % kOC == 0).
  int q = qb, o;
  if constexpr (kOC == 1) {
    o = q - p.by_out_channels.Div(q) * p.out_channels;
  } else {
    int b, block;
    p.by_out_blocks.DivMod(qb, &b, &block);
    o = block * kOC;
    q = b * p.out_channels + o;
  }
  const int ox0 = group * kOut;
  const int iy0 = oy * p.sh - p.pt, ix0 = ox0 * p.sw - p.pl;
  // Grouped: output plane q = b * Cout + o of group g = o / out_per_group reads input planes
  // b * Cin + g * in_per_group on, which is (q / out_per_group) * in_per_group since
  // Cin = groups * in_per_group and Cout = groups * out_per_group.
  const int channels = kGrouped ? p.in_per_group : 1;
  const int first_plane = kGrouped ? p.by_multiplier.Div(q) * p.in_per_group : InputPlaneOf(p, q);
  const float* plane = x + first_plane * (p.h * p.w);
  float acc[kOC][kOut] = {};
  if constexpr (kK == 0) {
    const int taps = p.kh * p.kw;
    const float* filter = w + o * (channels * taps);
    if constexpr (kGrouped) {
      for (int c = 0; c < channels; ++c) {
        RuntimeTaps<kOC>(plane + c * (p.h * p.w), filter + c * taps, channels * taps, p, iy0,
                         ix0, acc);
      }
    } else {
      RuntimeTaps<kOC>(plane, filter, taps, p, iy0, ix0, acc);
    }
  } else {
    // The columns' offsets and predicates are the same for every row and channel: computed once.
    constexpr int kInCols = kOut == 1 ? kK : kOut + kK - 1;
    const int col_step = kOut == 1 ? p.dw : 1;
    bool col_inside[kInCols];
#pragma unroll
    for (int c = 0; c < kInCols; ++c) {
      col_inside[c] = static_cast<unsigned>(ix0 + c * col_step) < static_cast<unsigned>(p.w);
    }
    const float* filter = w + o * (channels * kK * kK);
    if constexpr (kGrouped) {
      for (int c = 0; c < channels; ++c) {
        UnrolledTaps<kK, kOut, kInCols, kOC>(plane + c * (p.h * p.w), filter + c * (kK * kK),
                                             channels * kK * kK, p, iy0, ix0, col_step,
                                             col_inside, acc);
      }
    } else {
      UnrolledTaps<kK, kOut, kInCols, kOC>(plane, filter, kK * kK, p, iy0, ix0, col_step,
                                           col_inside, acc);
    }
  }
#pragma unroll
  for (int oc = 0; oc < kOC; ++oc) {
    const float add = bias != nullptr ? __ldg(bias + o + oc) : 0.0f;
    float* out = y + ((q + oc) * p.oh + oy) * p.ow + ox0;
#pragma unroll
    for (int j = 0; j < kOut; ++j) {
      if (kOut == 1 || ox0 + j < p.ow) out[j] = acc[oc][j] + add;
    }
  }
}

// grouped_direct's output channels per thread where out_per_group is a multiple of it.
constexpr int kGroupedChannels = 4;

using KernelFn = void (*)(const float*, const float*, const float*, float*, const Params);

template <bool kGrouped, int kOC>
KernelFn StreamingKernelFor(const Tiling& t) {
  const bool two = t.outputs_per_thread == 2;
  switch (t.unrolled_kernel) {
    case 3:
      return two ? &StreamingKernel<3, 2, kGrouped, kOC> : &StreamingKernel<3, 1, kGrouped, kOC>;
    case 5:
      return two ? &StreamingKernel<5, 2, kGrouped, kOC> : &StreamingKernel<5, 1, kGrouped, kOC>;
    case 7:
      return two ? &StreamingKernel<7, 2, kGrouped, kOC> : &StreamingKernel<7, 1, kGrouped, kOC>;
    default: return &StreamingKernel<0, 1, kGrouped, kOC>;
  }
}

// grouped_direct's tiling is always a streaming one (GroupedDirect::Choose).
KernelFn KernelFor(const Tiling& t, const Params& p, bool grouped) {
  if (grouped) {
    if (p.channels_per_thread == kGroupedChannels) {
      return StreamingKernelFor<true, kGroupedChannels>(t);
    }
    return StreamingKernelFor<true, 1>(t);
  }
  if (t.staged) return t.rows_per_thread == 4 ? &DepthwiseKernel<true> : &DepthwiseKernel<false>;
  return StreamingKernelFor<false, 1>(t);
}

class DepthwiseRunner : public Runner {
 public:
  DepthwiseRunner(const Shape& s, const Params& p, const Tiling& t, int64_t ctas, bool grouped)
      : s_(s), p_(p), t_(t), ctas_(ctas), grouped_(grouped) {}
  size_t workspace_bytes() const override { return 0; }
  bool adds_bias() const override { return true; }
  absl::Status Run(const RunArgs& a) const override {
    KernelFn kernel = KernelFor(t_, p_, grouped_);
    return CudaStatus(
        LaunchPdl(/*pdl=*/false, kernel, static_cast<unsigned>(ctas_),
                  static_cast<unsigned>(t_.threads), static_cast<size_t>(t_.smem_bytes), a.stream,
                  a.x, a.w, s_.has_bias ? a.bias : nullptr, a.y, p_),
        grouped_ ? "grouped_direct kernel launch" : "depthwise kernel launch");
  }
  bool records_launches() const override { return true; }

 private:
  Shape s_;
  Params p_;
  Tiling t_;
  int64_t ctas_;
  bool grouped_;
};

struct Config {
  Params params = {};  // the other kernel's fields stay zero
  Tiling tiling;
  int64_t ctas = 0;
  bool grouped = false;  // grouped_direct's: the streaming kernel summing in_per_group channels
  WgradTiling wgrad;     // depthwise's wgrad (depthwise_wgrad.h); the fields above unused
};

// The fields both kernels read: the sizes, the geometry and the plane arithmetic.
Params GeometryParams(const Shape& s) {
  Params p = {};
  p.h = static_cast<int>(s.height);
  p.w = static_cast<int>(s.width);
  p.kh = static_cast<int>(s.kernel_h);
  p.kw = static_cast<int>(s.kernel_w);
  p.sh = static_cast<int>(s.stride_h);
  p.sw = static_cast<int>(s.stride_w);
  p.dh = static_cast<int>(s.dilation_h);
  p.dw = static_cast<int>(s.dilation_w);
  p.pt = static_cast<int>(s.pad_top);
  p.pl = static_cast<int>(s.pad_left);
  p.oh = static_cast<int>(s.out_h());
  p.ow = static_cast<int>(s.out_w());
  p.out_channels = static_cast<int>(s.out_channels);
  p.total_planes = static_cast<int>(s.batch * s.out_channels);  // < 2^31: CheckFitsInt32
  p.by_out_channels = FastDiv(static_cast<uint32_t>(p.out_channels));
  p.by_multiplier = FastDiv(static_cast<uint32_t>(s.out_per_group()));
  p.in_per_group = static_cast<int>(s.in_per_group());
  p.channels_per_thread = 1;
  p.by_out_blocks = FastDiv(static_cast<uint32_t>(p.out_channels));
  return p;
}

// The streaming kernel's launch for tiling `t` into `c` (its params already GeometryParams').
void StreamingLaunch(const Tiling& t, Config* c) {
  Params& p = c->params;
  const int row_groups = CeilDivInt(p.ow, t.outputs_per_thread);
  // At most output_elements() (< 2^31: CheckFitsInt32).
  p.items = static_cast<int>(int64_t{p.total_planes} / p.channels_per_thread * p.oh * row_groups);
  p.by_row_groups = FastDiv(static_cast<uint32_t>(row_groups));
  p.by_out_h = FastDiv(static_cast<uint32_t>(p.oh));
  c->ctas = CeilDiv(p.items, t.threads);
}

// Which kernel an instance runs: TilingFor's choice ("depthwise"), or one forced for measurement.
enum class Path { kByRule, kStaged, kStreaming };

class Depthwise : public AlgorithmWithConfig<Config> {
 public:
  explicit Depthwise(Path path) : path_(path) {}
  std::string name() const override {
    switch (path_) {
      case Path::kStaged: return "depthwise_staged";
      case Path::kStreaming: return "depthwise_streaming";
      default: return "depthwise";
    }
  }
  // Fitted by tools/fit_auto.py to the nets suite's 18 depthwise layers (round 88,
  // docs/data/round88_nets_dw.json: measured over modelled 0.97x to 5.7x, the 13x13 on 7x7 the
  // worst); auto then picks the fastest of depthwise and fft_depthwise on all 18. Of the library's algorithms only fft_depthwise also takes
  // depthwise shapes (stride 1): with both calibrations auto picks it at 31x31 from batch 4
  // on and this one up to 13x13, as measured. The forced
  // variants' is infinite: they would otherwise outrank "depthwise" wherever the rule and the
  // models disagree, and auto must choose the same with the lab registered (tools/lab/lab_test).
  double calibration() const override {
    return path_ == Path::kByRule ? 2.06 : std::numeric_limits<double>::infinity();
  }
  Geometry geometry() const override { return Geometry{true, true, true, true}; }
  // wgrad too (depthwise_wgrad.h: its streaming and staged kernels, forced as the forward's are).
  // Not dgrad: at stride 1 it is this forward on dy (transposed_dgrad.h), which
  // Computes(kDgrad) would turn off.
  bool Computes(Op op) const override { return op == Op::kFprop || op == Op::kWgrad; }
  // wgrad: each thread's fp32 sum is at most kMaxContractReduction terms per tap (the slice
  // count sees to it) and the rest is summed in double: the blocked sum of conv.h.
  absl::Status WithinContract(const Shape& shape) const override {
    if (shape.op == Op::kWgrad) return absl::OkStatus();
    return DirectSummationWithinContract(shape);
  }

 protected:
  // The time, plus 3 us for the launch. Staged: the staged windows (each plane read once, plus
  // the halo tiles read again), the filters and the output at 3 TB/s, or the multiply-adds at
  // 20 T/s (~60% of the fp32 peak), whichever is longer. Streaming: the same with the input read
  // once (the L1 and L2 serve the rows that neighbouring outputs share).
  absl::StatusOr<Config> Choose(const Shape& s, const DeviceInfo& device,
                                double* seconds) const override {
    if (s.in_per_group() != 1) {
      return absl::UnimplementedError(absl::StrCat(
          "depthwise takes in_channels / groups = 1 only; this shape has ", s.in_per_group()));
    }
    if (s.kernel_h > kMaxKernel || s.kernel_w > kMaxKernel) {
      return absl::UnimplementedError(
          absl::StrCat("depthwise takes kernels up to ", kMaxKernel, " a side"));
    }
    RETURN_IF_ERROR(CheckFitsInt32(s, "depthwise"));
    const int64_t smem_limit = static_cast<int64_t>(device.shared_memory_per_block_optin);
    if (s.op == Op::kWgrad) {
      Config c;
      ASSIGN_OR_RETURN(c.wgrad, WgradTilingFor(s, smem_limit,
                                               path_ == Path::kStaged      ? WgradPath::kStaged
                                               : path_ == Path::kStreaming ? WgradPath::kStreaming
                                                                           : WgradPath::kByRule));
      *seconds = WgradSeconds(s, c.wgrad);
      return c;
    }
    ASSIGN_OR_RETURN(const Tiling t,
                     path_ == Path::kStaged      ? StagedTilingFor(s, smem_limit)
                     : path_ == Path::kStreaming ? absl::StatusOr<Tiling>(StreamingTilingFor(s))
                                                 : TilingFor(s, smem_limit));
    Config c;
    c.tiling = t;
    c.params = GeometryParams(s);
    Params& p = c.params;
    const double fmas = static_cast<double>(s.output_elements()) * s.kernel_h * s.kernel_w;
    const double fixed_bytes = 4.0 * (s.filter_elements() + s.output_elements());
    if (!t.staged) {
      StreamingLaunch(t, &c);
      const double bytes = 4.0 * s.input_elements() + fixed_bytes;
      *seconds = std::max(bytes / 3e12, fmas / 20e12) + 3e-6;
      return c;
    }
    p.tile_h = t.tile_h;
    p.tile_w = t.tile_w;
    p.tiles_w = t.tiles_w;
    p.tiles = t.tiles_h * t.tiles_w;
    p.planes = t.planes;
    p.threads_per_row = t.tile_w / kCols;
    p.threads_per_plane = (t.tile_h / t.rows_per_thread) * p.threads_per_row;
    p.in_rows = t.in_rows;
    p.in_cols = t.in_cols;
    p.pitch = t.pitch;
    p.filter_pitch = t.filter_pitch;
    p.plane_floats = t.plane_floats;
    p.filter_floats = t.filter_floats;
    const int window = t.in_rows * t.pitch;
    p.step_planes = t.threads / window;
    p.step_rows = t.threads % window / t.pitch;
    p.step_cols = t.threads % t.pitch;
    p.by_window_floats = FastDiv(static_cast<uint32_t>(window));
    p.by_pitch = FastDiv(static_cast<uint32_t>(p.pitch));
    p.by_filter_floats = FastDiv(static_cast<uint32_t>(p.filter_floats));
    p.by_filter_pitch = FastDiv(static_cast<uint32_t>(p.filter_pitch));
    const int64_t groups = (int64_t{p.total_planes} + t.planes - 1) / t.planes;
    c.ctas = groups * p.tiles;
    if (c.ctas > std::numeric_limits<int32_t>::max()) {
      return absl::OutOfRangeError("depthwise: more than 2^31 - 1 CTAs");
    }
    const double staged = static_cast<double>(c.ctas) * t.planes * t.in_rows * t.in_cols * 4.0;
    const double bytes = std::max(staged, 4.0 * s.input_elements()) + fixed_bytes;
    *seconds = std::max(bytes / 3e12, fmas / 20e12) + 3e-6;
    return c;
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const Config& c,
                                                const DeviceInfo& device) const override {
    if (s.op == Op::kWgrad) {
      return MakeWgradRunner(s, c.wgrad, static_cast<int>(device.shared_memory_per_block_optin));
    }
    if (c.tiling.staged) {  // (Choose kept the tile within the device's opt-in limit.)
      for (auto* kernel : {&DepthwiseKernel<true>, &DepthwiseKernel<false>}) {
        RETURN_IF_ERROR(AllowOptinSmem(reinterpret_cast<const void*>(kernel),
                                       static_cast<int>(device.shared_memory_per_block_optin),
                                       "depthwise: cudaFuncSetAttribute (shared memory size)"));
      }
    }
    return std::unique_ptr<Runner>(
        new DepthwiseRunner(s, c.params, c.tiling, c.ctas, /*grouped=*/false));
  }

 private:
  Path path_;
};

class GroupedDirect : public AlgorithmWithConfig<Config> {
 public:
  std::string name() const override { return "grouped_direct"; }
  // Not fitted (tools/fit_auto.py has no grouped layer measured yet): the model's own times.
  // No other fast algorithm takes these shapes (dot only where the output is one pixel that
  // sees the whole image), so the factor decides only against dot there.
  double calibration() const override { return 1.0; }
  Geometry geometry() const override { return Geometry{true, true, true, true}; }
  absl::Status WithinContract(const Shape& shape) const override {
    return DirectSummationWithinContract(shape);
  }

 protected:
  // The time, plus 3 us for the launch: the input read once (the L1 and L2 serve the rows that
  // neighbouring outputs and the group's out_per_group filters share), the filters and the
  // output at 3 TB/s, or the multiply-adds at 15 T/s, whichever is longer. 15 rather than
  // depthwise's 20: every term is a filter load besides the input tap (not measured).
  absl::StatusOr<Config> Choose(const Shape& s, const DeviceInfo&,
                                double* seconds) const override {
    if (!s.grouped()) {
      return absl::UnimplementedError(
          "grouped_direct takes groups > 1 only (one group is the implicit GEMMs' and the "
          "others')");
    }
    if (s.in_per_group() == 1) {
      return absl::UnimplementedError(
          "grouped_direct takes in_channels / groups > 1 only (1 is depthwise's)");
    }
    if (s.kernel_h > kMaxKernel || s.kernel_w > kMaxKernel) {
      return absl::UnimplementedError(
          absl::StrCat("grouped_direct takes kernels up to ", kMaxKernel, " a side"));
    }
    RETURN_IF_ERROR(CheckFitsInt32(s, "grouped_direct"));
    Config c;
    c.grouped = true;
    c.tiling = StreamingTilingFor(s);
    c.params = GeometryParams(s);
    // Several output channels of the group a thread: each input value loaded serves all of
    // them (one a thread re-read the group's inputs out_per_group times through the L1 and L2:
    // 3.6 T multiply-adds/s at 32 channels per group, round 88).
    if (s.out_per_group() % kGroupedChannels == 0) {
      c.params.channels_per_thread = kGroupedChannels;
      c.params.by_out_blocks =
          FastDiv(static_cast<uint32_t>(s.out_channels / kGroupedChannels));
    }
    StreamingLaunch(c.tiling, &c);
    const double fmas = static_cast<double>(s.output_elements()) * s.reduction();
    const double bytes = 4.0 * (s.input_elements() + s.filter_elements() + s.output_elements());
    *seconds = std::max(bytes / 3e12, fmas / 15e12) + 3e-6;
    return c;
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const Config& c,
                                                const DeviceInfo&) const override {
    return std::unique_ptr<Runner>(
        new DepthwiseRunner(s, c.params, c.tiling, c.ctas, /*grouped=*/true));
  }
};

}  // namespace
}  // namespace depthwise_internal

std::unique_ptr<Algorithm> MakeDepthwise() {
  return std::make_unique<depthwise_internal::Depthwise>(depthwise_internal::Path::kByRule);
}

std::unique_ptr<Algorithm> MakeGroupedDirect() {
  return std::make_unique<depthwise_internal::GroupedDirect>();
}

namespace depthwise_internal {
std::unique_ptr<Algorithm> MakeDepthwiseForced(bool staged) {
  return std::make_unique<Depthwise>(staged ? Path::kStaged : Path::kStreaming);
}
}  // namespace depthwise_internal

}  // namespace conv2d
