// The 3xTF32 channel mix on Hopper's warpgroup MMA (wgmma, sm_90a): the layout algebra and the
// reasons are in cgemm_3xtf32_sm90_internal.h. cgemm_3xtf32.cu dispatches here on sm_90 devices.
//
// Per CTA: a copy warpgroup, a split warpgroup and kWgs consumer warpgroups (64 n rows each) by
// kN m columns, persistent over the work items, handing slots round a ring of kSlots:
//   copy, stage q: wait "empty" of the slot (stage q - kSlots done); cp.async stage q; arrive
//     "loaded" when they land (cp.async.mbarrier.arrive)
//   split, stage q: wait "loaded"; split the input tile into the slot's planes; fence.proxy.async;
//     arrive "full"
//   consumer, stage q: split the filter fragments (loaded after stage q - 1); wgmma.fence; 4 K
//     steps x 6 wgmma (Re and Im x lo*hi, hi*lo, hi*hi); commit; wait for them; arrive "empty";
//     wait "full" of stage q + 1 and load its filter fragments; fold the partials into the
//     running sums; after an item's last stage, store C
// A consumer thread holds its running sums and partials (2 x kN floats); the producers give
// registers up (setmaxnreg) for them.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/fft/cgemm_3xtf32_internal.h"
#include "conv/algorithms/fft/cgemm_3xtf32_sm90.h"
#include "conv/algorithms/fft/cgemm_3xtf32_sm90_internal.h"
#include "conv/arch/cp_async.cuh"
#include "conv/arch/mbarrier.cuh"
#include "conv/arch/per_device.h"
#include "conv/arch/split_3xtf32.h"
#include "conv/arch/wgmma.cuh"
#include "conv/core/cuda_status.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace cgemm_3xtf32_sm90 {
namespace {

// The mma.sync kernel's parameters, then the persistent CTAs' count of work items.
struct Params : cgemm_3xtf32::MixParams<float2> {
  int items;
};

#if CONV2D_HAS_WGMMA
// Makes the compiler compute a wgmma operand before this point (before the wgmma.fence): an
// operand register written between two wgmma makes ptxas insert a warpgroup.arrive there.
__device__ __forceinline__ void PinOperand(uint32_t& r) { asm volatile("" : "+r"(r)); }
__device__ __forceinline__ void PinOperand(uint64_t& r) { asm volatile("" : "+l"(r)); }
// Makes this thread's generic-proxy shared stores visible to the tensor cores' async proxy.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// A CTA's walk over its stages: item blockIdx.x + i * gridDim.x, chunk (k range) c, advanced by
// one stage at a time, so that no stage divides (only a new item does, once per `chunks`).
struct Cursor {
  int item, chunk;
  Item at;
};
__device__ __forceinline__ Cursor FirstStage(const Params& p) {
  const int item = static_cast<int>(blockIdx.x);
  return {item, 0, ItemOf(item, p.tiles_m, p.tiles_n)};
}
__device__ __forceinline__ void NextStage(const Params& p, int chunks, Cursor& c) {
  if (++c.chunk == chunks) {
    c.chunk = 0;
    c.item += static_cast<int>(gridDim.x);
    c.at = ItemOf(c.item, p.tiles_m, p.tiles_n);
  }
}
#endif

#if CONV2D_HAS_WGMMA
// The copy warpgroup: the raw copies of every stage into its slot, as soon as the slot is free;
// the slot's "loaded" barrier completes when they have landed. kWide: the filter spectrum is
// 16-byte aligned (even ldb and stride_b), copied two rows a copy.
template <int kWgs, int kN, bool kWide>
__device__ __forceinline__ void CopyStages(const Params& p, unsigned char* smem, uint64_t* loaded,
                                           uint64_t* empty, int stages, int chunks) {
  constexpr Tile kT = MakeTile(kWgs, kN);
  constexpr int kThreads = kCopyThreads;
  constexpr int kRowsPerCopy = kWide ? 2 : 1;
  constexpr int kCopyRows = kT.rows / kRowsPerCopy;  // copies per k row of the filter
  constexpr int kFilterCopies =
      kWide ? WideFilterCopies(kT.rows, kThreads) : FilterCopies(kT.rows, kThreads);
  constexpr int kInputCopies = InputCopies(kN, kThreads);
  constexpr int kRowStep = kThreads / kCopyRows;  // k rows between a thread's filter copies
  constexpr int kInRows = InputRowsPerPass(kN, kThreads);  // k rows per pass of the input copies
  static_assert(kThreads % kCopyRows == 0, "a thread copies fixed filter rows");
  static_assert(kBk % kInRows == 0, "the input copies cover the stage's k rows evenly");
  const int tid = threadIdx.x;
  const int f_row = kRowsPerCopy * (tid % kCopyRows), f_k = tid / kCopyRows;
  const int in_col = tid % kN, in_k = tid / kN;  // in_k >= kInRows: no input copies

  // Enqueues the raw copies of the stage at `c` into `slot` (zeros past n, m and k). A masked
  // thread walks a valid pointer with stride 0; past k (the last chunk), a copy reads nothing.
  auto fetch = [&](const Cursor& c, int slot) {
    const int l0 = c.chunk * kBk, k_left = p.k - l0;
    float2* raw = reinterpret_cast<float2*>(smem + slot * kT.slot_bytes);
    {
      const int j = c.at.tn * kT.rows + f_row;
      // Bytes of this thread's row(s) inside n: 16, 8 (the pair cut by n) or 0.
      const int row_bytes = kWide ? (j + 1 < p.n ? 16 : (j < p.n ? 8 : 0)) : (j < p.n ? 8 : 0);
      const float2* src =
          row_bytes > 0 ? p.b + c.at.f * p.stride_b + j + static_cast<int64_t>(l0 + f_k) * p.ldb
                        : p.b;
      const int64_t step = row_bytes > 0 ? static_cast<int64_t>(kRowStep) * p.ldb : 0;
      float2* dst = raw + StagedOffset(kT.ld_filter, f_row, f_k);
#pragma unroll
      for (int r = 0; r < kFilterCopies; ++r) {
        const int bytes = k_left >= kBk || f_k + r * kRowStep < k_left ? row_bytes : 0;
        if constexpr (kWide) {
          CpAsync16Partial(dst + r * kRowStep * kT.ld_filter, src, bytes);
        } else {
          CpAsync<8>(dst + r * kRowStep * kT.ld_filter, src, bytes > 0);
        }
        src += step;
      }
    }
    if (in_k < kInRows) {
      const int i = c.at.tm * kN + in_col;
      const bool ok = i < p.m;
      const float2* src =
          ok ? p.a + c.at.f * p.stride_a + i + static_cast<int64_t>(l0 + in_k) * p.lda : p.a;
      const int64_t step = ok ? static_cast<int64_t>(kInRows) * p.lda : 0;
      float2* dst = raw + kBk * kT.ld_filter + StagedOffset(kT.ld_input, in_col, in_k);
#pragma unroll
      for (int r = 0; r < kInputCopies; ++r) {
        CpAsync<8>(dst + r * kInRows * kT.ld_input, src,
                   ok && (k_left >= kBk || in_k + r * kInRows < k_left));
        src += step;
      }
    }
  };

  Cursor at = FirstStage(p);
  for (int s = 0; s < stages; ++s) {
    const int slot = s % kSlots;
    // The slot's last stage, s - kSlots, is done with (its wgmma complete, fragments read).
    if (s >= kSlots) MbarWait(&empty[slot], (s / kSlots - 1) & 1);
    fetch(at, slot);
    CpAsyncArriveOnMbar(&loaded[slot]);
    NextStage(p, chunks, at);
  }
  CpAsyncWait<0>();  // no copy may outlive the CTA's shared memory
}

// The split warpgroup: each landed input tile into its slot's hi and lo planes.
template <int kWgs, int kN>
__device__ __forceinline__ void SplitStages(unsigned char* smem, uint64_t* loaded, uint64_t* full,
                                            int stages) {
  constexpr Tile kT = MakeTile(kWgs, kN);
  constexpr int kGroups = SplitGroupsPerThread(kN, kSplitThreads);
  const int tid = static_cast<int>(threadIdx.x) - kCopyThreads;
  for (int q = 0; q < stages; ++q) {
    const int slot = q % kSlots;
    MbarWait(&loaded[slot], (q / kSlots) & 1);
    unsigned char* base = smem + slot * kT.slot_bytes;
    const float2* raw_in = reinterpret_cast<const float2*>(base) + kBk * kT.ld_filter;
    unsigned char* hi_plane = base + kT.staged_bytes;
    unsigned char* lo_plane = hi_plane + kT.plane_bytes;
#pragma unroll
    for (int r = 0; r < kGroups; ++r) {
      const SplitGroup g = SplitGroupOf(kN, kSplitThreads, tid, r);
      if (!g.valid) continue;
      uint32_t re_hi[4], re_lo[4], im_hi[4], im_lo[4];
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const float2 x = raw_in[StagedOffset(kT.ld_input, g.c, 4 * g.s + t)];
        // The finite-only split: fft_fused takes non-finite inputs out of its spectra.
        SplitTf32Finite(x.x, re_hi[t], re_lo[t]);
        SplitTf32Finite(x.y, im_hi[t], im_lo[t]);
      }
      // Column c (Re form): slots (Ar, Ai); column c + kN (Im form): slots (Ai, -Ar). Slots 4-7
      // are one core matrix on (kLeadingBytes); column + kN is kN / 8 column groups on.
      constexpr uint32_t kSign = 0x80000000u;
      constexpr int kImForm = kN / 8 * kStrideBytes;
      const int at = PlaneOffset(kN, g.c, g.s, 0);
      auto put = [&](unsigned char* plane, const uint32_t (&re)[4], const uint32_t (&im)[4]) {
        *reinterpret_cast<uint4*>(plane + at) = make_uint4(re[0], re[1], re[2], re[3]);
        *reinterpret_cast<uint4*>(plane + at + kLeadingBytes) =
            make_uint4(im[0], im[1], im[2], im[3]);
        *reinterpret_cast<uint4*>(plane + at + kImForm) = make_uint4(im[0], im[1], im[2], im[3]);
        *reinterpret_cast<uint4*>(plane + at + kImForm + kLeadingBytes) =
            make_uint4(re[0] ^ kSign, re[1] ^ kSign, re[2] ^ kSign, re[3] ^ kSign);
      };
      put(hi_plane, re_hi, im_hi);
      put(lo_plane, re_lo, im_lo);
    }
    FenceProxyAsync();  // the planes, seen by the tensor cores' async proxy
    MbarArrive(&full[slot]);
  }
}

