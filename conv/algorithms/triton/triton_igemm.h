// "triton_igemm": implicit-GEMM convolution written in Triton (conv/algorithms/triton/igemm_conv.py),
// compiled ahead of time for sm_90a by tools/triton_compile.py, embedded into the binary and
// launched through conv/triton/triton_kernel.h. 3xTF32 tensor-core products, fp32 partial sums
// over chunks of 256 terms folded in fp64: within the fp64 accuracy bar on the KernelBot cases.
// Runs on compute capability 9.0 (H100/H200) only.
#ifndef CONV2D_CONV_TRITON_TRITON_IGEMM_H_
#define CONV2D_CONV_TRITON_TRITON_IGEMM_H_

#include <memory>

#include "absl/status/status.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

std::unique_ptr<Algorithm> MakeTritonIgemm();

// Without a GPU: parses the embedded kernel artifacts and checks the argument mapping and
// launch grid for `shape` against them (what Initialize and Run will use).
absl::Status CheckTritonIgemmOffline(const Shape& shape);

}  // namespace conv2d

#endif  // CONV2D_CONV_TRITON_TRITON_IGEMM_H_
