// fft_tiled internals: tile geometry, the cost model that picks the tile size, the workspace
// layout, the exact cuFFT and cuBLAS layout parameters, and the per-element index algebra of the
// three small kernels. Plain C++ (no CUDA types), so that CPU tests check the arithmetic and
// emulate the whole pipeline with the very numbers fft_tiled.cu hands to cuFFT and cuBLAS.
//
// The algorithm (overlap-save, cross-correlation in the frequency domain):
//   Tile m = (b, ti, tj) of the output owns output rows [ti*Sh, ti*Sh + Sh) and columns
//   [tj*Sw, tj*Sw + Sw) (clipped to the output), where Sh = Th - Kh + 1, Sw = Tw - Kw + 1, and
//   reads the Th x Tw input window whose top-left corner is (ti*Sh, tj*Sw), zero past the image.
//   Let t be that window of channel c, wp the filter (o, c) zero-padded to Th x Tw (taps at
//   [0,Kh) x [0,Kw)), and DFT the unnormalised 2D transform (cuFFT's forward sign, e^-2pi i).
//   Circular cross-correlation z[i,j] = sum_{p,q} wp[p,q] * t[(i+p) mod Th, (j+q) mod Tw] has
//       DFT(z)[k] = sum_p wp[p] sum_i t[i+p] e^{-2pi i k.i/T}
//                 = sum_p wp[p] e^{+2pi i k.p/T} DFT(t)[k] = conj(DFT(wp)[k]) * DFT(t)[k]
//   (wp real). For i <= Th-Kh and j <= Tw-Kw no index wraps, so z[i,j] is exactly the linear
//   cross-correlation y[b, o, ti*Sh + i, tj*Sw + j] (summed over c): keep i < Sh, j < Sw, at
//   offset 0 of the tile. Summing over c happens per frequency f as a complex GEMM,
//       Y_f[m, o] = sum_c X_f[m, c] * conj(W_f[o, c]),
//   and y = C2R(Y) / (Th*Tw) (cuFFT's inverse is unnormalised).
//
// Buffers (element orders; n is the transform index, f = k0*(Tw/2+1) + k1 the frequency index):
//   filter tiles   [Cin][Cout][Th][Tw] real, n = c*Cout + o
//   input tiles    [Cin][M][Th][Tw]    real, n = c*M + m
//   output tiles   [Cout][M][Th][Tw]   real, n = o*M + m
//   spectra        element f of transform n at f*N + n (N = number of transforms), i.e.
//                  frequency-major, which cuFFT writes directly with ostride = N, odist = 1:
//   filter spectrum [F][Cin][Cout], input spectrum [F][Cin][M], output spectrum [F][Cout][M].
#ifndef CONV2D_CONV_FFT_TILED_INTERNAL_H_
#define CONV2D_CONV_FFT_TILED_INTERNAL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "conv/core/algorithm.h"
#include "conv/arch/host_device.h"
#include "conv/arch/int_math.h"
#include "conv/shape.h"

