// implicit_gemm_wgmma's kernels (sm_90a): the filter split, the stage copies (forward and
// wgrad), the main loop and its stores, and their launch attributes. Included only by
// implicit_gemm_wgmma.cu, which owns the schedule, the runners and the algorithm.
//
// Pipeline, per CTA (384 threads: consumer warpgroups 0 and 1, copy warpgroup 2). The CTAs are
// persistent: at most SMs x CTAs per SM of them, each walking its work units (a unit: one kBM x
// BN tile over some of its k-tiles; UnitWalk and ChooseSchedule in the internal header). The
// CTA's k-tiles over all its units, in order, are its stages 0, 1, ...: stage g lives in slot
// g % kStages of a ring handed on by mbarriers ("The ring" in the internal header); nothing
// waits on a CTA-wide barrier after the barriers' initialisation (wgrad's consumers meet at a
// named barrier of their 256 threads per stage: the dy split, CopyStagesWgrad).
//  - The copy warpgroup (setmaxnreg down to kCopyRegs) issues the copies of stage g (the split
//    filter's hi/lo tile by one bulk copy, gathered x by cp.async) as soon as "empty" says the
//    consumers are done with stage g - kStages; the copies themselves complete the stage's
//    "full" when they land (CopyStages). Stages are thus in flight up to kStages ahead of the one
//    being computed, across unit boundaries: the next unit's first stages land while the
//    consumers finish the current one.
//  - The consumers (setmaxnreg up to kConsumerRegs) wait "full" of stage g; per k8 step each
//    thread loads its 4 A fragment values, splits them (4 x hi, 4 x lo), then wgmma.fence, three
//    wgmma (lo*Bhi, hi*Blo, hi*Bhi) on the same accumulators, commit, and wait_group 1, so that
//    the tensor core always has the next step queued while this thread prepares the one after
//    (two register sets of A fragments alternate). After the first step's wait_group 1 of a
//    unit's stage g, stage g - 1 (same unit) is complete: arrive on its "empty". Every kFoldTiles
//    k-tiles of a unit: wait_group 0 and fold. At a unit's end: wait_group 0, arrive on the last
//    stage's "empty", fold the partial chunk. The unit's stores (BN = 32 and 128) are deferred
//    into the next unit's first k-tile, a quarter of the registers after each k8 step's wgmma are
//    issued, so that the tensor core is not idle while they issue; the CTA's last unit stores
//    at once. A stream-K piece short of its tile stores its sums to the workspace at once, and
//    the tile's last-arriving warps add the pieces in k order and store y (TailPiece): every
//    call gives the same bits.

#ifndef CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_WGMMA_KERNELS_CUH_
#define CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_WGMMA_KERNELS_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma_internal.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma_wgrad.h"
#include "conv/algorithms/implicit_gemm/wgrad_split.h"
#include "conv/arch/cp_async.cuh"
#include "conv/arch/mbarrier.cuh"
#include "conv/arch/pdl.cuh"
#include "conv/arch/split_3xtf32.h"
#include "conv/arch/wgmma.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace implicit_gemm_wgmma_internal {


// The filter split into the workspace: one block per (N tile, k-tile), see SplitFilterTarget;
// then blocks that zero the tail's counters (TailZeroBlocks), which saves a separate launch.
// Runs on any GPU.
template <int BN, bool kGrouped>
__global__ void __launch_bounds__(kSplitThreads)
    SplitFilterKernel(const float* __restrict__ w, float* __restrict__ ws, const Params p) {
  PdlLaunchDependents();
  const int block = static_cast<int>(blockIdx.x);
  const int split_blocks = p.n_tiles * p.k_tiles;
  if (block >= split_blocks) {
    const int i = (block - split_blocks) * kSplitThreads + static_cast<int>(threadIdx.x);
    if (i < TailCounters(p)) p.tail_counters[i] = 0;
    return;
  }
  // Every load of the thread first, then the splits and stores: the filter comes from DRAM, and
  // the loop that split each value as it arrived kept four loads in flight (the compiler unrolls
  // it by 4 only: its trip count depends on the thread), four DRAM round trips per block in
  // series (round 68).
  constexpr int kPerThread = BN * kBK / kSplitThreads;
  static_assert(BN * kBK % kSplitThreads == 0, "whole elements per thread");
  struct Target {
    int n, n_end, k;
    int64_t hi_at;
  };
  auto target = [&](int j) {
    Target t;
    SplitFilterTarget<kGrouped>(p, BN, block, static_cast<int>(threadIdx.x) + j * kSplitThreads,
                                &t.n, &t.n_end, &t.k, &t.hi_at);
    return t;
  };
  float v[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const Target t = target(j);
    v[j] = 0.f;
    if (t.n < t.n_end && t.k < p.k) {
      // A coherent load: ptxas moves stores in between non-coherent (ld.global.nc) loads, and
      // each such store waits for a load's value.
      asm volatile("ld.global.f32 %0, [%1];\n" : "=f"(v[j]) : "l"(w + int64_t{t.n} * p.k + t.k));
    }
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const Target t = target(j);
    uint32_t hi, lo;
    SplitTf32(v[j], hi, lo);
    ws[t.hi_at] = __uint_as_float(hi);
    ws[t.hi_at + BN * kBK] = __uint_as_float(lo);
  }
}

