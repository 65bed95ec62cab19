// "fft_depthwise" (fft_depthwise.h). Two kernels per call:
//   filter kernel: each filter, zero-padded to the tile, through a 2D FFT into the workspace in
//                  natural order, scaled by 1 / (Th Tw) (exact), with its energy sum w^2;
//   main kernel:   per CTA, `pairs` complex tiles z = x_a + i x_b (two images' planes of one
//                  channel, zero outside the image: the padding is never materialised), the
//                  forward 2D FFT (its row pass skips the rows outside the image), the product
//                  with the filter's spectrum, the inverse 2D FFT (its column pass only over the
//                  columns holding outputs), the guard, the bias, the valid outputs to y.
// The FFTs are fft_fused's (radix-2 DIF in shared memory, fft_fused_internal.h): natural order
// in, bit-reversed out. The inverse is taken as conj(DFT(conj Y)), so the product phase writes
// V = conj(Z) * W / (Th Tw) in natural order (it swaps each element with its bit-reversed
// partner as it multiplies) and the outputs are Re D and -Im D of D = DFT(V). Cross-correlation,
// as F.conv2d: Y = Z * conj(W), valid (no wrap-around) for the first tile - kernel + 1 outputs.
//
// The guard. The error of an FFT convolution at any output of a tile is about
// u sqrt(log2 N) rms(z) |w|_2 (u = 2^-24, N = Th Tw; rms over the whole complex tile), whatever
// the output's own terms: one large element or a large mean anywhere in the tile raises it
// everywhere. Each output keeps the FFT's value y only if
//   est = kGuardFactor * u * sqrt(log2 N) * rms(z) * |w|_2  <=  1e-3 * s + 1e-3 * (|y| - est),
// the bar at the smallest |y64| the estimate allows, with s = min(1, rms(x) rms(w)) so that the
// absolute part scales with the data as the contract's does (tiny data); otherwise, and wherever
// y is not finite, the output is recomputed by direct summation in fp32 (padding taps multiplied,
// as F.conv2d does: a non-finite tap reaches every output of its channel). On randn data nothing
// is recomputed (est ~ 1e-4 at 31x31 against a bar of 1e-3); outliers, large means and
// non-finite values cost direct summation where, and only where, the FFT cannot be trusted.
#include "conv/algorithms/fft/fft_depthwise.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/fft/fft_fused_internal.h"
#include "conv/arch/fast_div.h"
#include "conv/arch/int_math.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace fft_depthwise {

using fft_fused::Addr;
using fft_fused::BitReverse;
using fft_fused::Cf;
using fft_fused::kTwiddles;
using fft_fused::MakeCf;
using fft_fused::RowSpan;

namespace {

constexpr int kThreads = fft_fused::kThreads;  // the FFT passes deal items to this many
constexpr int kMaxPairs = 4;
constexpr size_t kWorkspaceAlign = 256;
// A small target: 64x64 tiles take one pair (six CTAs an SM with the pinned kernel's launch
// bounds), 32x32 four. The FFT passes are latency bound (ncu, PERF.md round 89), so warps an SM
// pay more than pairs a CTA: at 31x31, one pair in six CTAs an SM took 0.281 ms against two
// pairs in three 0.341 (PERF.md round 92). Tiles with a 128 side still take one pair in 70 or
// 139 KB (three or one CTA an SM).
constexpr int64_t kSmemTarget = 40 << 10;
// Over the rms-to-max ratio of the FFT's error on randn data (~6 over a million outputs), with
// a margin for the constant of the error's growth (measured: docs/PERF.md, round 88).
constexpr float kGuardFactor = 32.0f;

int64_t SmemBytes(int log2_th, int log2_tw, int pairs) {
  return int64_t{kTwiddles} * 8 + 3 * 4 * kMaxPairs +
         int64_t{pairs} * fft_fused::PairStride(log2_th, log2_tw, pairs, false) * 8;
}

// A RowRange with its divider, for the row pass.
RowSpan SpanOf(RowRange r) {
  return RowSpan{r.first, r.count, FastDiv(static_cast<uint32_t>(std::max(r.count, 1)))};
}

// Flops of a tiling's transforms and products over all CTAs: per pair, the forward transforms
// every column and the inverse every row; with `pruned` (the time model) the forward's rows are
// its image rows (ForwardRows) and the inverse's columns those holding outputs, as the kernel
// runs them; without (the tile ranking) every row and step_w columns of every tile.
double TilingFlops(const Shape& s, const Tiling& t, bool pruned) {
  const int th = 1 << t.log2_th, tw = 1 << t.log2_tw;
  const double row = 5.0 * tw * t.log2_tw, col = 5.0 * th * t.log2_th;
  double rows = 0, cols = 0;  // summed over the tile rows, the tile columns
  for (int ty = 0; ty < t.tiles_h; ++ty) rows += pruned ? ForwardRows(s, t, ty).count : th;
  for (int tx = 0; tx < t.tiles_w; ++tx) {
    cols += pruned ? static_cast<double>(
                         std::min<int64_t>(t.step_w, s.out_w() - int64_t{tx} * t.step_w))
                   : t.step_w;
  }
  const double per_position = tw * col + th * row + 6.0 * th * tw;
  const double tiles_h = t.tiles_h, tiles_w = t.tiles_w;
  const double all =
      tiles_h * tiles_w * per_position + tiles_w * rows * row + tiles_h * cols * col;
  return all * static_cast<double>(s.out_channels) * t.batch_groups * t.pairs;
}

}  // namespace

