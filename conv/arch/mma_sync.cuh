// mma.sync m16n8k8 with .tf32 operands and fp32 accumulation (sm_80 and later): the warp-wide
// tensor-core instruction of the kernels that do not use wgmma (implicit_gemm_3xtf32,
// pointwise_wgrad). Fragments, for lane = 4g + t (PTX ISA, "Matrix Fragments for mma.m16n8k8"):
//   A (16 x 8, row):  a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
//   B (8 x 8, col):   b0 (t, g), b1 (t + 4, g)
//   C, D (16 x 8):    c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1)
// A caller that owns both operands' k order may permute k (the same way in A and B): the sum
// over k does not see it.
#ifndef CONV2D_CONV_ARCH_MMA_SYNC_CUH_
#define CONV2D_CONV_ARCH_MMA_SYNC_CUH_

#include <cstdint>

namespace conv2d {

// d += a * b on a 16x8x8 TF32 tile, fp32 accumulation.
__device__ __forceinline__ void MmaTf32(float (&d)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace conv2d

#endif  // CONV2D_CONV_ARCH_MMA_SYNC_CUH_
