// Round 64: how fast a chain of wgmma m64nNk8 .tf32 runs on one SM when A comes from registers
// (RS, as implicit_gemm_wgmma issues it) or from shared memory (SS), at N = 32, 64, 128, with the
// kernel's grouping: per k8 step three wgmma on one accumulator, commit, wait_group 1; two
// warpgroups per CTA, one or two CTAs per SM. Nothing but the tensor-core instructions (no loads,
// no split) in the first two forms, so those numbers are the ceiling each form can reach; then
// with the kernel's A feed, and with the hybrid of PERF.md round 60; then with the kernel's folds
// (round 66). Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a wgmma_rate.cu -o wgmma_rate
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

__device__ __forceinline__ uint64_t Desc(uint32_t addr) {  // K-major, 128-byte swizzle
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

#define ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
                "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

template <int N, bool kSS>
__device__ __forceinline__ void Mma(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t da,
                                    uint64_t db) {
  if constexpr (N == 32) {
    if constexpr (kSS) {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,"
                   "%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1;\n}\n"
                   : ACC8(0), ACC8(8) : "l"(da), "l"(db));
    } else {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,"
                   "%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1;\n}\n"
                   : ACC8(0), ACC8(8) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
    }
  } else if constexpr (N == 64) {
    if constexpr (kSS) {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,"
                   "%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
                   "%28,%29,%30,%31}, %32, %33, p, 1, 1;\n}\n"
                   : ACC8(0), ACC8(8), ACC8(16), ACC8(24) : "l"(da), "l"(db));
    } else {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,"
                   "%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
                   "%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
                   : ACC8(0), ACC8(8), ACC8(16), ACC8(24)
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
    }
  } else {
    if constexpr (kSS) {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,"
                   "%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
                   "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,"
                   "%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65,"
                   " p, 1, 1;\n}\n"
                   : ACC8(0), ACC8(8), ACC8(16), ACC8(24), ACC8(32), ACC8(40), ACC8(48), ACC8(56)
                   : "l"(da), "l"(db));
    } else {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7,"
                   "%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
                   "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,"
                   "%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
                   "{%64,%65,%66,%67}, %68, p, 1, 1;\n}\n"
                   : ACC8(0), ACC8(8), ACC8(16), ACC8(24), ACC8(32), ACC8(40), ACC8(48), ACC8(56)
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
    }
  }
}

// Each warpgroup: `steps` k8 steps of three wgmma (the kernel's lo*Bhi, hi*Blo, hi*Bhi) on one
// accumulator, commit, wait_group 1. Shared memory: B hi and lo tiles (N x 32 tf32, swizzled),
// then A (64 x 32 per warpgroup).
// kFeed: 0 none (the A registers are constants); 1 the kernel's feed (per step each thread loads
// its 4 A values from an M-major stage, 136 floats per k row, and splits them: hi rounded, lo =
// v - hi; all three wgmma RS); 2 the hybrid (the same loads, lo = v - trunc(v) only; lo*Bhi RS,
// then hi*Blo and hi*Bhi SS with A from a K-major tile, the tensor core truncating it to hi).
// kDepth: wait_group kDepth after each step's commit (the kernel: 1), with kDepth + 1 register
// sets of A fragments.
// kFold: 0 none; 1 the kernel's fold every 16 steps (wait_group 0, then the accumulators added
// into a second register set), both warpgroups on the same steps; 2 the same with warpgroup 1
// half a chunk later (round 66).
template <int N, bool kSS, int kFeed = 0, int kDepth = 1, int kFold = 0>
__global__ void __launch_bounds__(256) Chain(int steps, float* out, long long* cycles) {
  extern __shared__ unsigned char raw[];
  const uint32_t base = (static_cast<uint32_t>(__cvta_generic_to_shared(raw)) + 1023u) & ~1023u;
  const int wg = threadIdx.x / 128;
  const uint32_t b_hi = base, b_lo = base + N * 128, a_s = base + 2 * N * 128 + wg * 64 * 128;
  for (uint32_t i = threadIdx.x * 4; i < 2 * N * 128 + 2 * 64 * 128 + 32 * 136 * 4;
       i += blockDim.x * 4) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(base + i), "r"(0x3f800000u));
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  uint32_t hi[4] = {0x3f800000u, 0x3f800000u, 0x3f800000u, 0x3f800000u};
  uint32_t lo[4] = {0x33800000u, 0x33800000u, 0x33800000u, 0x33800000u};
  // The M-major A stage of feed 1 and 2 (after both warpgroups' K-major A tiles).
  const float* stage = reinterpret_cast<const float*>(raw + (base + 2 * N * 128 + 2 * 64 * 128 -
                                                             static_cast<uint32_t>(
                                                                 __cvta_generic_to_shared(raw))));
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  const int m = wg * 64 + warp * 16 + (lane >> 2), kk = lane & 3;
  uint32_t hs[kDepth + 1][4], ls[kDepth + 1][4];
  float folded[N / 2];
  for (int i = 0; i < N / 2; ++i) folded[i] = 0.f;
  const int fold_phase = kFold == 2 && wg == 1 ? 8 : 0;
  const long long t0 = clock64();