// A consumer warpgroup: rows 64 * wg .. + 63 of every item's n tile.
template <int kWgs, int kN>
__device__ __forceinline__ void Consume(const Params& p, unsigned char* smem, uint64_t* full,
                                        uint64_t* empty, int stages, int chunks) {
  constexpr Tile kT = MakeTile(kWgs, kN);
  constexpr int kAcc = kN / 2;
  const int ctid = static_cast<int>(threadIdx.x) - kProducerThreads;
  const int lane = ctid & 31, warp = (ctid >> 5) & 3, wg = ctid >> 7;
  const int t = lane & 3;
  const uint32_t smem_base = SharedAddress(smem);

  float2 fa[kSteps][2];  // the filter fragments of a stage: K step s, rows g and g + 8
  const int frag_row = kRowsPerWg * wg + FragRow(warp, lane, 0);
  auto load_fragments = [&](int slot) {
    const float2* raw = reinterpret_cast<const float2*>(smem + slot * kT.slot_bytes);
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      fa[s][0] = raw[StagedOffset(kT.ld_filter, frag_row, 4 * s + t)];
      fa[s][1] = raw[StagedOffset(kT.ld_filter, frag_row + 8, 4 * s + t)];
    }
  };

  // Accumulator v of the 64 x 2kN product: Re C in v < kAcc, the matching Im C at v + kAcc.
  float run[2 * kAcc], par[2 * kAcc];