RowRange ForwardRows(const Shape& s, const Tiling& t, int ty) {
  const int64_t th = int64_t{1} << t.log2_th;
  if (ty != 0 && ty != t.tiles_h - 1) return RowRange{0, static_cast<int>(th)};
  const int64_t iy0 = int64_t{ty} * t.step_h - s.pad_top;  // the tile's first row in the image
  const int64_t first = std::clamp<int64_t>(-iy0, 0, th);
  const int64_t end = std::clamp<int64_t>(s.height - iy0, 0, th);
  if (end <= first) return RowRange{};
  return RowRange{static_cast<int>(first), static_cast<int>(end - first)};
}

absl::StatusOr<Tiling> TilingFor(const Shape& s) {
  if (s.in_per_group() != 1) {
    return absl::UnimplementedError(absl::StrCat(
        "fft_depthwise takes in_channels / groups = 1 only; this shape has ", s.in_per_group()));
  }
  if (s.strided() || s.dilated()) {
    return absl::UnimplementedError("fft_depthwise takes stride 1 and dilation 1 only");
  }
  if (s.kernel_h > kMaxKernel || s.kernel_w > kMaxKernel) {
    return absl::UnimplementedError(
        absl::StrCat("fft_depthwise takes kernels up to ", kMaxKernel, " a side"));
  }
  RETURN_IF_ERROR(CheckFitsInt32(s, "fft_depthwise"));
  const int64_t oh = s.out_h(), ow = s.out_w();
  Tiling best;
  double best_flops = std::numeric_limits<double>::infinity();
  for (int lh = 5; lh <= 7; ++lh) {
    for (int lw = 5; lw <= 7; ++lw) {
      const int64_t step_h = (int64_t{1} << lh) - s.kernel_h + 1;
      const int64_t step_w = (int64_t{1} << lw) - s.kernel_w + 1;
      if (step_h < 1 || step_w < 1) continue;
      Tiling t;
      t.log2_th = lh, t.log2_tw = lw;
      t.step_h = static_cast<int>(std::min(step_h, oh));
      t.step_w = static_cast<int>(std::min(step_w, ow));
      t.tiles_h = static_cast<int>(CeilDiv(oh, t.step_h));
      t.tiles_w = static_cast<int>(CeilDiv(ow, t.step_w));
      // As many pairs as fit the target (at least one), and no more than the images need.
      t.pairs = 1;
      while (t.pairs < kMaxPairs && 2 * t.pairs * 2 <= RoundUp(s.batch, 2) &&
             SmemBytes(lh, lw, 2 * t.pairs) <= kSmemTarget) {
        t.pairs *= 2;
      }
      t.batch_groups = static_cast<int>(CeilDiv(s.batch, 2 * t.pairs));
      t.row_pitch = fft_fused::RowPitch(lw);
      t.pair_stride = fft_fused::PairStride(lh, lw, t.pairs, false);
      t.smem_bytes = SmemBytes(lh, lw, t.pairs);
      t.ctas = s.out_channels * int64_t{t.tiles_h} * t.tiles_w * t.batch_groups;
      t.flops = TilingFlops(s, t, /*pruned=*/true);
      if (t.smem_bytes > static_cast<int64_t>(fft_fused::kMaxSmemBytes)) continue;
      // Ranked by the flops of whole tiles (every row transformed), as before the row skip:
      // counting the skipped rows tips near ties (< 1%) toward larger tiles, whose fewer CTAs
      // an SM cost more than that (the model has no occupancy term; PERF.md round 92).
      const double rank = TilingFlops(s, t, /*pruned=*/false);
      if (rank < best_flops) best = t, best_flops = rank;
    }
  }
  if (best.pairs == 0) {
    return absl::UnimplementedError("fft_depthwise: no tile of up to 128 holds the kernel");
  }
  if (best.ctas > std::numeric_limits<int32_t>::max()) {
    return absl::OutOfRangeError("fft_depthwise: more than 2^31 - 1 CTAs");
  }
  return best;
}