namespace conv2d {
namespace fft_tiled {

// Choices that the registered "fft_tiled" leaves at their defaults; tests set them to cover
// every tile size and both precision options.
struct Options {
  // FFT tile height and width; 0 lets the cost model choose. A forced size must be >= 2 and >=
  // the kernel size in its dimension.
  int64_t tile_h = 0;
  int64_t tile_w = 0;
  // Transform the filter in fp64 (D2Z) and round its spectrum to fp32: the filter spectrum's
  // large low-frequency values then carry no transform error. Costs twice the filter traffic.
  bool filter_fp64 = false;
  // Channel mix with Gauss's 3-multiplication complex GEMM (cublasCgemm3mStridedBatched): 25%
  // fewer real products, normwise stable (Higham 1992).
  bool gemm_3m = false;
  // Channel mix on the tensor cores in split precision (CgemmConjBatched3xTf32, 3xTF32 with
  // fp32 accumulation: fp32-level error) instead of cuBLAS's fp32 SIMT CGEMM. Takes precedence
  // over gemm_3m; no cuBLAS handle is created. The cost model does not model it yet.
  bool gemm_3xtf32 = false;
};

// Limits. Every workspace buffer stays below 2 GiB, so every element index, cuFFT parameter and
// grid size fits in 32-bit int.
constexpr size_t kTargetWorkspaceBytes = size_t{1} << 30;  // what the tile choice aims for
constexpr size_t kMaxWorkspaceBytes = size_t{1} << 31;     // CanImplement's hard limit
constexpr size_t kAlignment = 256;                          // of every buffer (cuFFT, cuBLAS)
// cuBLAS's workspace (its documented recommendation for a user workspace is >= 4 MiB).
constexpr size_t kBlasWorkspaceBytes = size_t{4} << 20;

// Workspace byte counts, shared by the two FFT planners (fft_tiled, fft_fused). They saturate at
// kSaturatedBytes instead of wrapping: an absurd shape's count then stays absurd and the
// workspace limit refuses it, where a wrapped one could pass. Every operand is <= 2^62, so the
// sums below cannot overflow before they saturate.
constexpr uint64_t kSaturatedBytes = uint64_t{1} << 62;
// The product of non-negative factors.
inline uint64_t SaturatingMul(std::initializer_list<int64_t> factors) {
  uint64_t p = 1;
  for (int64_t f : factors) {
    const uint64_t u = static_cast<uint64_t>(f);
    if (u != 0 && p > kSaturatedBytes / u) return kSaturatedBytes;
    p *= u;
  }
  return p;
}
inline uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return std::min(a + b, kSaturatedBytes); }
// Rounded up to kAlignment.
inline uint64_t SaturatingAlign(uint64_t bytes) {
  if (bytes >= kSaturatedBytes) return kSaturatedBytes;
  return static_cast<uint64_t>(RoundUp(static_cast<int64_t>(bytes), kAlignment));
}

struct Geometry {
  int64_t tile_h = 0, tile_w = 0;    // Th, Tw: the FFT size
  int64_t step_h = 0, step_w = 0;    // Sh = Th - Kh + 1, Sw = Tw - Kw + 1: output per tile
  int64_t tiles_h = 0, tiles_w = 0;  // ceil(OH / Sh), ceil(OW / Sw)
  int64_t tiles = 0;                 // M = batch * tiles_h * tiles_w: the GEMM's m
  int64_t freqs = 0;                 // F = Th * (Tw/2 + 1): the GEMM batch
  int64_t tile_elements() const { return tile_h * tile_w; }
};

// InvalidArgument unless 2 <= tile_h, kernel_h <= tile_h (same for w).
absl::StatusOr<Geometry> MakeGeometry(const Shape& shape, int64_t tile_h, int64_t tile_w);

// The tile search of both FFT planners (ChooseConfig here and in fft_fused). The (tile_h, tile_w)
// pairs to try: in each dimension the forced size, if the options force one (> 0), else
// candidates(kernel, extent), rows outer. The extent is the padded image's (the tiles cover it:
// fft_fused takes padding), the image itself when unpadded.
template <class Candidates>
std::vector<std::pair<int64_t, int64_t>> TilePairs(const Shape& s, int64_t tile_h, int64_t tile_w,
                                                   Candidates candidates) {
  const std::vector<int64_t> hs =
      tile_h > 0 ? std::vector<int64_t>{tile_h}
                 : candidates(s.kernel_h, s.height + s.pad_top + s.pad_bottom);
  const std::vector<int64_t> ws =
      tile_w > 0 ? std::vector<int64_t>{tile_w}
                 : candidates(s.kernel_w, s.width + s.pad_left + s.pad_right);
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t th : hs) {
    for (int64_t tw : ws) pairs.push_back({th, tw});
  }
  return pairs;
}
// Among the configurations offered, the cheapest by the model whose workspace is within
// kTargetWorkspaceBytes, and the one with the smallest workspace (what a shape gets when none
// fits, if it is within the hard limit). Earlier offers win ties.
template <class Config>
struct TileChoice {
  bool have_fit = false, have_any = false;
  Config best_fit, smallest;
  void Offer(const Config& c) {
    if (c.workspace.total_bytes <= kTargetWorkspaceBytes &&
        (!have_fit || c.cost.seconds < best_fit.cost.seconds)) {
      best_fit = c;
      have_fit = true;
    }
    if (!have_any || c.workspace.total_bytes < smallest.workspace.total_bytes) {
      smallest = c;
      have_any = true;
    }
  }
};