// The wgmma path exists only in the sm_90a pass (CONV2D_HAS_WGMMA, conv/arch/wgmma.cuh); the
// compute_80 PTX gets a kernel that traps (Initialize refuses other devices, so it is never
// launched).

#if CONV2D_HAS_WGMMA

// v's TF32 halves to the shared-memory word `at` of a stage's B hi plane and the same word of its
// lo plane (the in-kernel filter split, kSplitB); StoreSplit4 the same for four consecutive
// words, 16 bytes a plane (wgrad's dy split, SplitDyShare).
template <int BN>
__device__ __forceinline__ void StoreSplit(uint32_t at, float v) {
  uint32_t hi, lo;
  SplitTf32(v, hi, lo);
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(hi) : "memory");
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at + Config<BN>::kBTileBytes), "r"(lo)
               : "memory");
}
template <int BN>
__device__ __forceinline__ void StoreSplit4(uint32_t at, const float (&v)[4]) {
  uint32_t hi[4], lo[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) SplitTf32(v[e], hi[e], lo[e]);
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(hi[0]), "r"(hi[1]),
               "r"(hi[2]), "r"(hi[3])
               : "memory");
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at + Config<BN>::kBTileBytes),
               "r"(lo[0]), "r"(lo[1]), "r"(lo[2]), "r"(lo[3])
               : "memory");
}