namespace {

struct Params {
  int batch, in_channels, out_channels, multiplier;
  int h, w, kh, kw, pt, pl, oh, ow;
  int log2_th, log2_tw, step_h, step_w, tiles_h, tiles_w, tiles, pairs, batch_groups;
  int row_pitch, pair_stride;
  FastDiv by_step_w, by_step_h;
  RowSpan top_rows, bottom_rows, all_rows;  // the forward row pass's (ForwardRows)
};

// What fft_fused's passes need of their KernelParams: the tile, the pairs, the row pitch.
__device__ fft_fused::KernelParams FftParams(const Params& p) {
  fft_fused::KernelParams k{};
  k.log2_th = p.log2_th;
  k.log2_tw = p.log2_tw;
  k.pairs = p.pairs;
  k.row_pitch = p.row_pitch;
  return k;
}

// The CTA's view for fft_fused's passes: its shared memory, its threads, its barrier.
struct Ctx {
  Cf* data;
  const Cf* tw;
  __device__ Cf Ld(int i) const { return data[i]; }
  __device__ void St(int i, Cf v) const { data[i] = v; }
  __device__ Cf Tw(int k) const { return tw[k]; }
  template <class F>
  __device__ void ForEach(int n, F&& f) const {
    for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) f(i);
  }
  __device__ void Sync(const char*) const { __syncthreads(); }
};

struct Smem {
  Cf* tw;
  float* energy;  // [kMaxPairs]: sum |z|^2 of each pair's tile
  float* est;     // [kMaxPairs]: the guard's error estimate of each pair
  float* floor;   // [kMaxPairs]: the guard's absolute bar of each pair
  Cf* data;
};
__device__ Smem CarveSmem() {
  extern __shared__ float4 smem4[];
  Smem m;
  m.tw = reinterpret_cast<Cf*>(smem4);
  m.energy = reinterpret_cast<float*>(m.tw + kTwiddles);
  m.est = m.energy + kMaxPairs;
  m.floor = m.est + kMaxPairs;
  m.data = reinterpret_cast<Cf*>(m.floor + kMaxPairs);
  return m;
}

// The twiddle table, and the pairs' energies zeroed.
__device__ void Setup(const Smem& m, int pairs) {
  for (int i = static_cast<int>(threadIdx.x); i < kTwiddles; i += kThreads) {
    m.tw[i] = fft_fused::Twiddle128(i);
  }
  if (static_cast<int>(threadIdx.x) < pairs) m.energy[threadIdx.x] = 0.0f;
  __syncthreads();
}

// Adds this thread's v to *total, one shared atomic per warp. Every lane of the warp calls it.
__device__ void WarpAddTo(float* total, float v) {
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
  if ((threadIdx.x & 31) == 0) atomicAdd(total, v);
}

