// "pointwise_wgrad": the weight gradient of 1x1 convolutions at stride 1 (no padding, dilation
// or groups) with few channels on one side, on the tensor cores through mma.sync with 3xTF32.
// There x and dy are alike, [batch][channels][pixels] over the same pixels, and
//   dw[o][c] = sum over (b, p) of dy[b, o, p] * x[b, c, p]
// is a GEMM whose two operands are both K-major already: a channel's pixels are consecutive
// floats. EfficientNet's early layers (32 -> 16 and 16 -> 96 at 112x112, 24 <-> 144 and 96 -> 24
// at 56x56) have dw of 512-3,456 elements over 100,352-401,408 terms: bytes-bound (20-60 us of
// reading x and dy at 3 TB/s), while implicit_gemm_wgmma pads dw's 16-32 rows to its 128-row tile
// and gathers 4 bytes a copy (0.06-0.20 ms; PERF.md round 107). Two CUDA-core kernels lost to it
// (rounds 104 and 107: shared-memory staging, barriers and index arithmetic per 64 FMAs).
//
// This one stages nothing. A warp owns a (16 TM) x (8 TN) tile of dw (TM m16 tiles of one
// tensor's channels, TN n8 tiles of the other's: the orientation that wastes least) and reads
// its fragments straight from global memory with 16-byte loads: for lane 4g + t, rows g and g + 8
// of each m tile and row g of each n tile, pixels 4t..4t+3 of a 16-pixel chunk, which are the
// fragments of two k8 steps once k is permuted the same way in both operands (mma_sync.cuh):
// step one takes the loads' .x and .y as k = t and t + 4, step two .z and .w. Each element is
// split into TF32 hi and lo (split_3xtf32.h) and each step issues the three products per tile.
// A CTA of kWarps warps takes one unit, (slice of K, dw tile); its warps take the slice's
// chunks in turn and fold their tensor-core sums every ChunkTerms(K) terms into fp32 totals in
// shared memory, which the CTA adds in warp order into the slice's partial dw. The split of K,
// x's centring and the slices' double sum are wgrad_split's, as for the implicit GEMMs: every
// choice here is a function of the shape alone, so that dw is the same bit for bit on every GPU
// and call.
#ifndef CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_POINTWISE_WGRAD_H_
#define CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_POINTWISE_WGRAD_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "conv/algorithms/implicit_gemm/wgrad_split.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {
namespace pointwise_wgrad_internal {

constexpr int kWarps = 4;
constexpr int kChunk = 16;  // pixels a warp reads per row and step pair
// The warp tiles compiled, (m16 tiles, n8 tiles): 32x16, 48x24, 96x16 and 64x32. The first two
// fit 168 registers (three CTAs an SM), the last two 255 (two: MinCtas in the .cu).
struct WarpTile {
  int tm, tn;
};
constexpr WarpTile kWarpTiles[] = {{2, 2}, {3, 3}, {6, 2}, {4, 4}};
constexpr int kNumWarpTiles = 4;
// The units (CTAs) a split aims for: two waves of three CTAs on each of 132 SMs. A constant, not
// the device's count: it sets how dw is rounded.
constexpr int64_t kTargetUnits = 2 * 3 * 132;

// What the shape and the choice fix.
struct Config {
  int tile = 0;           // index into kWarpTiles
  bool x_rows = false;    // x's channels on the m16 side (else dy's)
  int tiles_m = 1, tiles_n = 1;
  wgrad_split::SplitK split;  // slices of split.slice_tiles chunks
};

// Where auto may take it: layers whose narrower side has at most this many channels. Measured
// (H100, PERF.md round 110, 23 distinct 1x1 wgrads of the nets suite, each forced): faster than
// implicit_gemm_wgmma on all eight with 16-40 channels on one side (1.2-2.0x: EfficientNet's
// 32 -> 16 and 16 -> 96 at 112x112, 96 -> 24, 24 <-> 144 at 56x56, 144 -> 40 and 40 <-> 240 at
// 28x28), slower on every one with 64 or more (0.45-0.82x: ResNet's 64 -> 64 at 56x56, its
// 2048-channel 7x7s, EfficientNet's 80 -> 480 and wider), but for 240 -> 80 at 14x14 (0.020 ms
// against 0.028). The two models cannot rank them: this one is ~2.5x short of the measured time
// on the wide layers (mma.sync's issue and the splits, which it does not count), implicit_gemm_
// wgmma's wgrad ~2x short on the narrow ones (its copy warpgroup's gather, round 104); unbounded
// they took five wide layers that measured slower. Beyond the bound its proposal's estimate is
// infinite: forced runs take it, auto never does.
constexpr int64_t kMaxRankedNarrowSide = 48;

// The configuration for a 1x1 stride-1 wgrad (the caller has checked the geometry): the warp
// tile and orientation whose modelled time is least, and the split. The modelled time in
// *seconds. Device-independent.
absl::StatusOr<Config> ChooseConfig(const Shape& shape, double* seconds);

}  // namespace pointwise_wgrad_internal

std::unique_ptr<Algorithm> MakePointwiseWgrad();

}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_POINTWISE_WGRAD_H_