// kSplitB (tiny problems: no split kernel, no workspace, one launch): the copy warpgroup splits
// the filter's (hi, lo) tile of k-tile kt of N tile nt itself, from w straight into the slot at
// sb, in the layout the bulk copy would have delivered (SplitFilterTarget's element mapping, less
// the tile's workspace offset). Ungrouped shapes only. Loads in batches, each batch's loads
// before its stores (the split kernel's reason: one memory latency a batch, not one a value).
template <int BN>
__device__ __forceinline__ void SplitTileToShared(const float* __restrict__ w, const Params& p,
                                                  int nt, int kt, uint32_t sb, int t) {
  constexpr int kPerThread = BN * kBK / kCopyThreads;  // 8, 16 or 32
  constexpr int kBatch = 4;
  static_assert(kPerThread % kBatch == 0, "whole batches");
  const int block = nt * p.k_tiles + kt;
  const int64_t tile_at = WorkspaceTile(BN, p.k_tiles, nt, kt, 0);
#pragma unroll 1
  for (int j0 = 0; j0 < kPerThread; j0 += kBatch) {
    float v[kBatch];
    uint32_t at[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      int n, n_end, k;
      int64_t hi_at;
      SplitFilterTarget<false>(p, BN, block, t + (j0 + j) * kCopyThreads, &n, &n_end, &k, &hi_at);
      at[j] = sb + 4 * static_cast<uint32_t>(hi_at - tile_at);
      v[j] = 0.f;
      if (n < n_end && k < p.k) {
        asm volatile("ld.global.f32 %0, [%1];\n" : "=f"(v[j]) : "l"(w + int64_t{n} * p.k + k));
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) StoreSplit<BN>(at[j], v[j]);
  }
}

// The copy warpgroup: the CTA's stages in order, over all its work units (stage g: the g-th
// k-tile of the walk), into slot g % kStages as soon as the slot is empty. Nothing here waits for
// a copy to land: the stage's "full" completes by itself once both halves have landed, the
// split filter's (hi, lo) tile by one bulk copy whose bytes the barrier counts (issued by thread
// 0 of the group), and the gathered x by each thread's cp.async arrival. So the group runs ahead
// of the consumers by up to kStages stages, limited only by "empty". The bulk copy writes through
// the async proxy, which is the one wgmma reads through (no proxy fence); the consumers read x
// with ordinary loads. The stream does not stop at a unit's end: the next unit's first stages
// are fetched while the consumers finish the current one. t: the thread's index in the group.
template <int BN, bool kVecA, bool kTail, bool kGeometry, bool kGrouped, bool kSplitB>
__device__ __forceinline__ void CopyStages(const float* __restrict__ x, const float* __restrict__ b,
                                           const Params& p, uint32_t smem_base, uint32_t full,
                                           uint32_t empty, int t) {
  using C = Config<BN>;
  AGather<kVecA, C::kUnmaskedGather && !kGeometry, kGeometry> a_gather;
  int g = 0;  // stages issued so far
  RingCursor<C::kStages> ring;  // stage g's slot and phase
  std::conditional_t<kTail, UnitWalk, WholeTileWalk> walk(p, static_cast<int>(blockIdx.x));
  WorkUnit wu;
  while (walk.Next(p, &wu)) {
    a_gather.Init(p, wu.m_tile * kBM, t);
    // The unit's group's input channels.
    const float* xg = kGrouped ? x + NTileOf<true>(p, BN, wu.n_tile).x0 : x;
    const float* b_src = kSplitB ? b : b + WorkspaceTile(BN, p.k_tiles, wu.n_tile, 0, 0);
    for (int i = 0; i < wu.stages; ++i, ++g, ring.Next()) {
      const int slot = ring.slot;
      if (g >= C::kStages) MbarWait(empty + 8 * slot, ring.parity ^ 1);
      // Stage layout: [B hi | B lo | A].
      const int kt = wu.kt_begin + i;
      const uint32_t sb = smem_base + slot * C::kStageBytes;
      const uint32_t bar = full + 8 * slot;
      if (!kSplitB && t == 0) {
        MbarArriveExpectTx(bar, 2 * C::kBTileBytes);
        BulkCopyToShared(sb, b_src + int64_t{kt} * 2 * C::kBTileFloats, 2 * C::kBTileBytes, bar);
      }
      const uint32_t sa = sb + 2 * C::kBTileBytes;
      a_gather.ForEach(p, kt, [&](int s, int gx, bool valid) {
        // gx >= 0 (CheckIndexing; 0 for a copy not read): unsigned, its widening to 64 bits is
        // free.
        CpAsync<kVecA ? 16 : 4>(sa + 4 * s, xg + static_cast<uint32_t>(gx), valid);
      });
      CpAsyncArriveOnMbar(bar);
      if (kSplitB) {
        // While the gathers fly: the filter tile, split here, then its own arrival (release),
        // after the fence that shows the ordinary stores to wgmma's proxy.
        SplitTileToShared<BN>(b_src, p, wu.n_tile, kt, sb, t);
        FenceProxyAsyncShared();
        MbarArrive(bar);
      }
    }
  }
  // The group may exit with copies in flight: the consumers wait for every stage's "full",
  // which completes only once all of that stage's copies have landed, so the CTA outlives them.
}

// wgrad's copy warpgroup (implicit_gemm_wgmma_wgrad.h): the CTA's stages over its units
// (SliceWalk), as CopyStages, with x gathered by WgradAGather and dy by WgradBGather's map (in
// 16-byte chunks where it can), each dy value copied raw (cp.async) to its place in the
// stage's lo plane; the consumers split it (SplitDyShare). Like CopyStages, nothing here waits for
// a copy to land, so the group runs up to kStages stages ahead. (Splitting here instead, one
// stage behind each thread's own copies, held the copies' latency to one stage: ~30 TFLOP/s.)
template <int BN, bool kVecB>
__device__ __forceinline__ void CopyStagesWgrad(const float* __restrict__ x,
                                                const float* __restrict__ dy, const Params& p,
                                                uint32_t smem_base, uint32_t full, uint32_t empty,
                                                int t) {
  using C = Config<BN>;
  WgradAGather a_gather;
  int g = 0;
  RingCursor<C::kStages> ring;
  SliceWalk walk(p, static_cast<int>(blockIdx.x));
  WorkUnit wu;
  while (walk.Next(p, &wu)) {
    const NTile nt = NTileOf<true>(p, BN, wu.n_tile);
    a_gather.Init(p, wu.m_tile * kBM, t);
    const float* xg = x + nt.x0;
    for (int i = 0; i < wu.stages; ++i, ++g, ring.Next()) {
      const int slot = ring.slot;
      if (g >= C::kStages) MbarWait(empty + 8 * slot, ring.parity ^ 1);
      const int kt = wu.kt_begin + i;
      const uint32_t sb = smem_base + slot * C::kStageBytes;
      constexpr int kV = kVecB ? 4 : 1;
      WgradBGather<BN, kV>::ForEach(p, nt.n0, nt.n_end, kt, t,
                                    [&](int, int off, int src, bool valid) {
        CpAsync<4 * kV>(sb + C::kBTileBytes + 4 * off, dy + static_cast<uint32_t>(src), valid);
      });
      const uint32_t sa = sb + 2 * C::kBTileBytes;
      a_gather.ForEach(p, kt, [&](int s, int gx, bool valid) {
        CpAsync<4>(sa + 4 * s, xg + static_cast<uint32_t>(gx), valid);
      });
      CpAsyncArriveOnMbar(full + 8 * slot);
    }
  }
}

// wgrad: consumer thread tid's share of a landed stage's raw dy (its lo plane, as the copies left
// it), split in place into the hi and lo planes 16 bytes at a time: chunks tid + 256i. The split is
// elementwise, so any partition of the plane serves, whatever the copies' map; consecutive lanes
// take consecutive chunks (no bank conflicts). The proxy fence shows the stores to wgmma; the
// consumers' named barrier (ConsumersSync) then orders every thread's share before any wgmma.
template <int BN>
__device__ __forceinline__ void SplitDyShare(uint32_t sb, int tid) {
  using C = Config<BN>;
  constexpr int kChunks = BN * kBK / 4 / kConsumerThreads;
  static_assert(kChunks * 4 * kConsumerThreads == BN * kBK, "whole chunks per thread");
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const uint32_t at = sb + 16 * static_cast<uint32_t>(tid + kConsumerThreads * i);
    float v[4];
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
                 : "r"(at + C::kBTileBytes)
                 : "memory");
    StoreSplit4<BN>(at, v);
  }
  FenceProxyAsyncShared();
}

