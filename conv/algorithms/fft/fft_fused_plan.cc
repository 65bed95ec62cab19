// fft_fused's host-side planning: tile choice, shared-memory and workspace layouts, cost model,
// kernel parameters. No CUDA: CanImplement and EstimateSeconds run on machines without a GPU.
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/fft/cgemm_3xtf32_internal.h"
#include "conv/algorithms/fft/cgemm_3xtf32_sm90_internal.h"
#include "conv/algorithms/fft/fft_fused_internal.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace fft_fused {

namespace {

using fft_tiled::kAlignment;
using fft_tiled::kBlasWorkspaceBytes;
using fft_tiled::kMaxWorkspaceBytes;
using fft_tiled::kTargetWorkspaceBytes;
using fft_tiled::SaturatingAdd;
using fft_tiled::SaturatingAlign;
using fft_tiled::SaturatingMul;

size_t SmemBytes(int pairs, int pair_stride) {
  return (sizeof(TransformMeta) + sizeof(TransformStats)) * 2 * pairs +
         sizeof(StatSlot) * StatSlotCount(CeilLog2(pairs)) + 8 * kTwiddles +
         size_t{8} * pairs * pair_stride;
}

struct SparseLayout {
  size_t x_count, x_list, w_count, w_list, x_mean, x_mean_tile, bytes;  // offsets from the start
};
// x_mean and x_mean_tile (padded shapes only) last, so that an unpadded shape's layout is what it
// always was.
SparseLayout MakeSparseLayout(const Shape& s, const Geometry& g) {
  auto align = [](uint64_t v) { return (v + 15) / 16 * 16; };
  SparseLayout l;
  const int64_t x_transforms = s.in_channels * g.tiles, filters = s.in_channels * s.out_channels;
  constexpr int64_t kEntry = sizeof(Removed);
  l.x_count = 16;  // after the flag and the call's epoch (8 bytes each)
  l.x_list = align(SaturatingAdd(l.x_count, SaturatingMul({x_transforms, 4})));
  l.w_count = align(SaturatingAdd(
      l.x_list, SaturatingMul({x_transforms, kMaxRemovedX, kEntry})));
  l.w_list = align(SaturatingAdd(l.w_count, SaturatingMul({filters, 4})));
  l.x_mean = align(SaturatingAdd(l.w_list, SaturatingMul({filters, kMaxRemovedW, kEntry})));
  l.x_mean_tile = align(SaturatingAdd(l.x_mean, SaturatingMul({x_transforms, 4})));
  l.bytes = s.padded() ? SaturatingAdd(l.x_mean_tile, SaturatingMul({g.tiles, 8})) : l.x_mean;
  return l;
}

}  // namespace

std::vector<int64_t> TileSizeCandidates(int64_t kernel, int64_t extent) {
  std::vector<int64_t> out;
  for (int l = kMinLog2Tile; l <= kMaxLog2Tile; ++l) {
    const int64_t n = int64_t{1} << l;
    if (n < kernel) continue;
    out.push_back(n);
    if (n >= extent) break;  // the first size that covers the whole image is the last useful one
  }
  return out;
}

SmemLayout MakeSmemLayout(const Geometry& g, int pairs_per_cta) {
  SmemLayout s;
  s.row_pitch = RowPitch(CeilLog2(g.tile_w));
  const int64_t pair_elements = g.tile_h * s.row_pitch;
  int pairs = pairs_per_cta;
  if (pairs <= 0) {
    pairs = 1;
    // At most 4 pairs by default: measured on the H200 (round 3), 32x32 tiles ran 0.147 ms at
    // P = 4 against 0.166 at P = 8 on (128,8,64,4); 64x64 and 32x128 tiles fit only P = 2.
    while (pairs * 2 <= kDefaultMaxPairs &&
           SmemBytes(pairs * 2, static_cast<int>(pair_elements) + 15) <= kSmemTargetBytes) {
      pairs *= 2;
    }
  }
  s.pairs = pairs;
  const int log2_th = CeilLog2(g.tile_h), log2_tw = CeilLog2(g.tile_w);
  s.pair_stride_fwd = PairStride(log2_th, log2_tw, pairs, /*inverse=*/false);
  s.pair_stride_inv = PairStride(log2_th, log2_tw, pairs, /*inverse=*/true);
  s.bytes_fwd = SmemBytes(pairs, s.pair_stride_fwd);
  s.bytes_inv = SmemBytes(pairs, s.pair_stride_inv);
  return s;
}

