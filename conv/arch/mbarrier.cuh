// The sm_90 primitives of the warp-specialised kernels (cgemm_3xtf32_sm90, implicit_gemm_wgmma):
// shared-memory mbarriers that hand pipeline slots between warpgroups (also completed by the
// copies themselves: cp.async arrivals, bulk-copy transactions), and setmaxnreg, which moves
// registers from the copying warpgroups to the computing ones. Device code only; callers
// use them only inside their sm_90a guard (setmaxnreg is an sm_90a instruction), so the
// compute_80 pass emits none of them.
#ifndef CONV2D_CONV_MBARRIER_CUH_
#define CONV2D_CONV_MBARRIER_CUH_

#include <cstdint>

namespace conv2d {

// A generic pointer into shared memory as the 32-bit shared-window address that mbarriers, bulk
// copies and wgmma descriptors take.
__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// `bar`: the barrier's shared-memory address (SharedAddress), or below, the barrier itself.
__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Release: this thread's earlier shared-memory accesses happen before the phase completes.
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
// Waits until the phase of parity `parity` has completed (acquire).
__device__ __forceinline__ void MbarWait(uint32_t bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nMBAR_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra MBAR_WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// After a thread's mbarrier.init of barriers that copies will complete through the async proxy
// (bulk copies' transaction bytes): makes the initialisation visible to that proxy. Then a CTA
// barrier before anyone uses them.
__device__ __forceinline__ void FenceMbarInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrives and raises the phase's expected transaction bytes by `bytes` (for a bulk copy that
// completes them on this barrier).
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile(
      "{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
          bar),
      "r"(bytes)
      : "memory");
}
// An arrival on `bar` that happens once all of this thread's earlier cp.async copies have landed
// (.noinc: it is one of the arrivals the barrier was initialised to expect), so the copying
// thread never waits for its own copies.
__device__ __forceinline__ void CpAsyncArriveOnMbar(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// After a thread's ordinary stores to shared memory that wgmma will read (through the async
// proxy): orders them before its later accesses in that proxy's view; then an mbarrier arrival
// (release) hands them to the consumers.
__device__ __forceinline__ void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// One bulk copy (the copy engine, async proxy) of `bytes` (a multiple of 16; both addresses
// 16-byte aligned) from global `src` to shared `dst`, completing `bytes` transactions on `bar`.
__device__ __forceinline__ void BulkCopyToShared(uint32_t dst, const void* src, uint32_t bytes,
                                                 uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// The same on a barrier named by its generic pointer (a uint64_t in shared memory).
__device__ __forceinline__ void MbarInit(uint64_t* bar, int count) {
  MbarInit(SharedAddress(bar), count);
}
__device__ __forceinline__ void MbarArrive(uint64_t* bar) { MbarArrive(SharedAddress(bar)); }
__device__ __forceinline__ void MbarWait(uint64_t* bar, int parity) {
  MbarWait(SharedAddress(bar), parity);
}
__device__ __forceinline__ void CpAsyncArriveOnMbar(uint64_t* bar) {
  CpAsyncArriveOnMbar(SharedAddress(bar));
}

// This warpgroup's registers per thread, down (Give) or up (Take) to kRegs.
template <int kRegs>
__device__ __forceinline__ void GiveRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void TakeRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace conv2d

#endif  // CONV2D_CONV_MBARRIER_CUH_