// The two consumer warpgroups' named barrier (barrier 1; 0 is __syncthreads').
__device__ __forceinline__ void ConsumersSync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory");
}

// Where a unit's results go: the y offsets of the thread's two rows (-1 past M) and the unit's
// channels [n0, n_end). wgrad: dw's (or the slice's partial dw's) row offsets (WgradRowBase).
struct UnitStore {
  int row[2] = {-1, -1};
  int n0 = 0, n_end = 0;
};
template <int BN, bool kGrouped, bool kWgrad = false>
__device__ __forceinline__ UnitStore UnitStoreOf(const WorkUnit& wu, int wg, int warp, int lane,
                                                 const Params& p) {
  UnitStore to;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int ml, nl;
    AccCoord(wg, warp, lane, 2 * h, &ml, &nl);
    const int m = wu.m_tile * kBM + ml;
    if (kWgrad) {
      to.row[h] = WgradRowBase(p, wu, m);
    } else {
      to.row[h] = m < p.m ? YRowBase(p, m) : -1;
    }
  }
  const NTile nt = NTileOf<kGrouped>(p, BN, wu.n_tile);
  to.n0 = nt.n0;
  to.n_end = nt.n_end;
  return to;
}

// The epilogue of one work unit (or of a tail tile's added pieces), a quarter q (0..3) of the
// accumulator registers at a time: sum[r] plus the bias to y, then sum[r] = 0 for the next unit.
// For one register index a warp stores 8 consecutive pixels x 4 channels, four 32-byte segments
// (wgrad: 8 consecutive taps of 4 filters).
template <int BN, bool kGrouped, bool kWgrad = false>
__device__ __forceinline__ void StoreQuarter(int q, float (&sum)[BN / 2], const UnitStore& to,
                                             int wg, int warp, int lane,
                                             float* __restrict__ y, const Params& p) {
  constexpr int kPerQuarter = BN / 2 / 4;
  // p.p (wgrad: dw's row length) through an opaque move: otherwise the compiler hoists every
  // register's channel offset (n * p.p) out of the unit loop, and those 32-64 live values spill.
  int plane;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(plane) : "r"(kWgrad ? p.red : p.p));
