// The 3xTF32 channel mix on Hopper's warpgroup MMA (wgmma, sm_90a): the layout algebra and the
// reasons are in cgemm_3xtf32_sm90_internal.h. cgemm_3xtf32.cu dispatches here on sm_90 devices.
//
// Per CTA: kWgs warpgroups (64 n rows each) by kN m columns; a 256-thread CTA holds its running
// sums and partials (2 x kN floats each) and the next stage's operands in registers, so one CTA
// runs per SM and the grid is persistent (one CTA per SM walking the work items).
// Per stage of kBk = 16 complex k:
//   1. split this stage's filter fragments (loaded one stage ahead) into TF32 hi/lo
//   2. wgmma.fence; 4 K steps x 6 wgmma (Re and Im x lo*hi, hi*lo, hi*hi); commit
//   3. issue the global loads of the next stage's operands (they fly while the tensor cores run)
//   4. wait; fold the partials into the running sums; at an item's last stage, store C
//   5. split the next stage's input-spectrum copies into the other shared buffer; fence.proxy.async;
//      barrier
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/cgemm_3xtf32_internal.h"
#include "conv/cgemm_3xtf32_sm90.h"
#include "conv/cgemm_3xtf32_sm90_internal.h"
#include "conv/cuda_status.h"
#include "conv/status_macros.h"

namespace conv2d {
namespace cgemm_3xtf32_sm90 {
namespace {

using cgemm_3xtf32::SplitTf32;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CONV2D_HAS_WGMMA 1
#else
#define CONV2D_HAS_WGMMA 0
#endif

struct Params {
  const float2* a;
  const float2* b;
  float2* c;
  int m, n, k, lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;
  int tiles_m, tiles_n;
  int64_t items;
};

template <int kN>
struct Cols {};

#if CONV2D_HAS_WGMMA
// d (64 x kN, fp32) = a (64 x 8, TF32 registers) * b (8 x kN, TF32 in shared memory) + (scale_d ?
// d : 0), issued by the whole warpgroup, completing asynchronously (wgmma.wait_group).
__device__ __forceinline__ void Wgmma(float (&d)[16], const uint32_t (&a)[4], uint64_t desc,
                                      int scale_d, Cols<32>) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

__device__ __forceinline__ void Wgmma(float (&d)[28], const uint32_t (&a)[4], uint64_t desc,
                                      int scale_d, Cols<56>) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %33, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n56k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27}, "
      "{%28, %29, %30, %31}, %32, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaWaitAll() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Ties a register to this point of the program: reads of accumulators after the wait cannot be
// hoisted above it.
__device__ __forceinline__ void PinRegister(float& r) { asm volatile("" : "+f"(r)::"memory"); }
// Makes the compiler compute a wgmma operand before this point (before the wgmma.fence): an
// operand register written between two wgmma makes ptxas insert a warpgroup.arrive there.
__device__ __forceinline__ void PinOperand(uint32_t& r) { asm volatile("" : "+r"(r)); }
__device__ __forceinline__ void PinOperand(uint64_t& r) { asm volatile("" : "+l"(r)); }
// Makes this thread's generic-proxy shared stores visible to the tensor cores' async proxy.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#endif

template <int kWgs, int kN>
__global__ void __launch_bounds__(128 * kWgs, 1) CgemmConjSm90Kernel(const __grid_constant__ Params p) {
#if CONV2D_HAS_WGMMA
  constexpr Tile kT = MakeTile(kWgs, kN);
  constexpr int kThreads = 128 * kWgs;
  constexpr int kCopies = CopiesPerThread(kN, kThreads);
  constexpr int kAcc = kN / 2;
  constexpr uint32_t kSign = 0x80000000u;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = (tid >> 5) & 3, wg = tid >> 7;
  const int t = lane & 3;
  const int chunks = (p.k + kBk - 1) / kBk;
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  float2 fa[kSteps][2];  // the filter fragments of a stage: K step s, rows g and g + 8
  float2 xb[kCopies];    // this thread's copies of a stage's input-spectrum tile

  auto load = [&](int64_t item, int chunk) {
    const Item it = ItemOf(item, p.tiles_m, p.tiles_n);
    const float2* A = p.a + it.f * p.stride_a;
    const float2* B = p.b + it.f * p.stride_b;
    const int l0 = chunk * kBk;
    const int j0 = it.tn * (kRowsPerWg * kWgs) + kRowsPerWg * wg;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int j = j0 + FragRow(warp, lane, h), l = l0 + 4 * s + t;
        fa[s][h] = j < p.n && l < p.k ? __ldg(B + j + static_cast<int64_t>(l) * p.ldb)
                                      : make_float2(0.0f, 0.0f);
      }
    }
    const int i0 = it.tm * kN;
#pragma unroll
    for (int r = 0; r < kCopies; ++r) {
      const Copy cp = CopyOf(kN, kThreads, tid, r);
      const int i = i0 + cp.c, l = l0 + cp.kk;
      xb[r] = cp.valid && i < p.m && l < p.k ? __ldg(A + i + static_cast<int64_t>(l) * p.lda)
                                             : make_float2(0.0f, 0.0f);
    }
  };
  // The copies, split, into buffer `buf`: real parts at K slot kk % 4, imaginary at + 4.
  auto store = [&](int buf) {
    unsigned char* hi_plane = smem + buf * kT.buffer_bytes;
    unsigned char* lo_plane = hi_plane + kT.plane_bytes;
#pragma unroll
    for (int r = 0; r < kCopies; ++r) {
      const Copy cp = CopyOf(kN, kThreads, tid, r);
      if (!cp.valid) continue;
      const int s = cp.kk >> 2, q = cp.kk & 3;
      uint32_t hi, lo;
      SplitTf32(xb[r].x, hi, lo);
      *reinterpret_cast<uint32_t*>(hi_plane + PlaneOffset(kN, cp.c, s, q)) = hi;
      *reinterpret_cast<uint32_t*>(lo_plane + PlaneOffset(kN, cp.c, s, q)) = lo;
      SplitTf32(xb[r].y, hi, lo);
      *reinterpret_cast<uint32_t*>(hi_plane + PlaneOffset(kN, cp.c, s, q + 4)) = hi;
      *reinterpret_cast<uint32_t*>(lo_plane + PlaneOffset(kN, cp.c, s, q + 4)) = lo;
    }
    FenceProxyAsync();
  };

