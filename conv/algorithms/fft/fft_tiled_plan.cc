// fft_tiled's host-side planning: tile geometry, cost model, workspace layout, cuFFT/cuBLAS
// layout parameters. No CUDA: CanImplement and EstimateSeconds run on machines without a GPU.
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/fft/fft_tiled_internal.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace fft_tiled {

namespace {

// Forced tile sizes above this are refused outright, so that products of two sizes stay far
// from int64 overflow.
constexpr int64_t kMaxTileSize = int64_t{1} << 24;

static_assert(sizeof(size_t) == sizeof(uint64_t), "64-bit size_t expected");

}  // namespace

absl::StatusOr<Geometry> MakeGeometry(const Shape& s, int64_t tile_h, int64_t tile_w) {
  if (tile_h < 2 || tile_w < 2 || tile_h > kMaxTileSize || tile_w > kMaxTileSize) {
    return absl::InvalidArgumentError(absl::StrCat("fft_tiled: tile ", tile_h, "x", tile_w,
                                                   " outside [2, ", kMaxTileSize, "]"));
  }
  if (tile_h < s.kernel_h || tile_w < s.kernel_w) {
    return absl::InvalidArgumentError(absl::StrCat("fft_tiled: tile ", tile_h, "x", tile_w,
                                                   " is smaller than the kernel ", s.kernel_h,
                                                   "x", s.kernel_w));
  }
  Geometry g;
  g.tile_h = tile_h;
  g.tile_w = tile_w;
  g.step_h = tile_h - s.kernel_h + 1;
  g.step_w = tile_w - s.kernel_w + 1;
  g.tiles_h = CeilDiv(s.out_h(), g.step_h);
  g.tiles_w = CeilDiv(s.out_w(), g.step_w);
  // batch * tiles_h * tiles_w <= batch * out_h * out_w <= output elements <= 2^40.
  g.tiles = s.batch * g.tiles_h * g.tiles_w;
  g.freqs = tile_h * (tile_w / 2 + 1);
  return g;
}

std::vector<int64_t> TileSizeCandidates(int64_t kernel, int64_t extent) {
  std::vector<int64_t> all;
  for (int64_t r : {1, 3}) {
    for (int64_t n = r; n <= (int64_t{1} << 42); n *= 2) all.push_back(n);
  }
  std::sort(all.begin(), all.end());
  const int64_t lo = std::max<int64_t>(kernel, 2);
  const int64_t cover = std::max<int64_t>(extent, 2);
  std::vector<int64_t> out;
  for (int64_t n : all) {
    if (n < lo) continue;
    out.push_back(n);
    if (n >= cover) break;  // the first size that covers the whole image is the last useful one
  }
  return out;
}

const char* BufferName(Buffer buffer) {
  switch (buffer) {
    case kFilterTiles: return "filter tiles";
    case kFilterSpectrum64: return "filter spectrum fp64";
    case kFilterSpectrum: return "filter spectrum";
    case kInputTiles: return "input tiles";
    case kInputSpectrum: return "input spectrum";
    case kOutputSpectrum: return "output spectrum";
    case kOutputTiles: return "output tiles";
    case kFftWork: return "cuFFT work area";
    case kBlasWork: return "cuBLAS workspace";
    case kNumBuffers: break;
  }
  return "?";
}

Liveness BufferLiveness(Buffer buffer, const Options& o) {
  switch (buffer) {
    case kFilterTiles: return {kPadFilter, kFilterForward};
    case kFilterSpectrum64:
      return o.filter_fp64 ? Liveness{kFilterForward, kFilterRound} : Liveness{};
    case kFilterSpectrum: return {o.filter_fp64 ? kFilterRound : kFilterForward, kMix};
    case kInputTiles: return {kGather, kInputForward};
    case kInputSpectrum: return {kInputForward, kMix};
    case kOutputSpectrum: return {kMix, kInverse};
    case kOutputTiles: return {kInverse, kCrop};
    case kFftWork: return {kFilterForward, kInverse};
    case kBlasWork: return {kMix, kMix};
    case kNumBuffers: break;
  }
  return {};
}

WorkspaceLayout MakeWorkspaceLayout(const Shape& s, const Geometry& g, const Options& o,
                                    size_t fft_work_bytes) {
  const int64_t ci = s.in_channels, co = s.out_channels, m = g.tiles, f = g.freqs;
  const int64_t t2 = g.tile_elements();
  WorkspaceLayout w;
  size_t* bytes = w.bytes;
  bytes[kFilterTiles] = SaturatingMul({ci, co, t2, o.filter_fp64 ? 8 : 4});
  bytes[kFilterSpectrum64] = o.filter_fp64 ? SaturatingMul({f, ci, co, 16}) : 0;
  bytes[kFilterSpectrum] = SaturatingMul({f, ci, co, 8});
  bytes[kInputTiles] = SaturatingMul({ci, m, t2, 4});
  bytes[kInputSpectrum] = SaturatingMul({f, ci, m, 8});
  bytes[kOutputSpectrum] = SaturatingMul({f, co, m, 8});
  bytes[kOutputTiles] = SaturatingMul({co, m, t2, 4});
  bytes[kFftWork] = fft_work_bytes;
  bytes[kBlasWork] = kBlasWorkspaceBytes;

  // Region A: the forward transforms' real inputs (filter tiles, dead before the gather writes
  // the input tiles), then the GEMM's output.
  const uint64_t a_size =
      std::max({SaturatingAlign(bytes[kFilterTiles]), SaturatingAlign(bytes[kInputTiles]),
                SaturatingAlign(bytes[kOutputSpectrum])});
  w.offset[kFilterTiles] = w.offset[kInputTiles] = w.offset[kOutputSpectrum] = 0;
  // Region B: the filter spectrum (live until the GEMM) followed by the fp64 filter spectrum or
  // the input spectrum (one after the other); the inverse transform's output reuses all of it.
  const uint64_t b = a_size;
  const uint64_t fs = SaturatingAlign(bytes[kFilterSpectrum]);
  const uint64_t b_size = std::max(
      SaturatingAdd(fs, std::max(SaturatingAlign(bytes[kFilterSpectrum64]),
                                 SaturatingAlign(bytes[kInputSpectrum]))),
      SaturatingAlign(bytes[kOutputTiles]));
  w.offset[kFilterSpectrum] = b;
  w.offset[kFilterSpectrum64] = SaturatingAdd(b, fs);
  w.offset[kInputSpectrum] = SaturatingAdd(b, fs);
  w.offset[kOutputTiles] = b;
  w.offset[kFftWork] = SaturatingAdd(b, b_size);
  w.offset[kBlasWork] = SaturatingAdd(w.offset[kFftWork], SaturatingAlign(bytes[kFftWork]));
  w.used_bytes = SaturatingAdd(w.offset[kBlasWork], SaturatingAlign(bytes[kBlasWork]));
  w.total_bytes = SaturatingAdd(w.used_bytes, kAlignment);
  return w;
}

size_t EstimateFftWorkBytes(const Shape& s, const Geometry& g, const Options& o) {
  const int64_t ci = s.in_channels, co = s.out_channels;
  return std::max(SaturatingMul({g.freqs, ci, co, o.filter_fp64 ? 16 : 8}),
                  SaturatingMul({g.freqs, ci, g.tiles, 8}));
}

// The cost model. Each pass over memory costs max(bytes / kBandwidth, flops / rate); the sum
// over passes plus kLaunchSeconds per kernel is the estimate. Passes (fp32 filter path):
//   pad filter     read w, write the Cin*Cout padded Th x Tw filter tiles
//   filter FFT     Cin*Cout R2C transforms
//   gather         read x once (tile overlaps hit L2), write Cin*M tiles
//   input FFT      Cin*M R2C transforms
//   channel mix    F complex GEMMs M x Cout x Cin: 8*M*Cin*Cout*F flops (6 with 3m); read the two
//                  spectra and write the output spectrum; rate scaled by the tile quantisation
//                  of m and n (32-wide GEMM tiles)
//   inverse FFT    Cout*M C2R transforms
//   crop           read the Sh x Sw valid part of each output tile, write y
// A batched 2D transform is assumed to run as two passes (rows R2C into a complex intermediate,
// then columns), each reading and writing its whole array: r*T^2 + 6*r*F bytes per transform for
// r-byte reals, and 2.5*T^2*log2(T^2) flops; sizes with a factor 3 run at kRadix3Efficiency.
// Constants: H200, ~3.5 TB/s achieved bandwidth, ~40 TFLOP/s fp32 SIMT (CGEMM and butterflies).
// All of it is a first guess, to be refitted against measurements.
Cost EstimateCost(const Shape& s, const Geometry& g, const Options& o) {
  constexpr double kBandwidth = 3.5e12;
  constexpr double kFlopRate = 40e12;
  constexpr double kLaunchSeconds = 3e-6;
  constexpr double kGemmTile = 32;
  constexpr double kRadix3Efficiency = 0.8;  // a guess: cuFFT's radix-3 kernels vs radix-2
  const double ci = s.in_channels, co = s.out_channels, m = g.tiles, f = g.freqs;
  const double t2 = g.tile_elements();
  const double rf = o.filter_fp64 ? 8 : 4;
  auto fft_bytes = [&](double r) { return r * t2 + 6 * r * f; };
  const double fft_flops = 2.5 * t2 * std::log2(t2);
  auto quantised = [&](double x) { return x / (kGemmTile * std::ceil(x / kGemmTile)); };

  Cost c;
  auto pass = [&](double bytes, double flops, double efficiency = 1.0) {
    c.bytes += bytes;
    c.seconds += std::max(bytes / kBandwidth, flops / kFlopRate) / efficiency;
    ++c.kernels;
  };
  const double fft_efficiency = IsPow2(g.tile_h) && IsPow2(g.tile_w) ? 1.0 : kRadix3Efficiency;
  pass(4.0 * s.filter_elements() + rf * ci * co * t2, 0);
  pass(ci * co * fft_bytes(rf), ci * co * fft_flops, fft_efficiency);
  ++c.kernels;  // second pass of the 2D transform, counted in the bytes above
  if (o.filter_fp64) pass(ci * co * f * (16 + 8), 0);
  pass(4.0 * s.input_elements() + 4 * ci * m * t2, 0);
  pass(ci * m * fft_bytes(4), ci * m * fft_flops, fft_efficiency);
  ++c.kernels;
  const double gemm_flops = (o.gemm_3m ? 6.0 : 8.0) * m * ci * co * f;
  const double gemm_bytes = 8 * f * (ci * m + ci * co + co * m);
  c.bytes += gemm_bytes;
  c.seconds += std::max(gemm_bytes / kBandwidth,
                        gemm_flops / (kFlopRate * quantised(m) * quantised(co)));
  ++c.kernels;
  pass(co * m * fft_bytes(4), co * m * fft_flops, fft_efficiency);
  ++c.kernels;
  pass(4 * co * m * g.step_h * g.step_w + 4.0 * s.output_elements(), 0);
  c.fft_flops = (ci * co + ci * m + co * m) * fft_flops;
  c.gemm_flops = gemm_flops;
  c.seconds += c.kernels * kLaunchSeconds;
  return c;
}

absl::StatusOr<Config> ChooseConfig(const Shape& s, const Options& o) {
  RETURN_IF_ERROR(ValidateShape(s));
  RETURN_IF_ERROR(CheckFitsInt32(s, "fft_tiled"));
  TileChoice<Config> choice;
  absl::Status refused;  // the first tile MakeGeometry refused
  for (const auto& [th, tw] : TilePairs(s, o.tile_h, o.tile_w, TileSizeCandidates)) {
    // A candidate past the largest tile is skipped, not fatal: a smaller one may serve. A
    // forced tile is the only candidate, so its error still comes back below.
    absl::StatusOr<Geometry> made = MakeGeometry(s, th, tw);
    if (!made.ok()) {
      if (refused.ok()) refused = made.status();
      continue;
    }
    Config c;
    c.geometry = *made;
    c.workspace = MakeWorkspaceLayout(s, c.geometry, o, EstimateFftWorkBytes(s, c.geometry, o));
    c.cost = EstimateCost(s, c.geometry, o);
    choice.Offer(c);
  }
  if (choice.have_fit) return choice.best_fit;
  if (!choice.have_any && !refused.ok()) return refused;
  const Config& smallest = choice.smallest;
  if (!choice.have_any || smallest.workspace.total_bytes > kMaxWorkspaceBytes) {
    return absl::OutOfRangeError(absl::StrCat(
        "fft_tiled: shape ", s.ToString(), " needs at least ",
        choice.have_any ? smallest.workspace.total_bytes : 0, " bytes of workspace (tile ",
        smallest.geometry.tile_h, "x", smallest.geometry.tile_w, "); the limit is ",
        kMaxWorkspaceBytes, " (all indices are 32-bit)"));
  }
  return smallest;
}

FftLayout FilterForwardLayout(const Shape& s, const Geometry& g) {
  FftLayout l;
  const int th = static_cast<int>(g.tile_h), tw = static_cast<int>(g.tile_w);
  const int n = static_cast<int>(s.in_channels * s.out_channels);
  l.n[0] = l.inembed[0] = l.onembed[0] = th;
  l.n[1] = l.inembed[1] = tw;
  l.onembed[1] = tw / 2 + 1;
  l.istride = 1;
  l.idist = th * tw;
  l.ostride = n;  // element f of transform t at f*n + t: frequency-major
  l.odist = 1;
  l.batch = n;
  return l;
}

FftLayout InputForwardLayout(const Shape& s, const Geometry& g) {
  FftLayout l = FilterForwardLayout(s, g);
  const int n = static_cast<int>(s.in_channels * g.tiles);
  l.ostride = n;
  l.batch = n;
  return l;
}

FftLayout InverseLayout(const Shape& s, const Geometry& g) {
  FftLayout l;
  const int th = static_cast<int>(g.tile_h), tw = static_cast<int>(g.tile_w);
  const int n = static_cast<int>(s.out_channels * g.tiles);
  l.n[0] = l.inembed[0] = l.onembed[0] = th;
  l.n[1] = l.onembed[1] = tw;
  l.inembed[1] = tw / 2 + 1;
  l.istride = n;  // reads the frequency-major output spectrum
  l.idist = 1;
  l.ostride = 1;
  l.odist = th * tw;
  l.batch = n;
  return l;
}

GemmLayout ChannelMixLayout(const Shape& s, const Geometry& g) {
  GemmLayout l;
  l.m = static_cast<int>(g.tiles);
  l.n = static_cast<int>(s.out_channels);
  l.k = static_cast<int>(s.in_channels);
  l.lda = l.m;
  l.ldb = l.n;
  l.ldc = l.m;
  l.stride_a = int64_t{l.k} * l.m;
  l.stride_b = int64_t{l.k} * l.n;
  l.stride_c = int64_t{l.n} * l.m;
  l.batch = static_cast<int>(g.freqs);
  return l;
}

Dims MakeDims(const Shape& s, const Geometry& g) {
  auto i = [](int64_t v) { return static_cast<int>(v); };
  return Dims{i(s.batch),    i(s.in_channels), i(s.out_channels), i(s.height),   i(s.width),
              i(s.kernel_h), i(s.kernel_w),    i(s.out_h()),      i(s.out_w()),   i(g.tile_h),
              i(g.tile_w),   i(g.step_h),      i(g.step_w),       i(g.tiles_h),   i(g.tiles_w),
              i(g.tiles)};
}

}  // namespace fft_tiled
}  // namespace conv2d