#pragma unroll
  for (int rr = 0; rr < kPerQuarter; ++rr) {
    const int r = q * kPerQuarter + rr;
    int ml, nl;
    AccCoord(wg, warp, lane, r, &ml, &nl);
    const int row = to.row[(r >> 1) & 1];
    const int n = to.n0 + nl;
    if (row >= 0 && n < (kGrouped ? to.n_end : p.cout)) {
      // The bias as the separate pass added it (y + bias, one rounding).
      y[row + n * plane] = p.bias != nullptr ? __fadd_rn(sum[r], __ldg(p.bias + n)) : sum[r];
    }
    sum[r] = 0.f;
  }
}

// atom.add with acquire and release semantics at GPU scope: the arrival publishes the warp's
// slot stores (ordered before it by __syncwarp) and, for the last warp, makes every earlier
// arrival's stores visible to the loads that follow its next __syncwarp.
__device__ __forceinline__ int AtomicAddAcqRelGpu(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}

// A tail piece short of its tile (The tail's pieces, in the internal header), by one consumer
// warp: its sums to the piece's slot, its arrival on the tile's counter; the tile's last warp to
// arrive adds the pieces' slots in k order (its own slot too, reread: the order must not depend
// on which piece arrives last) and stores y with the bias. Leaves sum zero. The stores happen at
// once, not deferred into the next unit: the arrival must follow them.
template <int BN, bool kGrouped>
__device__ __forceinline__ void TailPiece(float (&sum)[BN / 2], const WorkUnit& wu, int wg,
                                          int warp, int lane, float* __restrict__ y,
                                          const Params& p) {
  constexpr int kRegs = BN / 2;
  constexpr int kPerQuarter = kRegs / 4;
  const int t = TailTileOf(p, wu);
  const int tid = (wg * 4 + warp) * 32 + lane;  // consumer thread, 0..255
  float* mine = p.tail_partials +
                PartialAt(BN, PartialSlot(static_cast<int>(blockIdx.x), t), 0, tid);
#pragma unroll
  for (int r = 0; r < kRegs; ++r) __stcg(mine + r * kConsumerThreads, sum[r]);
  __syncwarp();
  int arrived = 0;
  if (lane == 0) {
    arrived = AtomicAddAcqRelGpu(p.tail_counters + TailCounter(t, tid / 32), 1);
  }
  arrived = __shfl_sync(0xffffffffu, arrived, 0);
  const TailPieces pieces = PiecesOf(p, t);
  if (arrived != pieces.count - 1) {
#pragma unroll
    for (int r = 0; r < kRegs; ++r) sum[r] = 0.f;
    return;
  }
  __syncwarp();  // lane 0's acquire, for every lane's loads
  const UnitStore to = UnitStoreOf<BN, kGrouped>(wu, wg, warp, lane, p);
  const float* first =
      p.tail_partials + PartialAt(BN, PartialSlot(pieces.first_cta, t), 0, tid);
  constexpr int64_t kSlotFloats = int64_t{kRegs} * kConsumerThreads;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    // A quarter of the registers at a time: one piece's loads in flight together, few live.
#pragma unroll
    for (int rr = 0; rr < kPerQuarter; ++rr) {
      const int r = q * kPerQuarter + rr;
      sum[r] = __ldcg(first + r * kConsumerThreads);
    }
#pragma unroll 1
    for (int c = 1; c < pieces.count; ++c) {
#pragma unroll
      for (int rr = 0; rr < kPerQuarter; ++rr) {
        const int r = q * kPerQuarter + rr;
        sum[r] = __fadd_rn(sum[r], __ldcg(first + c * kSlotFloats + r * kConsumerThreads));
      }
    }
    StoreQuarter<BN, kGrouped>(q, sum, to, wg, warp, lane, y, p);
  }
}

#endif  // CONV2D_HAS_WGMMA