  int64_t item = blockIdx.x;
  if (item >= p.items) return;
  int chunk = 0, buf = 0;
  load(item, 0);
  store(0);
  __syncthreads();

  float run_re[kAcc], run_im[kAcc], par_re[kAcc], par_im[kAcc];
#pragma unroll
  for (int v = 0; v < kAcc; ++v) run_re[v] = run_im[v] = par_re[v] = par_im[v] = 0.0f;

  while (true) {
    // 1. A fragments: Re uses slots (Br, Bi), Im uses (-Bi, Br); the split commutes with negation.
    uint32_t re_hi[kSteps][4], re_lo[kSteps][4], im_hi[kSteps][4], im_lo[kSteps][4];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      SplitTf32(fa[s][0].x, re_hi[s][0], re_lo[s][0]);
      SplitTf32(fa[s][1].x, re_hi[s][1], re_lo[s][1]);
      SplitTf32(fa[s][0].y, re_hi[s][2], re_lo[s][2]);
      SplitTf32(fa[s][1].y, re_hi[s][3], re_lo[s][3]);
      im_hi[s][0] = re_hi[s][2] ^ kSign;
      im_hi[s][1] = re_hi[s][3] ^ kSign;
      im_hi[s][2] = re_hi[s][0];
      im_hi[s][3] = re_hi[s][1];
      im_lo[s][0] = re_lo[s][2] ^ kSign;
      im_lo[s][1] = re_lo[s][3] ^ kSign;
      im_lo[s][2] = re_lo[s][0];
      im_lo[s][3] = re_lo[s][1];
    }
    const Item cur = ItemOf(item, p.tiles_m, p.tiles_n);
    const bool last_chunk = chunk == chunks - 1;
    const int64_t next_item = last_chunk ? item + gridDim.x : item;
    const int next_chunk = last_chunk ? 0 : chunk + 1;
    const bool has_next = next_item < p.items;

    // 2. The stage on the tensor cores, small terms first; the first product starts the partials.
    const uint32_t stage = smem_base + buf * kT.buffer_bytes;
    uint64_t desc_hi[kSteps], desc_lo[kSteps];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      desc_hi[s] = Descriptor(stage + s * (kN / 8) * kStrideBytes);
      desc_lo[s] = Descriptor(stage + kT.plane_bytes + s * (kN / 8) * kStrideBytes);
      PinOperand(desc_hi[s]);
      PinOperand(desc_lo[s]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        PinOperand(re_hi[s][e]);
        PinOperand(re_lo[s][e]);
        PinOperand(im_hi[s][e]);
        PinOperand(im_lo[s][e]);
      }
    }
    WgmmaFence();
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      Wgmma(par_re, re_lo[s], desc_hi[s], s > 0, Cols<kN>());
      Wgmma(par_im, im_lo[s], desc_hi[s], s > 0, Cols<kN>());
      Wgmma(par_re, re_hi[s], desc_lo[s], 1, Cols<kN>());
      Wgmma(par_im, im_hi[s], desc_lo[s], 1, Cols<kN>());
      Wgmma(par_re, re_hi[s], desc_hi[s], 1, Cols<kN>());
      Wgmma(par_im, im_hi[s], desc_hi[s], 1, Cols<kN>());
    }
    WgmmaCommit();

    // 3. The next stage's operands, in flight while the tensor cores work.
    if (has_next) load(next_item, next_chunk);

    // 4. Fold; store C after an item's last stage.
    WgmmaWaitAll();