// Filter o (Cout of them, one per CTA) zero-padded to the tile, transformed, written in natural
// order times 1 / (Th Tw) to spectra[o][k0 * Tw + k1]; its energy to energies[o].
__global__ void __launch_bounds__(kThreads) FilterKernel(const float* __restrict__ w,
                                                         Cf* __restrict__ spectra,
                                                         float* __restrict__ energies, Params p) {
  const Smem m = CarveSmem();
  Setup(m, 1);
  const int o = static_cast<int>(blockIdx.x);
  const int th = 1 << p.log2_th, tw = 1 << p.log2_tw, n = th * tw;
  fft_fused::KernelParams k = FftParams(p);
  k.pairs = 1;
  const int stride = fft_fused::PairStride(p.log2_th, p.log2_tw, 1, false);
  const Ctx ctx{m.data, m.tw};
  float e = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) {  // n % 32 == 0
    const int u = i >> p.log2_tw, v = i & (tw - 1);
    const float value = u < p.kh && v < p.kw ? w[(static_cast<int64_t>(o) * p.kh + u) * p.kw + v]
                                             : 0.0f;
    m.data[Addr(stride, p.row_pitch, 0, u, v)] = MakeCf(value, 0.0f);
    e = fmaf(value, value, e);
  }
  WarpAddTo(m.energy, e);
  __syncthreads();
  fft_fused::RowFft<false>(ctx, k, stride, th);
  fft_fused::ColumnFft<false, false>(ctx, k, stride, tw);
  const float scale = 1.0f / static_cast<float>(n);  // a power of two: exact
  Cf* out = spectra + static_cast<int64_t>(o) * n;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) {
    const int k0 = i >> p.log2_tw, k1 = i & (tw - 1);
    const Cf z = m.data[Addr(stride, p.row_pitch, 0, BitReverse(k0, p.log2_th),
                             BitReverse(k1, p.log2_tw))];
    out[i] = MakeCf(z.x * scale, z.y * scale);
  }
  if (threadIdx.x == 0) energies[o] = m.energy[0];
}

// An output by direct summation in fp32, taps in row-major order, padding taps multiplied.
__device__ float DirectOutput(const float* __restrict__ plane, const float* __restrict__ filter,
                              const Params& p, int oy, int ox) {
  float acc = 0.0f;
  for (int kp = 0; kp < p.kh; ++kp) {
    const int gy = oy - p.pt + kp;
    const bool row_in = gy >= 0 && gy < p.h;
    for (int kq = 0; kq < p.kw; ++kq) {
      const int gx = ox - p.pl + kq;
      const float xv = row_in && gx >= 0 && gx < p.w ? plane[gy * p.w + gx] : 0.0f;
      acc = fmaf(xv, filter[kp * p.kw + kq], acc);
    }
  }
  return acc;
}

// Pinned tiles (log2 Th, log2 Tw, pairs): the networks' 31x31 (64x64, one pair) and 13x13
// (32x32, four pairs). Their kernels take those fields as compile-time constants, so the
// passes' shifts, masks and trip counts fold into immediates (as fft_fused's pinned kernels);
// the values are the same as the run-time ones (KernelFor picks a pinned kernel only then).
// min_ctas: the kernel's __launch_bounds__ occupancy (0: ptxas's own choice). At 64x64 six CTAs
// fit an SM's shared memory, and ptxas fits them in 40 registers with no spill (56-57
// unbounded: four CTAs, 0.304 ms against 0.281 at 31x31; five CTAs 0.287; PERF.md round 92).
struct Pin {
  int log2_th, log2_tw, pairs, min_ctas;
};
constexpr Pin kPins[] = {{6, 6, 1, 6}, {5, 5, 4, 0}};

template <int kPin>
__device__ Params Pinned(Params p) {
  if constexpr (kPin >= 0) {
    constexpr Pin t = kPins[kPin];
    p.log2_th = t.log2_th;
    p.log2_tw = t.log2_tw;
    p.pairs = t.pairs;
    p.row_pitch = fft_fused::RowPitch(t.log2_tw);
    p.pair_stride = fft_fused::PairStride(t.log2_th, t.log2_tw, t.pairs, false);
  }
  return p;
}

