// The Hopper (sm_90a, wgmma) kernel of CgemmConjBatched3xTf32 (cgemm_3xtf32.h), which calls it on
// sm_90 devices. Plain C++ (no CUDA headers).
#ifndef CONV2D_CONV_CGEMM_3XTF32_SM90_H_
#define CONV2D_CONV_CGEMM_3XTF32_SM90_H_

#include "absl/status/status.h"
#include "conv/algorithms/fft/fft_tiled_internal.h"

typedef struct CUstream_st* cudaStream_t;  // the same declaration as cuda_runtime.h

namespace conv2d {

// True when the current device runs sm_90a code (compute capability 9.0). Read once.
bool CgemmSm90Supported();

// CgemmConjBatched3xTf32's contract, arguments already checked by it; needs CgemmSm90Supported().
absl::Status CgemmConjBatched3xTf32Sm90(const fft_tiled::GemmLayout& layout, const void* a,
                                       const void* b, void* c, cudaStream_t stream);

}  // namespace conv2d

#endif  // CONV2D_CONV_CGEMM_3XTF32_SM90_H_
