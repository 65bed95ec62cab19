// Batched complex GEMM with the second operand conjugated, C_f = A_f * B_f^H, on the tensor cores
// in split precision (3xTF32): every fp32 operand is split into a TF32 head and a TF32 tail and
// each real product is formed as hi*hi + hi*lo + lo*hi with fp32 accumulation, which keeps the
// error at the level of an fp32 FMA GEMM (plain TF32 would miss the accuracy bar by 60-470x).
// It is the channel mix of the FFT variants, a drop-in for cublasCgemmStridedBatched(N, C).
// Plain C++ (no CUDA headers): the stream type is declared as cuda_runtime.h declares it.
#ifndef CONV2D_CONV_CGEMM_3XTF32_H_
#define CONV2D_CONV_CGEMM_3XTF32_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "conv/fft_tiled_internal.h"
#include "conv/shape.h"

typedef struct CUstream_st* cudaStream_t;  // the same declaration as cuda_runtime.h

namespace conv2d {

// The split-precision (3xTF32) channel mix carries ~3.5x the fp32 CGEMM's error (measured,
// cgemm_3xtf32_test), which the FFT's dynamic range amplifies: on the H200, with randn inputs,
// (256,16,128,2) reached a worst ratio of 0.69 and (256,32,128,1) 1.20 (fails the bar) while
// (128,16,64,4) stayed at 0.21. So the FFT variants with this channel mix refuse reductions
// longer than this many terms (Cin*Kh*Kw), the largest measured inside the 0.6 margin.
constexpr int64_t kMax3xTf32Reduction = 64 * 16 * 16;

// Unimplemented, naming `variant` and the `alternative`, when `shape`'s reduction is beyond
// kMax3xTf32Reduction; OK otherwise.
inline absl::Status Check3xTf32Reduction(const Shape& shape, const std::string& variant,
                                         const char* alternative) {
  const int64_t reduction = shape.in_channels * shape.kernel_h * shape.kernel_w;
  if (reduction <= kMax3xTf32Reduction) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      variant, ": a reduction of ", reduction, " terms (Cin*Kh*Kw) exceeds ", kMax3xTf32Reduction,
      ", beyond which its split-precision channel mix was measured outside the accuracy margin; "
      "use ", alternative));
}


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
absl::Status CgemmConjBatched3xTf32(const fft_tiled::GemmLayout& layout, const void* a,
                                    const void* b, void* c, cudaStream_t stream);

}  // namespace conv2d

#endif  // CONV2D_CONV_CGEMM_3XTF32_H_