template <int kPin>
__global__ void __launch_bounds__(kThreads, kPin >= 0 ? kPins[kPin].min_ctas : 0)
    MainKernel(const float* __restrict__ x, const float* __restrict__ w,
               const Cf* __restrict__ spectra, const float* __restrict__ energies,
               const float* __restrict__ bias, float* __restrict__ y, Params params) {
  const Params p = Pinned<kPin>(params);
  const Smem m = CarveSmem();
  Setup(m, p.pairs);
  const int th = 1 << p.log2_th, tw = 1 << p.log2_tw, n = th * tw;
  // Consecutive CTAs share the filter (its spectrum stays in L2) and the tile position.
  int cta = static_cast<int>(blockIdx.x);
  const int bg = cta % p.batch_groups;
  cta /= p.batch_groups;
  const int tile = cta % p.tiles, o = cta / p.tiles;
  const int tile_y = tile / p.tiles_w, tile_x = tile - tile_y * p.tiles_w;
  const float w_energy = energies[o];
  const int oy0 = tile_y * p.step_h, ox0 = tile_x * p.step_w;
  const int iy0 = oy0 - p.pt, ix0 = ox0 - p.pl;
  const int c = o / p.multiplier;
  const int b0 = bg * 2 * p.pairs;
  auto plane_of = [&](int b) {
    return x + (static_cast<int64_t>(b) * p.in_channels + c) * p.h * p.w;
  };

  // z = x_a + i x_b over the whole input tile, zero outside the image; each pair's energy.
  for (int pp = 0; pp < p.pairs; ++pp) {
    const int ba = b0 + 2 * pp, bb = ba + 1;
    const float* xa = plane_of(ba < p.batch ? ba : 0);
    const float* xb = plane_of(bb < p.batch ? bb : 0);
    float e = 0.0f;
#pragma unroll 4
    for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) {  // n % 32 == 0
      const int u = i >> p.log2_tw, v = i & (tw - 1);
      const int gy = iy0 + u, gx = ix0 + v;
      const bool in = gy >= 0 && gy < p.h && gx >= 0 && gx < p.w;
      const int at = gy * p.w + gx;
      const float a = in && ba < p.batch ? __ldg(xa + at) : 0.0f;
      const float b = in && bb < p.batch ? __ldg(xb + at) : 0.0f;
      m.data[Addr(p.pair_stride, p.row_pitch, pp, u, v)] = MakeCf(a, b);
      e = fmaf(a, a, fmaf(b, b, e));
    }
    WarpAddTo(m.energy + pp, e);
  }
  __syncthreads();

  // The guard's terms per pair (the header comment): est and the bar's absolute part, read
  // after the transforms' barriers.
  const float w_norm = sqrtf(w_energy), w_rms = sqrtf(w_energy / (p.kh * p.kw));
  if (static_cast<int>(threadIdx.x) < p.pairs) {
    const float u = 5.9604645e-8f;  // 2^-24
    const float growth = kGuardFactor * u * sqrtf(static_cast<float>(p.log2_th + p.log2_tw));
    const float energy = m.energy[threadIdx.x];
    m.est[threadIdx.x] = growth * sqrtf(energy / n) * w_norm;
    m.floor[threadIdx.x] = 1e-3f * fminf(1.0f, sqrtf(energy / (2 * n)) * w_rms);
  }

  const fft_fused::KernelParams k = FftParams(p);
  const Ctx ctx{m.data, m.tw};
  // Rows outside the image are zero and stay zero through the row pass: the first and last tile
  // rows skip theirs (ForwardRows); a middle one that reaches past the image (padding wider
  // than a step) transforms its zero rows too.
  const RowSpan rows = tile_y == 0                 ? p.top_rows
                       : tile_y == p.tiles_h - 1 ? p.bottom_rows
                                                 : p.all_rows;
  fft_fused::RowFft<false>(ctx, k, p.pair_stride, rows);
  fft_fused::ColumnFft<false, false>(ctx, k, p.pair_stride, tw);

  // V = conj(Z) W in natural order. Element (u, v) holds Z at (bitrev u, bitrev v) and the
  // partner (bitrev u, bitrev v) holds Z at (u, v): one item takes both (the lower index).
  const Cf* spectrum = spectra + static_cast<int64_t>(o) * n;
  ctx.ForEach(n, [&](int i) {
    const int u = i >> p.log2_tw, v = i & (tw - 1);
    const int ru = BitReverse(u, p.log2_th), rv = BitReverse(v, p.log2_tw);
    const int j = (ru << p.log2_tw) | rv;
    if (j < i) return;
    const Cf wj = __ldg(spectrum + j), wi = __ldg(spectrum + i);
    auto conj_mul = [](Cf z, Cf f) {
      return MakeCf(z.x * f.x + z.y * f.y, z.x * f.y - z.y * f.x);
    };
    for (int pp = 0; pp < p.pairs; ++pp) {
      const int ai = Addr(p.pair_stride, p.row_pitch, pp, u, v);
      const int aj = Addr(p.pair_stride, p.row_pitch, pp, ru, rv);
      const Cf zi = m.data[ai], zj = m.data[aj];  // Z[ru, rv] and Z[u, v]
      m.data[aj] = conj_mul(zi, wj);
      m.data[ai] = conj_mul(zj, wi);
    }
  });
  __syncthreads();
  fft_fused::RowFft<false>(ctx, k, p.pair_stride, th);
  // Only the columns holding outputs j < min(step_w, ow - ox0); they sit at bit-reversed
  // positions.
  fft_fused::ColumnFft<true, false>(ctx, k, p.pair_stride, min(p.step_w, p.ow - ox0));

  const float* filter = w + static_cast<int64_t>(o) * p.kh * p.kw;
  const float add = bias != nullptr ? bias[o] : 0.0f;
  const int per_pair = 2 * p.step_h * p.step_w;
  ctx.ForEach(p.pairs * per_pair, [&](int it) {
    int j, rest, i, pg;
    p.by_step_w.DivMod(it, &rest, &j);
    p.by_step_h.DivMod(rest, &pg, &i);
    const int pp = pg >> 1, g = pg & 1;
    const int oy = oy0 + i, ox = ox0 + j, b = b0 + pg;
    if (oy >= p.oh || ox >= p.ow || b >= p.batch) return;
    const Cf z = m.data[Addr(p.pair_stride, p.row_pitch, pp, BitReverse(i, p.log2_th),
                             BitReverse(j, p.log2_tw))];
    float value = g ? -z.y : z.x;
    const float est = m.est[pp], floor = m.floor[pp];
    const float a = fabsf(value);
    if (!(a <= 3.0e38f && est <= floor + 1e-3f * (a - est))) {
      value = DirectOutput(plane_of(b), filter, p, oy, ox);
    }
    y[((static_cast<int64_t>(b) * p.out_channels + o) * p.oh + oy) * p.ow + ox] = value + add;
  });
}