// One persistent CTA: its work units (UnitWalk), each a kBM x BN tile of the GEMM over its
// k-tiles (all of K, or a tail piece). b: the split filter of this call (the split kernel's
// workspace), or with kSplitB the filter w itself. kGeometry: padding, stride or dilation
// (AGather's geometry gather). kWgrad (kWgradOn, with kWgradCentred where x is centred and
// kWgradVecB where dy is copied in 16-byte chunks): the weight gradient
// (implicit_gemm_wgmma_wgrad.h; b is dy, y is dw or the slices' partial dw).
template <int BN, bool kVecA, bool kTail, bool kGeometry, bool kGrouped = false,
          bool kSplitB = false, int kWgrad = 0>
__global__ void __launch_bounds__(kThreads, Config<BN>::kMinBlocks)
    ImplicitGemmWgmmaKernel(const float* __restrict__ x, const float* __restrict__ b,
                            float* __restrict__ y, const Params p) {
#if CONV2D_HAS_WGMMA
  static_assert(!kGrouped || (kGeometry && !kVecA), "grouped kernels use the geometry gather");
  static_assert(!kSplitB || (!kGrouped && !kTail), "the in-kernel split: whole tiles, no groups");
  static_assert(kWgrad == 0 || (kGrouped && !kTail && !kSplitB), "wgrad: its own walk and split");
  constexpr bool kIsWgrad = kWgrad != 0;
  using C = Config<BN>;
  extern __shared__ unsigned char smem_raw[];
  // Stages start 1024-byte aligned (the swizzle is a function of address bits 4-9).
  const uint32_t smem_base = AlignSmemBase(SharedAddress(smem_raw));
  const float* smem_f =
      reinterpret_cast<const float*>(smem_raw + (smem_base - SharedAddress(smem_raw)));
  const uint32_t full = smem_base + C::kStages * C::kStageBytes;  // full[s] at full + 8s
  const uint32_t empty = full + 8 * C::kStages;

  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < C::kStages; ++s) {
      MbarInit(full + 8 * s,
               kSplitB ? kSplitBFullArrivals : kIsWgrad ? kWgradFullArrivals : kFullArrivals);
      MbarInit(empty + 8 * s, kConsumerThreads);
    }
    FenceMbarInit();  // the bulk copies complete "full" through the async proxy
  }
  __syncthreads();  // the barriers are initialised before anyone uses them
  PdlWait();  // the split filter and the zeroed tail counters come from SplitFilterKernel

  if (tid >= kConsumerThreads) {
    GiveRegisters<C::kCopyRegs>();
    if constexpr (kIsWgrad) {
      CopyStagesWgrad<BN, (kWgrad & kWgradVecB) != 0>(x, b, p, smem_base, full, empty,
                                                       tid - kConsumerThreads);
    } else {
      CopyStages<BN, kVecA, kTail, kGeometry, kGrouped, kSplitB>(x, b, p, smem_base, full, empty,
                                                                tid - kConsumerThreads);
    }
    return;
  }
  TakeRegisters<C::kConsumerRegs>();

  const int lane = tid & 31;
  const int warp = (tid >> 5) & 3;  // warp within the warpgroup
  const int wg = tid >> 7;          // consumer warpgroup: rows 64*wg .. +63 of the tile

  // acc: the current chunk of <= 128 terms, written only by wgmma: the first wgmma of every
  // chunk (k-tile 0 of a unit included) has scale-d = 0 and ignores the old value, so acc is
  // deliberately not zeroed (a zeroing MOV makes ptxas serialize the wgmma pipeline, warning
  // C7515). sum: the chunks folded so far; at a unit's end also its last partial chunk, and then
  // it holds the unit's result until the deferred epilogue has stored it (and zeroed it).
  float acc[C::kAccRegs];
  float sum[C::kAccRegs];