#pragma unroll
  for (int v = 0; v < 2 * kAcc; ++v) run[v] = par[v] = 0.0f;

  MbarWait(&full[0], 0);
  load_fragments(0);
  Cursor at = FirstStage(p);
  for (int q = 0; q < stages; ++q) {
    const int slot = q % kSlots;
    // A fragments: slots (Br, Bi).
    uint32_t a_hi[kSteps][4], a_lo[kSteps][4];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      SplitTf32Finite(fa[s][0].x, a_hi[s][0], a_lo[s][0]);
      SplitTf32Finite(fa[s][1].x, a_hi[s][1], a_lo[s][1]);
      SplitTf32Finite(fa[s][0].y, a_hi[s][2], a_lo[s][2]);
      SplitTf32Finite(fa[s][1].y, a_hi[s][3], a_lo[s][3]);
    }
    // The stage on the tensor cores, small terms first; the first product starts the partials.
    // Columns [0, kN) of the product are Re C, [kN, 2 kN) Im C.
    const uint32_t planes = smem_base + slot * kT.slot_bytes + kT.staged_bytes;
    uint64_t desc_hi[kSteps], desc_lo[kSteps];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      desc_hi[s] = Descriptor(planes + s * (2 * kN / 8) * kStrideBytes);
      desc_lo[s] = Descriptor(planes + kT.plane_bytes + s * (2 * kN / 8) * kStrideBytes);
      PinOperand(desc_hi[s]);
      PinOperand(desc_lo[s]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        PinOperand(a_hi[s][e]);
        PinOperand(a_lo[s][e]);
      }
    }
    WgmmaFence();
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      WgmmaTf32(par, a_lo[s], desc_hi[s], s > 0);
      WgmmaTf32(par, a_hi[s], desc_lo[s], 1);
      WgmmaTf32(par, a_hi[s], desc_hi[s], 1);
    }
    WgmmaCommit();

    // The slot is free once the wgmma have read it; then the next stage's filter fragments.
    WgmmaWait<0>();
    MbarArrive(&empty[slot]);
    if (q + 1 < stages) {
      const int next = q + 1;
      MbarWait(&full[next % kSlots], (next / kSlots) & 1);
      load_fragments(next % kSlots);
    }