#pragma unroll
    for (int v = 0; v < kAcc; ++v) {
      PinRegister(par_re[v]);
      PinRegister(par_im[v]);
      run_re[v] += par_re[v];
      run_im[v] += par_im[v];
    }
    if (last_chunk) {
      float2* C = p.c + cur.f * p.stride_c;
      const int j0 = cur.tn * (kRowsPerWg * kWgs) + kRowsPerWg * wg;
      const int i0 = cur.tm * kN;
#pragma unroll
      for (int v = 0; v < kAcc; v += 2) {
        const int j = j0 + AccRow(warp, lane, v), i = i0 + AccCol(lane, v);
        if (j < p.n && i < p.m) {
          float2* dst = C + static_cast<int64_t>(j) * p.ldc + i;
          if (i + 1 < p.m) {
            if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
              *reinterpret_cast<float4*>(dst) =
                  make_float4(run_re[v], run_im[v], run_re[v + 1], run_im[v + 1]);
            } else {
              dst[0] = make_float2(run_re[v], run_im[v]);
              dst[1] = make_float2(run_re[v + 1], run_im[v + 1]);
            }
          } else {
            dst[0] = make_float2(run_re[v], run_im[v]);
          }
        }
        run_re[v] = run_im[v] = run_re[v + 1] = run_im[v + 1] = 0.0f;
      }
    }
    if (!has_next) break;

    // 5. The next stage into the other buffer (its last readers finished before the last barrier).
    store(buf ^ 1);
    __syncthreads();
    buf ^= 1;
    item = next_item;
    chunk = next_chunk;
  }
#endif
}

template <int kWgs, int kN>
absl::Status Launch(const Params& p, cudaStream_t stream) {
  constexpr Tile kTile = MakeTile(kWgs, kN);
  auto* kernel = &CgemmConjSm90Kernel<kWgs, kN>;
  // Resident CTAs per SM for this kernel, read once (it depends on the device only).
  static const absl::StatusOr<int> slots = [&]() -> absl::StatusOr<int> {
    int device = 0, sms = 0, per_sm = 0;
    RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), "cgemm_3xtf32_sm90: cudaGetDevice"));
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
  }();
  if (!slots.ok()) return slots.status();
  const int64_t blocks = std::min<int64_t>(p.items, *slots);
  kernel<<<static_cast<unsigned>(blocks), kTile.threads, kTile.smem_bytes, stream>>>(p);
  return LaunchStatus("cgemm_3xtf32_sm90 kernel");
}

}  // namespace
}  // namespace cgemm_3xtf32_sm90

bool CgemmSm90Supported() {
  static const bool supported = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      return false;
    }
    return major == 9 && minor == 0;  // sm_90a code runs on sm_90 only
  }();
  return supported;
}

absl::Status CgemmConjBatched3xTf32Sm90(const fft_tiled::GemmLayout& l, const void* a,
                                       const void* b, void* c, cudaStream_t stream) {
  using namespace cgemm_3xtf32_sm90;  // NOLINT: the file's own internals
  const Tile tile = ChooseTile(l);
  const Grid grid = MakeGrid(l, tile);
  Params p;
  p.a = static_cast<const float2*>(a);
  p.b = static_cast<const float2*>(b);
  p.c = static_cast<float2*>(c);
  p.m = l.m;
  p.n = l.n;
  p.k = l.k;
  p.lda = l.lda;
  p.ldb = l.ldb;
  p.ldc = l.ldc;
  p.stride_a = l.stride_a;
  p.stride_b = l.stride_b;
  p.stride_c = l.stride_c;
  p.tiles_m = grid.tiles_m;
  p.tiles_n = grid.tiles_n;
  p.items = grid.items;
  if (tile.wgs == 2) {
    return tile.n_cols == 32 ? Launch<2, 32>(p, stream) : Launch<2, 56>(p, stream);
  }
  return tile.n_cols == 32 ? Launch<1, 32>(p, stream) : Launch<1, 56>(p, stream);
}

}  // namespace conv2d