const char* BufferName(Buffer buffer) {
  switch (buffer) {
    case kFilterSpectrum: return "filter spectrum";
    case kInputSpectrum: return "input spectrum";
    case kOutputSpectrum: return "output spectrum";
    case kBlasWork: return "cuBLAS workspace";
    case kSparse: return "sparse lists";
    case kNumBuffers: break;
  }
  return "?";
}

size_t SparseBytes(const Shape& shape, const Geometry& g) {
  return MakeSparseLayout(shape, g).bytes;
}

SparseLists MakeSparseLists(void* base, const Shape& shape, const Geometry& g,
                            unsigned long long epoch) {
  const SparseLayout l = MakeSparseLayout(shape, g);
  char* b = static_cast<char*>(base);
  SparseLists s;
  s.flag = reinterpret_cast<unsigned long long*>(b);
  s.call_epoch = reinterpret_cast<unsigned long long*>(b + 8);  // x_count starts at 16
  s.x_count = reinterpret_cast<int*>(b + l.x_count);
  s.x_list = reinterpret_cast<Removed*>(b + l.x_list);
  s.w_count = reinterpret_cast<int*>(b + l.w_count);
  s.w_list = reinterpret_cast<Removed*>(b + l.w_list);
  s.x_mean = shape.padded() ? reinterpret_cast<float*>(b + l.x_mean) : nullptr;
  s.x_mean_tile =
      shape.padded() ? reinterpret_cast<unsigned long long*>(b + l.x_mean_tile) : nullptr;
  s.epoch = epoch;
  return s;
}

WorkspaceLayout MakeWorkspaceLayout(const Shape& s, const Geometry& g, const Options& o) {
  WorkspaceLayout w;
  w.bytes[kFilterSpectrum] = SaturatingMul({g.freqs, s.in_channels, s.out_channels, 8});
  w.bytes[kInputSpectrum] = SaturatingMul({g.freqs, s.in_channels, g.tiles, 8});
  w.bytes[kOutputSpectrum] = SaturatingMul({g.freqs, s.out_channels, g.tiles, 8});
  w.bytes[kBlasWork] = o.gemm_3xtf32 ? 0 : kBlasWorkspaceBytes;
  w.bytes[kSparse] = SparseBytes(s, g);
  uint64_t at = 0;
  for (int b = 0; b < kNumBuffers; ++b) {
    w.offset[b] = at;
    at = SaturatingAdd(at, SaturatingAlign(w.bytes[b]));
  }
  w.used_bytes = at;
  w.total_bytes = SaturatingAdd(at, kAlignment);
  return w;
}