#pragma unroll
    for (int v = 0; v < 2 * kAcc; ++v) {
      WgmmaFenceOperand(par[v]);
      run[v] += par[v];
    }
    if (at.chunk == chunks - 1) {
      float2* C = p.c + at.at.f * p.stride_c;
      const int j0 = at.at.tn * kT.rows + kRowsPerWg * wg;
      const int i0 = at.at.tm * kN;
#pragma unroll
      for (int v = 0; v < kAcc; v += 2) {
        const int j = j0 + AccRow(warp, lane, v), i = i0 + AccCol(lane, v);
        const float re0 = run[v], re1 = run[v + 1], im0 = run[v + kAcc], im1 = run[v + kAcc + 1];
        if (j < p.n && i < p.m) {
          float2* dst = C + static_cast<int64_t>(j) * p.ldc + i;
          if (i + 1 < p.m) {
            if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
              *reinterpret_cast<float4*>(dst) = make_float4(re0, im0, re1, im1);
            } else {
              dst[0] = make_float2(re0, im0);
              dst[1] = make_float2(re1, im1);
            }
          } else {
            dst[0] = make_float2(re0, im0);
          }
        }
      }
#pragma unroll
      for (int v = 0; v < 2 * kAcc; ++v) run[v] = 0.0f;
    }
    NextStage(p, chunks, at);
  }
}
#endif

// Registers per thread of the two roles (setmaxnreg), within what the launch gives: 512 threads
// get 128 each, 256 * 56 + 256 * 200 = 65536; 384 threads 168 each, 256 * 56 + 128 * 232 = 44032.
constexpr int kProducerRegs = 56;
template <int kWgs>
constexpr int kConsumerRegs = kWgs == 2 ? 200 : 232;

template <int kWgs, int kN, bool kWide>
__global__ void __launch_bounds__(kProducerThreads + 128 * kWgs, 1)
    CgemmConjSm90Kernel(const __grid_constant__ Params p) {
#if CONV2D_HAS_WGMMA
  constexpr Tile kT = MakeTile(kWgs, kN);
  extern __shared__ __align__(128) unsigned char smem[];
  const int chunks = (p.k + kBk - 1) / kBk;
  const int stages = (p.items - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) /
                     static_cast<int>(gridDim.x) * chunks;
  PdlLaunchDependents();
  if (stages <= 0) return;
  uint64_t* const loaded = reinterpret_cast<uint64_t*>(smem + kT.barrier_offset);
  uint64_t* const full = loaded + kSlots;
  uint64_t* const empty = full + kSlots;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) {
      MbarInit(&loaded[s], kCopyThreads);
      MbarInit(&full[s], kSplitThreads);
      MbarInit(&empty[s], 128 * kWgs);
    }
  }
  __syncthreads();
  PdlWait();  // the spectra come from the kernels before this one
  if (threadIdx.x < kProducerThreads) {
    GiveRegisters<kProducerRegs>();
    if (threadIdx.x < kCopyThreads) {
      CopyStages<kWgs, kN, kWide>(p, smem, loaded, empty, stages, chunks);
    } else {
      SplitStages<kWgs, kN>(smem, loaded, full, stages);
    }
  } else {
    TakeRegisters<kConsumerRegs<kWgs>>();
    Consume<kWgs, kN>(p, smem, full, empty, stages, chunks);
  }