#pragma unroll 12
  for (int s = 0; s < steps; ++s) {
    const int j = s & 3;
    uint32_t(&h)[4] = hs[s % (kDepth + 1)];
    uint32_t(&l)[4] = ls[s % (kDepth + 1)];
    if constexpr (kFeed != 0) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float v = stage[(j * 8 + kk + (r & 2 ? 4 : 0)) * 136 + m + (r & 1 ? 8 : 0)];
        const uint32_t u = __float_as_uint(v);
        h[r] = kFeed == 1 ? (u + 0x1000u) & 0xFFFFE000u : u & 0xFFFFE000u;
        l[r] = __float_as_uint(v - __uint_as_float(h[r]));
      }
    } else {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        h[r] = hi[r];
        l[r] = lo[r];
      }
    }
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    if constexpr (kFeed == 2) {
      Mma<N, false>(d, l, 0, Desc(b_hi) + 2 * j);
      Mma<N, true>(d, h, Desc(a_s) + 2 * j, Desc(b_lo) + 2 * j);
      Mma<N, true>(d, h, Desc(a_s) + 2 * j, Desc(b_hi) + 2 * j);
    } else {
      Mma<N, kSS>(d, l, Desc(a_s) + 2 * j, Desc(b_hi) + 2 * j);
      Mma<N, kSS>(d, h, Desc(a_s) + 2 * j, Desc(b_lo) + 2 * j);
      Mma<N, kSS>(d, h, Desc(a_s) + 2 * j, Desc(b_hi) + 2 * j);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kDepth) : "memory");
    if (kFold != 0 && ((s + fold_phase) & 15) == 15) {
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
      for (int i = 0; i < N / 2; ++i) {
        asm volatile("" : "+f"(d[i])::"memory");
        folded[i] = __fadd_rn(folded[i], d[i]);
      }
    }
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const long long t1 = clock64();
  float sum = 0.f;
  for (int i = 0; i < N / 2; ++i) sum += d[i] + folded[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int N, bool kSS, int kFeed = 0, int kDepth = 1, int kFold = 0>
void Run(int ctas_per_sm, int sms) {
  const int steps = 20000;
  const int ctas = sms * ctas_per_sm;
  // Shared memory sized so that exactly ctas_per_sm CTAs fit on an SM.
  const int smem = ctas_per_sm == 1 ? 150 * 1024 : 100 * 1024;
  auto* k = Chain<N, kSS, kFeed, kDepth, kFold>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  float* out;
  long long* cyc;
  cudaMalloc(&out, sizeof(float) * ctas * 256);
  cudaMalloc(&cyc, sizeof(long long) * ctas);
  k<<<ctas, 256, smem>>>(100, out, cyc);  // warm-up
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  k<<<ctas, 256, smem>>>(steps, out, cyc);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  long long c = 0;
  cudaMemcpy(&c, cyc, sizeof(c), cudaMemcpyDeviceToHost);
  const double flop = 2.0 * 64 * N * 8 * 3 * steps * 2 * ctas;  // two warpgroups per CTA
  const double per_sm_clk = flop / sms / c;                     // TF32 FLOP per SM per cycle
  (void)per_sm_clk;
  const char* form = kFeed == 1   ? "RS, kernel's feed (LDS + split)"
                     : kFeed == 2 ? "hybrid: lo RS (LDS + trunc), hi SS"
                     : kSS        ? "SS (A smem)"
                                  : "RS (A regs)";
  const char* fold = kFold == 1 ? ", folds" : kFold == 2 ? ", staggered folds" : "";
  std::printf("N=%3d ctas/SM=%d %-36s wait_group %d%s: %7.1f TFLOP/s (%s)\n", N, ctas_per_sm, form,
              kDepth, fold, flop / ms / 1e9, cudaGetErrorString(cudaGetLastError()));
  cudaFree(out);
  cudaFree(cyc);
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (int cps : {1, 2}) {
    Run<32, false>(cps, sms);
    Run<32, true>(cps, sms);
    Run<32, false, 1>(cps, sms);
    Run<32, false, 1, 2>(cps, sms);
    Run<32, false, 1, 3>(cps, sms);
    Run<32, false, 2>(cps, sms);
    Run<64, false>(cps, sms);
    Run<64, true>(cps, sms);
    Run<64, false, 1>(cps, sms);
    Run<64, false, 1, 2>(cps, sms);
    Run<64, false, 2>(cps, sms);
    Run<128, false>(cps, sms);
    Run<128, true>(cps, sms);
    Run<128, false, 1>(cps, sms);
    Run<128, false, 2>(cps, sms);
  }
  // The kernel's folds (round 66): BN = 128 runs one CTA per SM, BN = 64 two.
  Run<128, false, 1, 1, 1>(1, sms);
  Run<128, false, 1, 1, 2>(1, sms);
  Run<64, false, 1, 1, 1>(2, sms);
  Run<64, false, 1, 1, 2>(2, sms);
  return 0;
}