// The cost model. Each kernel costs the largest of its DRAM time, its L2-to-SM time, its
// shared-memory time and its arithmetic time (assumed to overlap), plus kLaunchSeconds:
//   filter   DRAM: read w, write the filter spectrum
//   input    DRAM: read x once, write the input spectrum; L2: every tile window (tiles overlap)
//   inverse  DRAM: read the output spectrum, write y
// Arithmetic: 10 flops per radix-2 butterfly (one complex multiply, two complex adds) over the
// rows and columns each kernel transforms (the filter only its first 2^ceil(log2 Kh) rows, the
// inverse only its first Sw columns), two transforms per complex FFT. Shared memory: every
// pass reads and writes each element it touches once, plus the load and store phases; bank
// conflicts are not modelled (fft_fused_cpu_test measures them: <= 1.6x in any phase on the
// benchmark shapes, 1.0x in the FFT passes of the large ones).
// The channel mix is fft_tiled's model of cuBLAS CGEMM, or for gemm_3xtf32 the same bytes
// against 100 TFLOP/s of complex-GEMM work on the tensor cores (3xTF32 on mma.sync: a third of
// a TF32 rate of ~300 TFLOP/s). Constants are first guesses for an H200 (3.5 TB/s DRAM, 10 TB/s
// L2, 25 TB/s shared memory, 40 TFLOP/s fp32 SIMT), not fitted to any measurement of this
// variant.
Cost EstimateCost(const Shape& s, const Geometry& g, const SmemLayout& smem, const Options& o) {
  constexpr double kBandwidth = 3.5e12;
  constexpr double kL2Bandwidth = 10e12;
  constexpr double kSmemBandwidth = 25e12;
  constexpr double kFlopRate = 40e12;
  constexpr double kLaunchSeconds = 3e-6;
  constexpr double kGemmTile = 32;
  // The 3xTF32 mix kernels' rates in complex-GEMM flops over their padded tiles, measured on the
  // H200 (ncu, KernelBot mixes, PERF.md round 25): mma.sync 46-51 TFLOP/s, wgmma 53-55. Round 30's
  // warp-specialised wgmma kernel runs at 74-77, but with that rate here no single calibration
  // factor kept auto right on both KernelBot cases 1-2 and (1,128,128,256,3) (this model
  // underestimates the latter more); at this rate the factor absorbs the difference (round 30).
  constexpr double kMmaSyncRate = 48e12;
  constexpr double kWgmmaRate = 54e12;
  const double ci = s.in_channels, co = s.out_channels, m = g.tiles, f = g.freqs;
  const double th = g.tile_h, tw = g.tile_w;
  const int mh = CeilLog2(g.tile_h), mw = CeilLog2(g.tile_w);
  const double passes_h = mh <= 4 ? 1 : 2, passes_w = mw <= 4 ? 1 : 2;
  const double group = 2.0 * smem.pairs;
  auto pairs_for = [&](double n) { return std::ceil(n / group) * smem.pairs; };
  const double filter_rows =
      std::min<double>(g.tile_h, double(int64_t{1} << CeilLog2(s.kernel_h)));

  Cost c;
  // One kernel over `pairs` complex 2D FFTs, each transforming `rows` rows and `cols` columns;
  // `smem_elements` is its shared-memory traffic per FFT in complex elements.
  auto kernel = [&](double pairs, double rows, double cols, double smem_elements, double dram,
                    double l2) {
    const double butterflies = rows * tw / 2 * mw + cols * th / 2 * mh;
    const double flops = 10 * butterflies * pairs;
    c.fft_flops += flops;
    c.bytes += dram;
    ++c.kernels;
    return std::max({dram / kBandwidth, l2 / kL2Bandwidth,
                     8 * smem_elements * pairs / kSmemBandwidth, flops / kFlopRate}) +
           kLaunchSeconds;
  };
  // Every pass reads and writes what it transforms; the filter's first row and column stages
  // skip the zero halves (see FilterCta).
  const bool zero_right = 2 * s.kernel_w <= g.tile_w, zero_bottom = 2 * filter_rows <= th;
  const double zw = zero_right ? tw / 2 : tw, zh = zero_bottom ? th / 2 : th;
  const double filter_smem = filter_rows * zw + (zh - filter_rows) * tw +          // load
                             2 * passes_w * filter_rows * tw - filter_rows * (tw - zw) +
                             2 * passes_h * th * tw - (th - zh) * tw +            // passes
                             2 * f;                                               // store
  const double input_smem = th * tw + 2 * passes_w * th * tw + 2 * passes_h * th * tw + 2 * f;
  const double inverse_smem =
      2 * f + 2 * passes_w * th * tw + 2 * passes_h * th * g.step_w + g.step_h * g.step_w;
  c.filter_seconds = kernel(pairs_for(ci * co), filter_rows, tw, filter_smem,
                            4.0 * s.filter_elements() + 8 * f * ci * co, 0);
  c.input_seconds = kernel(pairs_for(ci * m), th, tw, input_smem,
                           4.0 * s.input_elements() + 8 * f * ci * m, 4 * ci * m * th * tw);
  c.inverse_seconds = kernel(pairs_for(co * m), th, g.step_w, inverse_smem,
                             8 * f * co * m + 4.0 * s.output_elements(), 0);
  auto quantised = [&](double x) { return x / (kGemmTile * std::ceil(x / kGemmTile)); };
  c.gemm_flops = 8.0 * m * ci * co * f;
  const double gemm_bytes = 8 * f * (ci * m + ci * co + co * m);
  c.bytes += gemm_bytes;
  ++c.kernels;
  if (o.gemm_3xtf32) {
    // The CTA tile that cgemm_3xtf32 will launch (its kAuto choice as on an H200) pads m and n: with 64-tile CTAs, 84 tiles compute as 128 (a 32 x 64 FFT tile on
    // KernelBot case 2 measured 87 us; the 32 x 128 tile gives 28 tiles, 47 us in round 14).
    const fft_tiled::GemmLayout l = fft_tiled::ChannelMixLayout(s, g);
    const bool wgmma = o.mix_kernel == CgemmKernel::kWgmma ||
                       (o.mix_kernel == CgemmKernel::kAuto && cgemm_3xtf32_sm90::AutoTakesWgmma(l));
    int bm, bn;
    if (wgmma) {
      const cgemm_3xtf32_sm90::Tile t = cgemm_3xtf32_sm90::ChooseTile(l);
      bm = t.n_cols;
      bn = t.rows;
    } else {
      const cgemm_3xtf32::Tile t = cgemm_3xtf32::ChooseTile(l);
      bm = t.bm;
      bn = t.bn;
    }
    auto padded = [](double x, double q) { return x / (q * std::ceil(x / q)); };
    c.gemm_seconds =
        std::max(gemm_bytes / kBandwidth, c.gemm_flops / ((wgmma ? kWgmmaRate : kMmaSyncRate) *
                                                          padded(m, bm) * padded(co, bn)));
  } else {
    c.gemm_seconds = std::max(gemm_bytes / kBandwidth,
                              c.gemm_flops / (kFlopRate * quantised(m) * quantised(co)));
  }
  c.gemm_seconds += kLaunchSeconds;
  c.seconds = c.filter_seconds + c.input_seconds + c.gemm_seconds + c.inverse_seconds;
  return c;
}

