// "fft_tiled": overlap-save tiled FFT convolution on cuFFT and cuBLAS, the baseline that
// fft_fused's own kernels are measured against. The input is cut into overlapping Th x Tw
// tiles, each tile and the zero-padded filter are transformed with cuFFT (R2C), channels are
// mixed per frequency by a batched complex GEMM (cuBLAS, fp32, no TF32), and the inverse
// transform's valid part is written to y. The filter is transformed on every call. Tile size per
// shape from the planner shared with fft_fused (conv/algorithms/fft/fft_tiled_internal.h).
// "fft_tiled_3xtf32" is the same with the channel mix on the tensor cores in split precision
// (conv/algorithms/fft/cgemm_3xtf32.h) instead of cuBLAS. Lab code: auto never needs it
// (lab_test.cc checks), so it is registered by the tools and tests (lab.h), not the library.
#ifndef CONV2D_TOOLS_LAB_FFT_TILED_H_
#define CONV2D_TOOLS_LAB_FFT_TILED_H_

#include <memory>

#include "absl/status/statusor.h"
#include "conv/algorithms/fft/fft_tiled_internal.h"
#include "conv/core/algorithm.h"

namespace conv2d {

std::unique_ptr<Algorithm> MakeFftTiled();
std::unique_ptr<Algorithm> MakeFftTiled3xTf32();

namespace fft_tiled {
// A runner with explicit options (the registered algorithm uses Options{}). Needs a GPU.
absl::StatusOr<std::unique_ptr<Runner>> CreateRunner(const Shape& shape, const Options& options);
}  // namespace fft_tiled

}  // namespace conv2d

#endif  // CONV2D_TOOLS_LAB_FFT_TILED_H_
