// "gemm_1x1": a 1x1 convolution is a matrix product per image, y_b (Cout x HW)
// = w (Cout x Cin) x_b (Cin x HW), done by one strided-batched cuBLAS SGEMM on
// the CUDA cores in fp32 (pedantic math: no TF32). With no spatial reuse to
// exploit, the case is bound by reading x and writing y once; cuBLAS streams
// both at close to the memory's rate, where our wgmma kernel, built for long
// im2col reductions, does not (docs/PERF.md, round 51). Takes 1x1 kernels whose
// reduction (Cin) is short enough for one fp32 accumulator to stay far inside
// the accuracy bar.
#ifndef CONV2D_CONV_GEMM_1X1_H_
#define CONV2D_CONV_GEMM_1X1_H_

#include <cstdint>

#include "conv/registry.h"

namespace conv2d {

void RegisterGemm1x1(Registry& registry);

namespace gemm_1x1_internal {
// The longest reduction accepted. Summing n products of unit normals in one
// fp32 accumulator (any order) errs by ~n * 2^-24 * sqrt(n) at worst; at n =
// 4096 a CPU model measured a worst ratio to the tolerance of 0.07 over 2000
// sums, and the GPU test checks this bound's shape.
constexpr int64_t kMaxReduction = 4096;
}  // namespace gemm_1x1_internal

}  // namespace conv2d

#endif  // CONV2D_CONV_GEMM_1X1_H_