absl::StatusOr<Config> ChooseConfig(const Shape& s, const Options& o) {
  RETURN_IF_ERROR(ValidateShape(s));
  // Zero padding is computed (the tile loads read x at (row - pad_top, col - pad_left), zero
  // outside); the rest of the geometry beyond the basic form is not (the registered algorithm's
  // geometry() says so too, for Propose).
  if (s.strided() || s.dilated() || s.grouped()) {
    return absl::UnimplementedError(absl::StrCat(
        "fft_fused: ", s.ToString(), ": only padding is implemented beyond the basic form"));
  }
  RETURN_IF_ERROR(CheckFitsInt32(s, "fft_fused"));
  {
    // The x tiles' offsets (TransformMeta::base, plus a column v < 128 in LoadRowsItem, int)
    // run from -(pad_top * W + pad_left), a tile starting in the top-left padding, to past the
    // end of x by up to pad_bottom rows and pad_right + 128 columns, a tile starting in the
    // bottom-right padding. (Rows below a tile's origin are added as unsigned byte offsets.)
    const int64_t lo = s.pad_top * s.width + s.pad_left;
    const int64_t hi = s.input_elements() + s.pad_bottom * s.width + s.pad_right +
                       (int64_t{1} << kMaxLog2Tile);
    if (lo > std::numeric_limits<int32_t>::max() || hi > std::numeric_limits<int32_t>::max()) {
      return absl::OutOfRangeError(absl::StrCat(
          "fft_fused: shape ", s.ToString(), ": its tiles' offsets in x exceed 32-bit indexing"));
    }
  }
  const int64_t max_tile = int64_t{1} << kMaxLog2Tile;
  if (s.kernel_h > max_tile || s.kernel_w > max_tile) {
    return absl::UnimplementedError(absl::StrCat("fft_fused: kernel ", s.kernel_h, "x",
                                                 s.kernel_w, " exceeds the largest tile ",
                                                 max_tile));
  }
  for (int64_t t : {o.tile_h, o.tile_w}) {
    if (t != 0 && (!IsPow2(t) || t < (int64_t{1} << kMinLog2Tile) || t > max_tile)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fft_fused: tile size ", t, " is not a power of two in [8, 128]"));
    }
  }
  if ((o.tile_h != 0 && o.tile_h < s.kernel_h) || (o.tile_w != 0 && o.tile_w < s.kernel_w)) {
    return absl::InvalidArgumentError(absl::StrCat("fft_fused: tile ", o.tile_h, "x", o.tile_w,
                                                   " is smaller than the kernel ", s.kernel_h,
                                                   "x", s.kernel_w));
  }
  if (o.pairs_per_cta != 0 && (!IsPow2(o.pairs_per_cta) || o.pairs_per_cta > kMaxPairs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fft_fused: pairs_per_cta ", o.pairs_per_cta, " is not a power of two in [1, 16]"));
  }
  fft_tiled::TileChoice<Config> choice;
  for (const auto& [th, tw] : fft_tiled::TilePairs(s, o.tile_h, o.tile_w, TileSizeCandidates)) {
    ASSIGN_OR_RETURN(Geometry g, fft_tiled::MakeGeometry(s, th, tw));
    Config c;
    c.geometry = g;
    c.smem = MakeSmemLayout(g, o.pairs_per_cta);
    if (std::max(c.smem.bytes_fwd, c.smem.bytes_inv) > kMaxSmemBytes) continue;
    c.workspace = MakeWorkspaceLayout(s, g, o);
    c.cost = EstimateCost(s, g, c.smem, o);
    choice.Offer(c);
  }
  if (!choice.have_any) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fft_fused: ", o.pairs_per_cta, " pairs per CTA need more than ", kMaxSmemBytes,
        " bytes of shared memory"));
  }
  if (choice.have_fit) return choice.best_fit;
  const Config& smallest = choice.smallest;
  if (smallest.workspace.total_bytes > kMaxWorkspaceBytes) {
    return absl::OutOfRangeError(absl::StrCat(
        "fft_fused: shape ", s.ToString(), " needs at least ", smallest.workspace.total_bytes,
        " bytes of workspace (tile ", smallest.geometry.tile_h, "x", smallest.geometry.tile_w,
        "); the limit is ", kMaxWorkspaceBytes, " (all indices are 32-bit)"));
  }
  return smallest;
}

