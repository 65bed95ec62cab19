// "pointwise_wgrad": the weight gradient of a 1x1 convolution (stride 1, no padding, no groups)
// on the CUDA cores. dw[o][c] = the sum over k = (b, pixel) of dy[b, o, pixel] * x[b, c,
// pixel]: a GEMM with a small M x N (Cout x Cin) and a long K (batch * H * W), as in
// EfficientNet's and MobileNet's expansion and projection layers on large planes (16 -> 96 at
// 112x112: 1,536 outputs of 401,408 terms each). There the tensor-core wgrad
// (implicit_gemm_wgmma) fills 16 of its tile's 128 rows, runs its three split-precision products
// on them and, past wgrad_split::kCenterK terms, reads the data once more to centre it; the
// work itself is x and dy read once (0.06 ms at 3 TB/s) and 0.6 GFMA (0.02 ms at the fp32
// peak), so plain fp32 FMAs, exact products, can run at the bytes' rate.
//
// A CTA takes one tile of dw (bp output channels x bq input channels, multiples of 8, at most
// 4096 elements: 64 x 64, or up to 128 on one side where the other is short) and one slice of
// K. It stages chunks of kChunk consecutive terms of the tile's dy and x rows in shared memory
// (a ring of kStages by cp.async, rows k-contiguous as in memory: the bytes in flight are what
// a bytes-bound kernel needs, one CTA an SM at 209 registers a thread), and each of its threads
// sums an 8 x 8 block of the tile over the columns of its k-group: the tile's
// (bp/8)*(bq/8) threads form one k-group, and the CTA's kThreads threads as many k-groups as fit
// (at most kChunk), group g taking columns g, g + groups, ... of each chunk.
//
// The sum, deterministic and within the bar whatever K: each thread sums at most
// kMaxContractReduction terms in fp32 (the slice length sees to it), the CTA's k-groups are
// added in double in group order and rounded to the slice's fp32 partial, and a second kernel
// adds the slices in double in a fixed order (wgrad_split::SumSlices) and rounds once. The tiling
// and the slices are functions of the shape alone.
#ifndef CONV2D_CONV_ALGORITHMS_POINTWISE_POINTWISE_WGRAD_H_
#define CONV2D_CONV_ALGORITHMS_POINTWISE_POINTWISE_WGRAD_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

std::unique_ptr<Algorithm> MakePointwiseWgrad();

namespace pointwise_internal {

constexpr int kThreads = 256;
constexpr int kChunk = 32;       // terms (k columns) per stage
constexpr int kPitch = kChunk + 1;  // a staged row's floats: odd, so rows fall on distinct banks
constexpr int kBlock = 8;        // a thread's block of dw: 8 x 8
constexpr int kMaxTile = 128;    // a tile's side, at most
constexpr int kMaxTileElements = 4096;  // the tile's double sums: 32 KB
constexpr int kStages = 6;              // chunks in the ring: five in flight
constexpr int kMaxStageRows = 184;      // the ring: kStages * 184 rows, 146 KB
// The CTAs the slice count aims at: four waves of one resident CTA (its registers) on each of
// 132 SMs. A constant: the split sets how dw is rounded, which must not depend on the GPU.
constexpr int64_t kTargetCtas = 2 * 2 * 132;
// A slice's chunks, at least: its partial dw (one store, one load) small against its terms.
constexpr int kMinSliceChunks = 8;

struct Tiling {
  int bp = 0, bq = 0;            // the tile: output channels x input channels
  int tiles_p = 0, tiles_q = 0;
  int tile_threads = 0;          // (bp / 8) * (bq / 8): one k-group
  int groups = 0;                // k-groups per CTA
  int64_t chunks = 0;            // ceil(K / kChunk)
  int slice_chunks = 0, slices = 0;
  int64_t ctas = 0;
  int smem_bytes = 0;
  // Terms one thread sums in fp32: at most kMaxContractReduction.
  int64_t terms_per_thread = 0;
  // The slices' fp32 partial dw (none with one slice: the CTA writes dw), plus alignment slack.
  size_t workspace_bytes(const Shape& s) const;
};

// The tiling of a pointwise wgrad shape (1x1, basic geometry, op kWgrad).
absl::StatusOr<Tiling> TilingFor(const Shape& s);
// The modelled time (seconds) of `t` on `s`.
double Seconds(const Shape& s, const Tiling& t);

}  // namespace pointwise_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_POINTWISE_POINTWISE_WGRAD_H_
