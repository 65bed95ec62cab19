// "fft_depthwise": depthwise convolution (in_channels / groups = 1, any channel multiplier) with
// large kernels (RepLKNet's 31x31, 13x13 and up), by overlap-save FFT per channel: no channel
// mix at all, only a pointwise product per frequency. Direct summation costs Kh*Kw
// multiply-adds per output (961 at 31x31); the FFT a few dozen flops per output, whatever the
// kernel. Stride 1 and dilation 1, padding and the bias; kernels up to kMaxKernel a side.
//
// Its accuracy is guarded per output: the FFT's rounding error grows with the energy of the
// whole tile (an outlier or a large mean anywhere spoils every output), so each output is kept
// only if an error estimate from the tile's and the filter's energies is within the bar at that
// output's value, and is otherwise recomputed by direct summation in fp32 (fft_depthwise.cu).
#ifndef CONV2D_CONV_ALGORITHMS_FFT_FFT_DEPTHWISE_H_
#define CONV2D_CONV_ALGORITHMS_FFT_FFT_DEPTHWISE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

std::unique_ptr<Algorithm> MakeFftDepthwise();

namespace fft_depthwise {

// The largest kernel side taken: the fallback's direct sums stay within the direct-summation
// contract (63 * 63 = 3969 <= 4608 terms).
constexpr int64_t kMaxKernel = 63;

// How one shape is cut: output tiles of step_h x step_w from input tiles of 2^log2_th x 2^log2_tw
// (step = tile - kernel + 1), two output planes of one filter per complex FFT (one in the real
// part, one in the imaginary: the product with a real filter's spectrum keeps them apart), and
// `pairs` such FFTs per CTA, all of one filter and one tile position, over consecutive images.
struct Tiling {
  int log2_th = 0, log2_tw = 0;
  int step_h = 0, step_w = 0;
  int tiles_h = 0, tiles_w = 0;
  int pairs = 0;
  int batch_groups = 0;  // ceil(batch / (2 * pairs))
  int row_pitch = 0, pair_stride = 0;  // the shared-memory layout of fft_fused's FFTs
  int64_t smem_bytes = 0;              // the main kernel's dynamic shared memory
  int64_t ctas = 0;
  double flops = 0;  // the transforms and products, for the cost model
};
// The input rows of tile row ty that the main kernel's forward row pass transforms,
// [first, first + count): on the first and last tile rows those that hold image rows (the
// others are zero: the padding, or past the image), elsewhere all 2^log2_th. Empty: {0, 0}.
struct RowRange {
  int first = 0, count = 0;
};
RowRange ForwardRows(const Shape& s, const Tiling& t, int ty);

// Unimplemented outside its domain (strided, dilated, not depthwise, kernel past kMaxKernel);
// the tile with the fewest modelled flops among 32, 64 and 128 a side otherwise.
absl::StatusOr<Tiling> TilingFor(const Shape& s);

}  // namespace fft_depthwise
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_FFT_FFT_DEPTHWISE_H_