KernelParams MakeKernelParams(const Shape& s, const Config& c, bool inverse) {
  const Geometry& g = c.geometry;
  KernelParams k;
  k.d = fft_tiled::MakeDims(s, g);
  k.log2_th = CeilLog2(g.tile_h);
  k.log2_tw = CeilLog2(g.tile_w);
  k.pairs = c.smem.pairs;
  k.log2_pairs = CeilLog2(c.smem.pairs);
  k.row_pitch = c.smem.row_pitch;
  k.pair_stride = inverse ? c.smem.pair_stride_inv : c.smem.pair_stride_fwd;
  k.filter_row_log2 = std::min(CeilLog2(s.kernel_h), k.log2_th);
  k.n_filter = static_cast<int>(s.in_channels * s.out_channels);
  k.n_input = static_cast<int>(s.in_channels * g.tiles);
  k.n_output = static_cast<int>(s.out_channels * g.tiles);
  k.scale = static_cast<float>(1.0 / static_cast<double>(g.tile_h * g.tile_w));
  k.div_step_w = FastDiv(static_cast<uint32_t>(k.d.step_w));
  k.div_out_chunks = FastDiv(static_cast<uint32_t>((k.d.step_h + 3) / 4));
  k.pad_top = static_cast<int>(s.pad_top);
  k.pad_left = static_cast<int>(s.pad_left);
  k.padded = s.padded() ? 1 : 0;
  return k;
}

int FilterCtas(const KernelParams& k) { return static_cast<int>(CeilDiv(k.n_filter, 2 * k.pairs)); }
int InputCtas(const KernelParams& k) { return static_cast<int>(CeilDiv(k.n_input, 2 * k.pairs)); }
int InverseCtas(const KernelParams& k) {
  return static_cast<int>(CeilDiv(k.n_output, 2 * k.pairs));
}

}  // namespace fft_fused
}  // namespace conv2d