#endif
}

template <int kWgs, int kN, bool kWide>
absl::Status Launch(const Params& p, cudaStream_t stream) {
  constexpr Tile kTile = MakeTile(kWgs, kN);
  auto* kernel = &CgemmConjSm90Kernel<kWgs, kN, kWide>;
  // Resident CTAs per SM for this kernel, read once per device, which also sets the kernel's
  // shared-memory size there (a function attribute is per device).
  int device = 0;
  RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), "cgemm_3xtf32_sm90: cudaGetDevice"));
  static PerDevice<absl::StatusOr<int>>* per_device = new PerDevice<absl::StatusOr<int>>;
  const absl::StatusOr<int>& slots = per_device->Get(device, [&]() -> absl::StatusOr<int> {
    int sms = 0, per_sm = 0;
    RETURN_IF_ERROR(CudaStatus(
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        "cgemm_3xtf32_sm90: multiprocessor count"));
    RETURN_IF_ERROR(CudaStatus(cudaFuncSetAttribute(kernel,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    kTile.smem_bytes),
                               "cgemm_3xtf32_sm90: cudaFuncSetAttribute"));
    RETURN_IF_ERROR(CudaStatus(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                   &per_sm, kernel, kTile.threads, kTile.smem_bytes),
                               "cgemm_3xtf32_sm90: occupancy"));
    if (per_sm < 1) return absl::InternalError("cgemm_3xtf32_sm90: the kernel does not fit an SM");
    return sms * per_sm;
  });
  if (!slots.ok()) return slots.status();
  const int64_t blocks = std::min<int64_t>(p.items, *slots);
  return CudaStatus(LaunchPdl(/*pdl=*/true, kernel, static_cast<unsigned>(blocks), kTile.threads,
                             kTile.smem_bytes, stream, p),
                    "cgemm_3xtf32_sm90 kernel");
}

// The kernel for the tile ChooseTile picked.
template <bool kWide>
absl::Status LaunchTile(const Tile& tile, const Params& p, cudaStream_t stream) {
  if (tile.wgs == 2) {
    return tile.n_cols == 32 ? Launch<2, 32, kWide>(p, stream) : Launch<2, 56, kWide>(p, stream);
  }
  return tile.n_cols == 32 ? Launch<1, 32, kWide>(p, stream) : Launch<1, 56, kWide>(p, stream);
}

}  // namespace
}  // namespace cgemm_3xtf32_sm90

bool CgemmSm90Supported() { return RunsSm90aCode(); }

absl::Status CgemmConjBatched3xTf32Sm90(const fft_tiled::GemmLayout& l, const void* a,
                                       const void* b, void* c, cudaStream_t stream) {
  using namespace cgemm_3xtf32_sm90;  // NOLINT: the file's own internals
  const Tile tile = ChooseTile(l);
  const Grid grid = MakeGrid(l, tile);
  Params p{cgemm_3xtf32::MakeMixParams<float2>(l, a, b, c, grid.tiles_m, grid.tiles_n)};
  if (grid.items > std::numeric_limits<int>::max() / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("cgemm_3xtf32: ", grid.items, " work items exceed the kernel's int range"));
  }
  p.items = static_cast<int>(grid.items);
  const bool wide = reinterpret_cast<uintptr_t>(b) % 16 == 0 && l.ldb % 2 == 0 &&
                    l.stride_b % 2 == 0;
  return wide ? LaunchTile<true>(tile, p, stream) : LaunchTile<false>(tile, p, stream);
}

}  // namespace conv2d