using MainKernelFn = void (*)(const float*, const float*, const Cf*, const float*, const float*,
                             float*, Params);
// The pinned kernel whose constants are this tiling's, else the generic one.
MainKernelFn KernelFor(const Tiling& t) {
  for (int i = 0; i < 2; ++i) {
    if (t.log2_th == kPins[i].log2_th && t.log2_tw == kPins[i].log2_tw &&
        t.pairs == kPins[i].pairs) {
      return i == 0 ? &MainKernel<0> : &MainKernel<1>;
    }
  }
  return &MainKernel<-1>;
}

struct Config {
  Tiling tiling;
  Params params;
  size_t spectra_bytes = 0, workspace_bytes = 0;
};

class FftDepthwiseRunner : public Runner {
 public:
  explicit FftDepthwiseRunner(const Shape& s, const Config& c) : s_(s), c_(c) {}
  size_t workspace_bytes() const override { return c_.workspace_bytes; }
  bool adds_bias() const override { return true; }
  absl::Status Run(const RunArgs& a) const override {
    // The caller's workspace needs no alignment (conv.h): workspace_bytes() holds the slack.
    const uintptr_t at = reinterpret_cast<uintptr_t>(a.workspace);
    char* base = reinterpret_cast<char*>((at + kWorkspaceAlign - 1) / kWorkspaceAlign *
                                         kWorkspaceAlign);
    auto* spectra = reinterpret_cast<Cf*>(base);
    auto* energies = reinterpret_cast<float*>(base + c_.spectra_bytes);
    const Tiling& t = c_.tiling;
    RETURN_IF_ERROR(CudaStatus(
        LaunchPdl(/*pdl=*/false, FilterKernel, static_cast<unsigned>(s_.out_channels), kThreads,
                  static_cast<size_t>(SmemBytes(t.log2_th, t.log2_tw, 1)), a.stream, a.w,
                  spectra, energies, c_.params),
        "fft_depthwise filter kernel launch"));
    return CudaStatus(
        LaunchPdl(/*pdl=*/false, KernelFor(t), static_cast<unsigned>(t.ctas), kThreads,
                  static_cast<size_t>(t.smem_bytes), a.stream, a.x, a.w, spectra, energies,
                  s_.has_bias ? a.bias : nullptr, a.y, c_.params),
        "fft_depthwise kernel launch");
  }
  bool records_launches() const override { return true; }

 private:
  Shape s_;
  Config c_;
};

class FftDepthwise : public AlgorithmWithConfig<Config> {
 public:
  std::string name() const override { return "fft_depthwise"; }
  // Fitted by tools/fit_auto.py to the nets suite's 14 stride-1 depthwise layers (round 88,
  // docs/data/round88_nets_dw.json: measured over modelled 1.03x to 1.79x, 1.09x at 31x31).
  double calibration() const override { return 1.27; }
  Geometry geometry() const override { return Geometry{true, false, false, true}; }

