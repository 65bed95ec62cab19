// cp.async (sm_80+): asynchronous global -> shared copies, shared by the kernels that stage tiles
// through shared memory (cgemm_3xtf32, cgemm_3xtf32_sm90, implicit_gemm_3xtf32,
// implicit_gemm_wgmma). Device code only.
#ifndef CONV2D_CONV_CP_ASYNC_CUH_
#define CONV2D_CONV_CP_ASYNC_CUH_

#include <cstdint>

namespace conv2d {

// A 16-byte copy (bypassing L1) of which only the first src_bytes (0, 4, 8, 12 or 16) are read;
// the rest of the 16 bytes at `dst` (as __cvta_generic_to_shared gives it) are zero-filled: a
// masked copy, or a pair of elements cut by the operand's edge.
__device__ __forceinline__ void CpAsync16Partial(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsync16Partial(void* dst, const void* src, int src_bytes) {
  CpAsync16Partial(static_cast<uint32_t>(__cvta_generic_to_shared(dst)), src, src_bytes);
}

// Copies kBytes (4, 8 or 16) from `src` to the shared-memory address `dst` (as
// __cvta_generic_to_shared gives it); when !valid, writes zeros and reads nothing (source size
// 0), which is how tiles are masked past the edges of their operands. 16-byte copies bypass L1.
template <int kBytes>
__device__ __forceinline__ void CpAsync(uint32_t dst, const void* src, bool valid) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "4-, 8- or 16-byte copies");
  const uint32_t n = valid ? kBytes : 0;
  if constexpr (kBytes == 16) {
    CpAsync16Partial(dst, src, static_cast<int>(n));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src),
                 "n"(kBytes), "r"(n)
                 : "memory");
  }
}
template <int kBytes>
__device__ __forceinline__ void CpAsync(void* dst, const void* src, bool valid) {
  CpAsync<kBytes>(static_cast<uint32_t>(__cvta_generic_to_shared(dst)), src, valid);
}

__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace conv2d

#endif  // CONV2D_CONV_CP_ASYNC_CUH_
