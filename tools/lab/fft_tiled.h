// "fft_tiled": overlap-save tiled FFT convolution. The input is cut into overlapping Th x Tw
// tiles, each tile and the zero-padded filter are transformed with cuFFT (R2C), channels are
// mixed per frequency by a batched complex GEMM (cuBLAS, fp32, no TF32), and the inverse
// transform's valid part is written to y. The filter is transformed on every call. Tile size per
// shape from a cost model; workspace carved from the caller's buffer (under 1 GiB on the
// KernelBot cases, at most 2 GiB for any accepted shape). Internals: conv/fft_tiled_internal.h.
// "fft_tiled_3xtf32" is the same with the channel mix on the tensor cores in split precision
// (conv/algorithms/fft/cgemm_3xtf32.h) instead of cuBLAS.
#ifndef CONV2D_CONV_FFT_TILED_H_
#define CONV2D_CONV_FFT_TILED_H_

#include "conv/core/registry.h"

namespace conv2d {
void RegisterFftTiled(Registry& registry);
}  // namespace conv2d

#endif  // CONV2D_CONV_FFT_TILED_H_