#pragma unroll
  for (int i = 0; i < C::kAccRegs; ++i) sum[i] = 0.f;
  uint32_t a_hi[2][4], a_lo[2][4];  // A fragments of the even and odd k8 steps

  // The previous unit's epilogue, deferred into the first k-tile of the next one (one quarter of
  // the registers after each k8 step's wgmma are issued), so that its stores run while the tensor
  // core works (BN = 32 and 128; at BN = 64 the registers are short, and the SM's other CTA
  // keeps the tensor core busy while this one stores).
  bool store_pending = false;
  UnitStore store;

  RingCursor<C::kStages> ring;  // the slot and phase of the stage consumed next, over all units
  std::conditional_t<kIsWgrad, SliceWalk, std::conditional_t<kTail, UnitWalk, WholeTileWalk>>
      walk(p, static_cast<int>(blockIdx.x));
  const int fold_tiles = kIsWgrad ? p.fold_tiles : kFoldTiles;
  float center[2] = {0.f, 0.f};  // wgrad with centring: the centres of the thread's A rows
  // wgrad: the CTA's stages in all (so that the split of the next stage is never waited for past
  // the last), the index of the current one, and stage 0's split before the loop.
  int total_stages = 0, stage = 0;
  if constexpr (kIsWgrad) {
    SliceWalk all(p, static_cast<int>(blockIdx.x));
    WorkUnit u;
    while (all.Next(p, &u)) total_stages += u.stages;
    if (total_stages > 0) {
      MbarWait(full, 0);
      SplitDyShare<BN>(smem_base, tid);
    }
  }
  WorkUnit wu;
  while (walk.Next(p, &wu)) {
    if (kWgrad & kWgradCentred) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = wu.m_tile * kBM + wg * kWarpgroupRows + warp * 16 + (lane >> 2) + 8 * h;
        center[h] = WgradRowCenter(p, wu.n_tile, m);
      }
    }
    int fold_count = 0;  // k-tiles in acc
    for (int i = 0; i < wu.stages; ++i, ring.Next(), ++stage) {
      const int slot = ring.slot;
      MbarWait(full + 8 * slot, ring.parity);  // the stage has landed
      if constexpr (kIsWgrad) ConsumersSync();  // and every thread's share of dy is split

      const uint32_t sb = smem_base + slot * C::kStageBytes;
      const uint64_t desc_hi = MakeDescriptor(sb);
      const uint64_t desc_lo = MakeDescriptor(sb + C::kBTileBytes);
      const float* sa = smem_f + (slot * C::kStageBytes + 2 * C::kBTileBytes) / 4;
      const int keep = fold_count == 0 ? 0 : 1;  // scale-d of the tile's first wgmma
#pragma unroll
      for (int j = 0; j < kK8Steps; ++j) {
        uint32_t(&hi)[4] = a_hi[j & 1];
        uint32_t(&lo)[4] = a_lo[j & 1];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          // Register r reads row gid + 8 * (r & 1) (AFragIndex).
          const float v = sa[AFragIndex(wg, warp, j, lane, r)];
          SplitTf32((kWgrad & kWgradCentred) ? v - center[r & 1] : v, hi[r], lo[r]);
        }
        WgmmaFence();
        WgmmaTf32(acc, lo, DescriptorAtStep(desc_hi, j), j == 0 ? keep : 1);
        WgmmaTf32(acc, hi, DescriptorAtStep(desc_lo, j), 1);
        WgmmaTf32(acc, hi, DescriptorAtStep(desc_hi, j), 1);
        WgmmaCommit();
        // The previous unit's stores, a quarter per step, while this step's wgmma run (they
        // touch sum only, never acc or the A fragments in flight).
        if (C::kDeferStores && store_pending) {
          StoreQuarter<BN, kGrouped, kIsWgrad>(j, sum, store, wg, warp, lane, y, p);
        }
        // wgrad: while the stage's last step runs, the next stage's dy split (it has landed:
        // the copies run up to kStages ahead).
        if (kIsWgrad && j == kK8Steps - 1 && stage + 1 < total_stages) {
          RingCursor<C::kStages> next = ring;
          next.Next();
          MbarWait(full + 8 * next.slot, next.parity);
          SplitDyShare<BN>(smem_base + next.slot * C::kStageBytes, tid);
        }
        // Step j - 1 is complete: the tensor core always has step j queued while this thread
        // prepares step j + 1 (two register sets of A fragments alternate).
        WgmmaWait<1>();
        if (j == 0 && i > 0) {
          // The last step of stage g - 1 (same unit) is complete: its slot may be refilled.
          MbarArrive(empty + 8 * ring.prev);
        }
      }
      store_pending = false;

      if (++fold_count == fold_tiles) {
        fold_count = 0;
        WgmmaWait<0>();
        WgmmaFenceOperand(acc);
#pragma unroll
        for (int r = 0; r < C::kAccRegs; ++r) sum[r] = __fadd_rn(sum[r], acc[r]);
      }
    }
    WgmmaWait<0>();
    WgmmaFenceOperand(acc);
    // The unit's last stage is complete: free its slot now (not at the next unit's first step),
    // so that the copy warpgroup can fill every slot with the next unit's stages meanwhile.
    MbarArrive(empty + 8 * ring.prev);
    // acc holds an unfolded partial chunk unless the last tile completed a chunk (then it holds
    // the chunk already in sum): fold it, the same IEEE add the epilogue did on its own.
    if (fold_count != 0) {
#pragma unroll
      for (int r = 0; r < C::kAccRegs; ++r) sum[r] = __fadd_rn(sum[r], acc[r]);
    }
    if (kTail && IsPartial(p, wu)) {
      TailPiece<BN, kGrouped>(sum, wu, wg, warp, lane, y, p);
      continue;
    }
    store = UnitStoreOf<BN, kGrouped, kIsWgrad>(wu, wg, warp, lane, p);
    store_pending = true;
    if (!C::kDeferStores) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        StoreQuarter<BN, kGrouped, kIsWgrad>(q, sum, store, wg, warp, lane, y, p);
      }
      store_pending = false;
    }
  }
  // The last unit's epilogue: nothing left to overlap it with.
  if (store_pending) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      StoreQuarter<BN, kGrouped, kIsWgrad>(q, sum, store, wg, warp, lane, y, p);
    }
  }
