// The lab: algorithms kept for measurement, not shipped in libconv2d.so. The benchmark, the
// regression tool and the tests register them next to the library's own, so that they are
// timed and checked through the same registry, plan and testbed.
#ifndef CONV2D_TOOLS_LAB_LAB_H_
#define CONV2D_TOOLS_LAB_LAB_H_

#include <vector>

#include "absl/status/status.h"
#include "conv/core/algorithm.h"
#include "conv/core/registry.h"

namespace conv2d {

// fft_tiled and fft_tiled_3xtf32, the cuFFT + cuBLAS baselines of the FFT family;
// depthwise_staged and depthwise_streaming, depthwise with its kernel forced;
// implicit_gemm_wgmma_split_kernel and _split_in_kernel, implicit_gemm_wgmma with its filter
// split forced (one shape timed on both; auto never ranks them); implicit_gemm_wgmma_wgrad_gemm
// and _wgrad_im2col, implicit_gemm_wgmma with wgrad's form forced.
const std::vector<AlgorithmFactory>& LabAlgorithms();

// Adds LabAlgorithms() to `registry` (the global one by default); AlreadyExists when called
// twice on one registry.
absl::Status RegisterLabAlgorithms(Registry& registry = Registry::Global());

}  // namespace conv2d

#endif  // CONV2D_TOOLS_LAB_LAB_H_
