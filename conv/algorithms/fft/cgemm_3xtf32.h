// Batched complex GEMM with the second operand conjugated, C_f = A_f * B_f^H, on the tensor cores
// in split precision (3xTF32): every fp32 operand is split into a TF32 head and a TF32 tail and
// each real product is formed as hi*hi + hi*lo + lo*hi, summed on the tensor cores in short
// partials that fp32 adds fold into the running sums: 2.3x more accurate than cuBLAS's fp32 FMA
// CGEMM, measured (plain TF32 would miss the accuracy bar by 60-470x).
// It is the channel mix of the FFT variants, a drop-in for cublasCgemmStridedBatched(N, C).
// Plain C++ (no CUDA headers): the stream type is declared as cuda_runtime.h declares it.
#ifndef CONV2D_CONV_CGEMM_3XTF32_H_
#define CONV2D_CONV_CGEMM_3XTF32_H_

#include "absl/status/status.h"
#include "conv/algorithms/fft/cgemm_3xtf32_internal.h"  // CgemmKernel
#include "conv/algorithms/fft/fft_tiled_internal.h"

typedef struct CUstream_st* cudaStream_t;  // the same declaration as cuda_runtime.h

namespace conv2d {

// Enqueues, on `stream`, for every f < layout.batch (column-major, complex = interleaved float2,
// the exact semantics of cublasCgemmStridedBatched(N, C, alpha = 1, beta = 0)):
//   C_f (m x n) = A_f (m x k) * B_f^H, with B_f stored n x k:
//   C_f[i + j*ldc] = sum_l A_f[i + l*lda] * conj(B_f[j + l*ldb]),
//   A_f = a + f*stride_a, B_f = b + f*stride_b, C_f = c + f*stride_c (in complex elements).
// C is only written (beta = 0), every element of every C_f (i < m, j < n); nothing else.
// Requirements (InvalidArgument otherwise): m, n, k, batch >= 1; lda, ldc >= m; ldb >= n;
// strides >= 0; a, b, c non-null and 8-byte aligned (one complex float). Any m, n, k work (tails
// are masked). Not checked: C_f must not overlap any A_f or B_f, nor another C_f. Launch errors
// come back as Internal; execution errors surface on the stream, as with any kernel.
// On sm_90 the kernel is launched with programmatic dependent launch (conv/arch/pdl.cuh): it may start
// while the kernel before it on the stream runs, and waits for that kernel to complete before it
// reads or writes any memory; it lets the kernel after it start early the same way.
// The kernel (CgemmKernel): mma.sync (any device from sm_80) or wgmma (cgemm_3xtf32_sm90.cu,
// compute capability 9.0 only, else FailedPrecondition); both compute the same sums the same way.
absl::Status CgemmConjBatched3xTf32(const fft_tiled::GemmLayout& layout, const void* a,
                                    const void* b, void* c, cudaStream_t stream,
                                    CgemmKernel kernel = CgemmKernel::kAuto);

}  // namespace conv2d

#endif  // CONV2D_CONV_CGEMM_3XTF32_H_
