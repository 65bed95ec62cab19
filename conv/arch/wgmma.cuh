// Hopper's warpgroup MMA (wgmma, sm_90a) as the 3xTF32 kernels use it (cgemm_3xtf32_sm90,
// implicit_gemm_wgmma): the m64nNk8 .tf32 instruction with A from registers and B through a
// shared-memory descriptor, and the fence / commit / wait protocol around it. Device code only.
//
// The protocol (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"): a
// warpgroup's wgmma run asynchronously after they issue, reading their register operands and
// writing their accumulators at some later point. So
//  - WgmmaFence before the first wgmma of a batch: orders the thread's earlier register writes
//    (the split A fragments, the accumulators) before the wgmma that read them;
//  - WgmmaCommit after the batch: closes a group that WgmmaWait can name;
//  - WgmmaWait<n> before touching anything the groups read or write: returns once at most n
//    groups are pending, so a kernel can keep one group queued (n = 1) while it prepares the
//    next, or drain all (n = 0) before it folds or stores the accumulators;
//  - WgmmaFenceOperand after the wait, on every accumulator register read next: the compiler
//    cannot see that wgmma writes the registers after the issuing instruction, and would
//    otherwise move their reads above the wait.
// The instruction wrappers pass scale_d through a predicate: 0 ignores the accumulators' old
// value (d = A*B), which lets a kernel start a fold chunk without writing the accumulators
// outside wgmma (a MOV into them makes ptxas serialise the wgmma pipeline, warning C7515).
//
// Everything here is inside CONV2D_HAS_WGMMA: the sm_90a pass has it, the compute_80 PTX the
// kernels also carry does not (their callers compile a trap or nothing there, and never launch
// it on other GPUs).
#ifndef CONV2D_ARCH_WGMMA_CUH_
#define CONV2D_ARCH_WGMMA_CUH_

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CONV2D_HAS_WGMMA 1
#else
#define CONV2D_HAS_WGMMA 0
#endif

namespace conv2d {

#if CONV2D_HAS_WGMMA

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void WgmmaFenceOperand(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}
template <int kN>
__device__ __forceinline__ void WgmmaFenceOperand(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) WgmmaFenceOperand(r[i]);
}

// d (64 x N, fp32; N / 2 registers per thread) = A (64 x 8, tf32: 4 registers per thread) *
// B (8 x N, tf32, the descriptor's shared-memory tile) + (scale_d ? d : 0). One overload per N
// the kernels use, chosen by the accumulator array's size. The accumulators are operands 0 ..
// N/2 - 1 (CONV2D_WGMMA_D<N/2> lists them in the instruction, CONV2D_WGMMA_ACC8 binds eight),
// then A's four registers, the descriptor and scale_d.
#define CONV2D_WGMMA_ACC8(d, i)                                                                    \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),      \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define CONV2D_WGMMA_D16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define CONV2D_WGMMA_D32                                                                           \
  CONV2D_WGMMA_D16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, " \
                   "%31"
#define CONV2D_WGMMA_D56                                                                           \
  CONV2D_WGMMA_D32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, " \
                   "%47, %48, %49, %50, %51, %52, %53, %54, %55"
#define CONV2D_WGMMA_D64 CONV2D_WGMMA_D56 ", %56, %57, %58, %59, %60, %61, %62, %63"

__device__ __forceinline__ void WgmmaTf32(float (&d)[16], const uint32_t (&a)[4], uint64_t desc,
                                          int scale_d) {  // N = 32
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
               "{" CONV2D_WGMMA_D16 "}, {%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
               : CONV2D_WGMMA_ACC8(d, 0), CONV2D_WGMMA_ACC8(d, 8)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

__device__ __forceinline__ void WgmmaTf32(float (&d)[32], const uint32_t (&a)[4], uint64_t desc,
                                          int scale_d) {  // N = 64
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
               "{" CONV2D_WGMMA_D32 "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
               : CONV2D_WGMMA_ACC8(d, 0), CONV2D_WGMMA_ACC8(d, 8), CONV2D_WGMMA_ACC8(d, 16),
                 CONV2D_WGMMA_ACC8(d, 24)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

__device__ __forceinline__ void WgmmaTf32(float (&d)[56], const uint32_t (&a)[4], uint64_t desc,
                                          int scale_d) {  // N = 112
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %61, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n112k8.f32.tf32.tf32 "
               "{" CONV2D_WGMMA_D56 "}, {%56, %57, %58, %59}, %60, p, 1, 1;\n}\n"
               : CONV2D_WGMMA_ACC8(d, 0), CONV2D_WGMMA_ACC8(d, 8), CONV2D_WGMMA_ACC8(d, 16),
                 CONV2D_WGMMA_ACC8(d, 24), CONV2D_WGMMA_ACC8(d, 32), CONV2D_WGMMA_ACC8(d, 40),
                 CONV2D_WGMMA_ACC8(d, 48)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

__device__ __forceinline__ void WgmmaTf32(float (&d)[64], const uint32_t (&a)[4], uint64_t desc,
                                          int scale_d) {  // N = 128
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
               "{" CONV2D_WGMMA_D64 "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
               : CONV2D_WGMMA_ACC8(d, 0), CONV2D_WGMMA_ACC8(d, 8), CONV2D_WGMMA_ACC8(d, 16),
                 CONV2D_WGMMA_ACC8(d, 24), CONV2D_WGMMA_ACC8(d, 32), CONV2D_WGMMA_ACC8(d, 40),
                 CONV2D_WGMMA_ACC8(d, 48), CONV2D_WGMMA_ACC8(d, 56)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

#undef CONV2D_WGMMA_D64
#undef CONV2D_WGMMA_D56
#undef CONV2D_WGMMA_D32
#undef CONV2D_WGMMA_D16
#undef CONV2D_WGMMA_ACC8

#endif  // CONV2D_HAS_WGMMA

}  // namespace conv2d

#endif  // CONV2D_ARCH_WGMMA_CUH_
