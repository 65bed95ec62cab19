// "fft_fused": overlap-save tiled FFT convolution like fft_tiled (same tiles, same
// frequency-major spectra, same per-frequency complex GEMM on cuBLAS, fp32), with the FFTs done
// by our own shared-memory kernels fused with what surrounds them: the filter kernel reads w and
// zero-pads implicitly, the input kernel cuts the tiles straight from x, the inverse kernel
// writes only the valid outputs into y. No padded tiles in the workspace: it holds the three
// spectra and cuBLAS's work area. Tiles are powers of two from 8 to 128 (kernels up to 128).
// "fft_fused_3xtf32" is the same with the channel mix on the tensor cores in split precision
// (conv/algorithms/fft/cgemm_3xtf32.h). Internals: fft_fused_internal.h; the stages one by one:
// fft_fused_stages.h.
#ifndef CONV2D_CONV_FFT_FUSED_H_
#define CONV2D_CONV_FFT_FUSED_H_

#include <memory>

#include "conv/core/algorithm.h"

namespace conv2d {
std::unique_ptr<Algorithm> MakeFftFused();
std::unique_ptr<Algorithm> MakeFftFused3xTf32();
}  // namespace conv2d

#endif  // CONV2D_CONV_FFT_FUSED_H_