#else
  __trap();  // not an sm_90a build: never launched (Initialize checks the device)
#endif
}

// Lets the kernel have its dynamic shared memory, and asks for the whole shared/L1 split as
// shared memory so that BN = 32 and 64 get their two CTAs per SM.
template <int BN, bool kVecA, bool kTail, bool kGeometry = false, bool kGrouped = false,
          bool kSplitB = false, int kWgrad = 0>
absl::Status EnableSmem() {
  auto* kernel = &ImplicitGemmWgmmaKernel<BN, kVecA, kTail, kGeometry, kGrouped, kSplitB, kWgrad>;
  RETURN_IF_ERROR(CudaStatus(cudaFuncSetAttribute(kernel,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  Config<BN>::kSmemBytes),
                             "implicit_gemm_wgmma: cudaFuncSetAttribute (shared memory size)"));
  return CudaStatus(cudaFuncSetAttribute(kernel,
                                         cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared),
                    "implicit_gemm_wgmma: cudaFuncSetAttribute (carveout)");
}

template <int BN>
absl::Status EnableSmemAll() {
  RETURN_IF_ERROR((EnableSmem<BN, true, false>()));
  RETURN_IF_ERROR((EnableSmem<BN, false, false>()));
  RETURN_IF_ERROR((EnableSmem<BN, true, true>()));
  RETURN_IF_ERROR((EnableSmem<BN, false, true>()));
  RETURN_IF_ERROR((EnableSmem<BN, false, false, true>()));
  RETURN_IF_ERROR((EnableSmem<BN, false, true, true>()));
  RETURN_IF_ERROR((EnableSmem<BN, false, false, true, true>()));
  RETURN_IF_ERROR((EnableSmem<BN, false, true, true, true>()));
  RETURN_IF_ERROR((EnableSmem<BN, true, false, false, false, true>()));
  RETURN_IF_ERROR((EnableSmem<BN, false, false, false, false, true>()));
  return EnableSmem<BN, false, false, true, false, true>();
}

// wgrad's two kernels (plain and centring).
template <int BN>
absl::Status EnableSmemWgrad() {
  RETURN_IF_ERROR((EnableSmem<BN, false, false, true, true, false, kWgradOn>()));
  RETURN_IF_ERROR((EnableSmem<BN, false, false, true, true, false, kWgradOn | kWgradCentred>()));
  RETURN_IF_ERROR((EnableSmem<BN, false, false, true, true, false, kWgradOn | kWgradVecB>()));
  return EnableSmem<BN, false, false, true, true, false,
                    kWgradOn | kWgradCentred | kWgradVecB>();
}

}  // namespace implicit_gemm_wgmma_internal
}  // namespace conv2d

#endif  // CONV_ALGORITHMS_IMPLICIT_GEMM_IMPLICIT_GEMM_WGMMA_KERNELS_CUH_