// Tile sizes the model considers in one dimension: n = 2^a or 3 * 2^a (cuFFT's fastest radices;
// 5 and 7 are supported by cuFFT but slower and would tempt the model with odd sizes like 56),
// from max(kernel, 2) up to the first such n >= max(extent, 2) (a tile larger than the image
// gains nothing). Ascending.
std::vector<int64_t> TileSizeCandidates(int64_t kernel, int64_t extent);

// The workspace: which buffer lives where, and when.
enum Buffer {
  kFilterTiles,       // written by kPadFilter, read by kFilterForward (float, or double if fp64)
  kFilterSpectrum64,  // fp64 only: D2Z output, read by kFilterRound
  kFilterSpectrum,    // complex float, read by kMix
  kInputTiles,
  kInputSpectrum,
  kOutputSpectrum,
  kOutputTiles,
  kFftWork,   // cuFFT's work area, shared by the plans (they run one after the other)
  kBlasWork,  // cuBLAS's workspace
  kNumBuffers,
};
// The steps of Run, in stream order.
enum Step {
  kPadFilter,
  kFilterForward,
  kFilterRound,  // fp64 only
  kGather,
  kInputForward,
  kMix,
  kInverse,
  kCrop,
  kNumSteps,
};
const char* BufferName(Buffer buffer);
// [first, last] steps during which `buffer` holds live data (written at first, last read at
// last); {-1, -1} if the buffer is unused. Two buffers may share bytes only if these ranges are
// disjoint.
struct Liveness {
  int first = -1, last = -1;
};
Liveness BufferLiveness(Buffer buffer, const Options& options);

struct WorkspaceLayout {
  // Byte offsets from the workspace base rounded up to kAlignment, and sizes in bytes.
  size_t offset[kNumBuffers] = {};
  size_t bytes[kNumBuffers] = {};
  size_t used_bytes = 0;   // end of the last buffer, from the aligned base
  size_t total_bytes = 0;  // used_bytes + kAlignment: what Run needs from an unaligned pointer
};
// Region A holds the real inputs of the forward transforms and then the output spectrum; region
// B the spectra being mixed and then the output tiles; then cuFFT's and cuBLAS's work areas.
WorkspaceLayout MakeWorkspaceLayout(const Shape& shape, const Geometry& g, const Options& options,
                                    size_t fft_work_bytes);
// What the CPU-side model assumes for cuFFT's work area before the plans exist: the size of the
// largest forward output (room for a two-pass 2D transform's intermediate). Initialize replaces
// it with the plans' real sizes.
size_t EstimateFftWorkBytes(const Shape& shape, const Geometry& g, const Options& options);

// The cost model (see fft_tiled_plan.cc for the passes and constants).
struct Cost {
  double fft_flops = 0;
  double gemm_flops = 0;
  double bytes = 0;  // all passes over memory
  int kernels = 0;   // launches
  double seconds = 0;
};
Cost EstimateCost(const Shape& shape, const Geometry& g, const Options& options);

struct Config {
  Geometry geometry;
  WorkspaceLayout workspace;  // with EstimateFftWorkBytes
  Cost cost;
};
// The tile size (forced by options, or the cheapest by the model among those whose workspace is
// <= kTargetWorkspaceBytes, else the one with the smallest workspace) and what it costs.
// OutOfRange if the workspace exceeds kMaxWorkspaceBytes or a tensor exceeds int32 indexing;
// InvalidArgument for a bad forced tile size. Never touches the GPU.
absl::StatusOr<Config> ChooseConfig(const Shape& shape, const Options& options);