 protected:
  // The time: the transforms' flops at 12 TFLOP/s (shared-memory bound FFTs), or the input
  // tiles' reads (from L2 after the first), the output and the filter spectra at 3 TB/s,
  // whichever is longer, plus 3 us for each of the two launches.
  absl::StatusOr<Config> Choose(const Shape& s, const DeviceInfo& device,
                                double* seconds) const override {
    ASSIGN_OR_RETURN(const Tiling t, TilingFor(s));
    if (t.smem_bytes > static_cast<int64_t>(device.shared_memory_per_block_optin)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "fft_depthwise: the tile needs ", t.smem_bytes, " bytes of shared memory"));
    }
    Config c;
    c.tiling = t;
    Params& p = c.params;
    p.batch = static_cast<int>(s.batch);
    p.in_channels = static_cast<int>(s.in_channels);
    p.out_channels = static_cast<int>(s.out_channels);
    p.multiplier = static_cast<int>(s.out_per_group());
    p.h = static_cast<int>(s.height);
    p.w = static_cast<int>(s.width);
    p.kh = static_cast<int>(s.kernel_h);
    p.kw = static_cast<int>(s.kernel_w);
    p.pt = static_cast<int>(s.pad_top);
    p.pl = static_cast<int>(s.pad_left);
    p.oh = static_cast<int>(s.out_h());
    p.ow = static_cast<int>(s.out_w());
    p.log2_th = t.log2_th;
    p.log2_tw = t.log2_tw;
    p.step_h = t.step_h;
    p.step_w = t.step_w;
    p.tiles_h = t.tiles_h;
    p.tiles_w = t.tiles_w;
    p.tiles = t.tiles_h * t.tiles_w;
    p.top_rows = SpanOf(ForwardRows(s, t, 0));
    p.bottom_rows = SpanOf(ForwardRows(s, t, t.tiles_h - 1));
    p.all_rows = SpanOf(RowRange{0, 1 << t.log2_th});
    p.pairs = t.pairs;
    p.batch_groups = t.batch_groups;
    p.row_pitch = t.row_pitch;
    p.pair_stride = t.pair_stride;
    p.by_step_w = FastDiv(static_cast<uint32_t>(t.step_w));
    p.by_step_h = FastDiv(static_cast<uint32_t>(t.step_h));
    const int64_t n = int64_t{1} << (t.log2_th + t.log2_tw);
    c.spectra_bytes = static_cast<size_t>(RoundUp(s.out_channels * n * 8, 256));
    c.workspace_bytes = c.spectra_bytes + static_cast<size_t>(RoundUp(4 * s.out_channels, 256)) +
                        kWorkspaceAlign;
    const double bytes = 4.0 * (s.input_elements() + s.output_elements()) +
                         static_cast<double>(t.ctas) * n * 8.0;
    *seconds = std::max(t.flops / 12e12, bytes / 3e12) + 6e-6;
    return c;
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const Config& c,
                                                const DeviceInfo& device) const override {
    const int optin = static_cast<int>(device.shared_memory_per_block_optin);
    const int64_t filter_smem = SmemBytes(c.tiling.log2_th, c.tiling.log2_tw, 1);
    if (c.tiling.smem_bytes > optin || filter_smem > optin) {
      return absl::FailedPreconditionError(absl::StrCat(
          "fft_depthwise: needs ", std::max<int64_t>(c.tiling.smem_bytes, filter_smem),
          " bytes of shared memory, the device allows ", optin));
    }
    RETURN_IF_ERROR(AllowOptinSmem(reinterpret_cast<const void*>(KernelFor(c.tiling)), optin,
                                   "fft_depthwise: cudaFuncSetAttribute (shared memory size)"));
    RETURN_IF_ERROR(AllowOptinSmem(reinterpret_cast<const void*>(&FilterKernel), optin,
                                   "fft_depthwise: cudaFuncSetAttribute (filter kernel)"));
    return std::unique_ptr<Runner>(new FftDepthwiseRunner(s, c));
  }
};

}  // namespace
}  // namespace fft_depthwise

std::unique_ptr<Algorithm> MakeFftDepthwise() {
  return std::make_unique<fft_depthwise::FftDepthwise>();
}

}  // namespace conv2d