// cufftMakePlanMany's parameters for one batched 2D plan. Element (k0, k1) of transform b is at
// b*dist + (k0*embed[1] + k1)*stride, in units of the element type (real or complex).
struct FftLayout {
  int n[2] = {0, 0};
  int inembed[2] = {0, 0};
  int istride = 0, idist = 0;
  int onembed[2] = {0, 0};
  int ostride = 0, odist = 0;
  int batch = 0;
};
FftLayout FilterForwardLayout(const Shape& shape, const Geometry& g);  // R2C (or D2Z)
FftLayout InputForwardLayout(const Shape& shape, const Geometry& g);   // R2C
FftLayout InverseLayout(const Shape& shape, const Geometry& g);        // C2R

// cublasCgemmStridedBatched's parameters, column-major, transa = N, transb = C:
//   C_f (m x n) = A_f (m x k) * B_f^H, B_f stored n x k; A_f = A + f*stride_a, etc., f < batch.
// A = input spectrum (X_f[m, c] at m + c*M), B = filter spectrum (W_f[o, c] at o + c*Cout),
// C = output spectrum (Y_f[m, o] at m + o*M): Y_f[m, o] = sum_c X_f[m, c] * conj(W_f[o, c]).
struct GemmLayout {
  int m = 0, n = 0, k = 0;
  int lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int batch = 0;
};
GemmLayout ChannelMixLayout(const Shape& shape, const Geometry& g);

// Sizes passed to the kernels by value. All fit in int (ChooseConfig checked).
struct Dims {
  int batch, in_channels, out_channels, height, width, kernel_h, kernel_w, out_h, out_w;
  int tile_h, tile_w, step_h, step_w, tiles_h, tiles_w, tiles;
};
Dims MakeDims(const Shape& shape, const Geometry& g);

// The index algebra of the kernels (gather, filter padding, crop), shared with the CPU tests.
struct TileOrigin {
  int b, row, col;  // image, and the top-left input (and output) position of the tile
};
// m = (b*tiles_h + ti)*tiles_w + tj.
CONV2D_HOST_DEVICE inline TileOrigin OriginOf(const Dims& d, int m) {
  const int tj = m % d.tiles_w;
  const int rest = m / d.tiles_w;
  return TileOrigin{rest / d.tiles_h, (rest % d.tiles_h) * d.step_h, tj * d.step_w};
}
// Offset in x of tile position (u, v) of channel c, or -1 past the image (zero fill).
CONV2D_HOST_DEVICE inline int64_t InputOffset(const Dims& d, const TileOrigin& t, int c, int u,
                                              int v) {
  const int row = t.row + u, col = t.col + v;
  if (row >= d.height || col >= d.width) return -1;
  return ((static_cast<int64_t>(t.b) * d.in_channels + c) * d.height + row) * d.width + col;
}
// Offset in w of padded-filter position (u, v) of filter (o, c), or -1 in the zero padding.
CONV2D_HOST_DEVICE inline int64_t FilterOffset(const Dims& d, int o, int c, int u, int v) {
  if (u >= d.kernel_h || v >= d.kernel_w) return -1;
  return ((static_cast<int64_t>(o) * d.in_channels + c) * d.kernel_h + u) * d.kernel_w + v;
}
// Offset in y of tile position (i, j), i < step_h, j < step_w, of output channel o, or -1 past
// the output (the last tile in each dimension may overhang).
CONV2D_HOST_DEVICE inline int64_t OutputOffset(const Dims& d, const TileOrigin& t, int o, int i,
                                               int j) {
  const int row = t.row + i, col = t.col + j;
  if (row >= d.out_h || col >= d.out_w) return -1;
  return ((static_cast<int64_t>(t.b) * d.out_channels + o) * d.out_h + row) * d.out_w + col;
}

}  // namespace fft_tiled
}  // namespace conv2d

#endif  // CONV2D_CONV_FFT_TILED_INTERNAL_H_
