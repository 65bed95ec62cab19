// Round 79: the filter spectrum made inside the channel mix, for whole-image (128x128) tiles.
//
// KernelBot #1 and #2 (N = 4, C = 64, 128x128 images, K = 8 and 16) stay 1.5-2x short of issue 3's
// 10x over cuDNN. Round 75 put the four-kernel design's DRAM roof at the target itself. With the
// whole image as one tile the input and output spectra shrink to 17 MB (no overlap), but the
// filter spectrum grows to 272 MB, so it must never be stored. This times the stage that would
// replace fft_fused's filter kernel and channel mix:
//   RowDft   : G[v][ci][co][ky] = sum_kx w[co][ci][ky][kx] e^(-2 pi i v kx / 128), v < 65;
//              34 MB at K = 16, written once.
//   FusedMix : one CTA per (v, 16 output channels); per chunk of 2 input channels it makes the
//              filter spectrum's column v for all 128 u from G (a 128-point FFT pruned to K
//              nonzero inputs: twiddle, then a 16-point FFT per residue u mod 8), keeps it in
//              shared memory, and mixes: Y[f][co][n] += X[f][ci][n] conj(F[f][co][ci]).
// X and Y use fft_fused's frequency-major layout for a 128x128 tile (f = u * 65 + v, channel
// major, tile minor), so the stage would drop between the existing input and inverse kernels.
// Everything is fp32 on the CUDA cores; the check is against fp64 at sampled outputs, with the
// outputs poisoned first. This is round 79's third version (docs/PERF.md has all three): chunks
// arrive by cp.async, STAGES deep (-DSTAGES=N; 2, 3 and 5 measured the same).
// Built alone:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a filter_in_mix.cu -o filter_in_mix
//   filter_in_mix [--check_only]   (--check_only skips the timings, for compute-sanitizer)
#include <cuda_runtime.h>

#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

constexpr int kT = 128;           // the tile: u < 128, v < 65
constexpr int kV = kT / 2 + 1;
constexpr int kF = kT * kV;       // 8320 frequencies
constexpr int kN = 4;             // images = tiles
constexpr int kC = 64;            // input and output channels
constexpr int kCoBlock = 16;      // output channels per CTA
constexpr int kCiChunk = 2;       // input channels per step
constexpr int kThreads = 256;
#ifndef STAGES
#define STAGES 3
#endif
constexpr int kStages = STAGES;  // X and G chunks in shared memory: one in use, the rest in flight
constexpr int kFStride = kCiChunk * kCoBlock + 2;  // per u, in complex; +2 spreads the banks
constexpr int kXStride = kCiChunk * kN + 2;

__constant__ float2 c_tw[kT];  // exp(-2 pi i k / 128)

#define CK(x)                                                                     \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

__device__ __forceinline__ float2 Add(float2 a, float2 b) {
  return make_float2(a.x + b.x, a.y + b.y);
}
__device__ __forceinline__ float2 Sub(float2 a, float2 b) {
  return make_float2(a.x - b.x, a.y - b.y);
}
__device__ __forceinline__ float2 Mul(float2 a, float2 b) {
  return make_float2(fmaf(a.x, b.x, -a.y * b.y), fmaf(a.x, b.y, a.y * b.x));
}
// d * exp(-2 pi i idx / 128) with idx known at compile time.
template <int idx>
__device__ __forceinline__ float2 Twiddle(float2 d) {
  if constexpr (idx == 0) return d;
  else if constexpr (idx == 32) return make_float2(d.y, -d.x);
  else return Mul(d, c_tw[idx]);
}

// One radix-2 decimation-in-frequency stage of a 16-point FFT on registers.
template <int kHalf, int kS = 0, int kJ = 0>
__device__ __forceinline__ void DifStage(float2 (&z)[16]) {
  if constexpr (kS < 16) {
    if constexpr (kJ < kHalf) {
      const float2 a = z[kS + kJ], b = z[kS + kJ + kHalf];
      z[kS + kJ] = Add(a, b);
      z[kS + kJ + kHalf] = Twiddle<kJ * (kT / (2 * kHalf))>(Sub(a, b));
      DifStage<kHalf, kS, kJ + 1>(z);
    } else {
      DifStage<kHalf, kS + 2 * kHalf, 0>(z);
    }
  }
}

// G[v][ci][co][ky]: the filter rows' DFT along the width, at the 65 kept columns. One thread per
// filter row: it reads its R taps once and writes its 65 outputs, each store coalesced across
// the warp (round 79's first version, one thread per output, took 0.14 ms at K = 16).
template <int R>
__global__ void RowDft(const float* __restrict__ w, float2* __restrict__ g) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;  // (ci * kC + co) * R + ky
  if (r >= kC * kC * R) return;
  const int ky = r % R, co = (r / R) % kC, ci = r / (R * kC);
  float row[R];
  const float4* src = reinterpret_cast<const float4*>(w + ((size_t(co) * kC + ci) * R + ky) * R);
#pragma unroll
  for (int q = 0; q < R / 4; ++q) {
    const float4 p = __ldg(src + q);
    row[4 * q] = p.x;
    row[4 * q + 1] = p.y;
    row[4 * q + 2] = p.z;
    row[4 * q + 3] = p.w;
  }
  for (int v = 0; v < kV; ++v) {
    float re = 0, im = 0;
#pragma unroll
    for (int kx = 0; kx < R; ++kx) {
      const float2 t = c_tw[(v * kx) & (kT - 1)];  // the same address across the warp
      re = fmaf(row[kx], t.x, re);
      im = fmaf(row[kx], t.y, im);
    }
    g[size_t(v) * kC * kC * R + r] = make_float2(re, im);
  }
}

template <int R>
constexpr size_t FusedSmemBytes() {  // conj F, kStages chunks of X and G, twiddles
  return sizeof(float2) * (size_t(kT) * kFStride + kStages * size_t(kT) * kXStride +
                           kStages * size_t(kCiChunk) * kCoBlock * (R + 1) + kT);
}

__device__ __forceinline__ void CpAsync16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                   unsigned(__cvta_generic_to_shared(dst))),
               "l"(src));
}
__device__ __forceinline__ void CpAsync8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(
                   unsigned(__cvta_generic_to_shared(dst))),
               "l"(src));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// kParts (ablation for timing only): 1 the column FFTs alone, 2 the mix alone, 3 both (the real
// kernel; only it is checked).
template <int R, int kParts = 3>
__global__ void __launch_bounds__(kThreads, 2)
    FusedMix(const float2* __restrict__ x, const float2* __restrict__ g, float2* __restrict__ y) {
  static_assert(R <= 16 && R % 4 == 0, "the pruned column FFT takes at most 16 nonzero rows");
  extern __shared__ float4 smem4[];
  constexpr int kXBuf = kT * kXStride, kGBuf = kCiChunk * kCoBlock * (R + 1);
  float2* fs = reinterpret_cast<float2*>(smem4);  // conj F: [u][ci][co]
  float2* xs = fs + kT * kFStride;                 // X: kStages buffers
  float2* gs = xs + kStages * kXBuf;               // G: kStages buffers
  float2* tw = gs + kStages * kGBuf;
  const int v = blockIdx.x, co0 = blockIdx.y * kCoBlock, t = threadIdx.x;
  if (t < kT) tw[t] = c_tw[t];
  const int mu = t & (kT - 1), mh = t >> 7;  // the mix: this thread's u and half of the 16 co
  float2 acc[kN][8];
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[n][j] = make_float2(0.f, 0.f);

  // This thread's share of a chunk's loads, addressed once (round 79's second version computed the
  // addresses per chunk and spent more issue slots on them than on its FFMAs): X [u][ci][n] in
  // 16-byte pieces, G [ci][co][ky] (pair stride R + 1) in 8-byte ones.
  constexpr int kXPieces = kCiChunk * kN / 2, kXCount = kT * kXPieces / kThreads;
  constexpr int kGCount = kCiChunk * kCoBlock * R / kThreads;
  static_assert(kXCount * kThreads == kT * kXPieces, "every thread copies as many X pieces");
  static_assert(kGCount * kThreads == kCiChunk * kCoBlock * R &&
                    (kGCount == 1 || kThreads % (kCoBlock * R) == 0),
                "every thread copies as many G pieces, one input channel apart");
  const float2* xsrc = x + (size_t(t / kXPieces) * kV + v) * kC * kN + 2 * (t % kXPieces);
  const int xdst = (t / kXPieces) * kXStride + 2 * (t % kXPieces);
  const int gk = t % R, gco = (t / R) % kCoBlock, gci = t / (R * kCoBlock);
  const float2* gsrc = g + ((size_t(v) * kC + gci) * kC + co0 + gco) * R + gk;
  const int gdst = (gci * kCoBlock + gco) * (R + 1) + gk;
  auto load_chunk = [&](int c0, int b) {
#pragma unroll
    for (int s = 0; s < kXCount; ++s) {
      CpAsync16(xs + b * kXBuf + xdst + s * (kThreads / kXPieces) * kXStride,
                xsrc + c0 * kN + s * (kThreads / kXPieces) * size_t(kV) * kC * kN);
    }
#pragma unroll
    for (int s = 0; s < kGCount; ++s) {
      CpAsync8(gs + b * kGBuf + gdst + s * (kThreads / (R * kCoBlock)) * kCoBlock * (R + 1),
               gsrc + size_t(c0) * kC * R + s * (kThreads / (R * kCoBlock)) * kC * R);
    }
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    load_chunk(s * kCiChunk, s);
    CpAsyncCommit();
  }
  for (int c0 = 0, buf = 0; c0 < kC; c0 += kCiChunk, buf = buf == kStages - 1 ? 0 : buf + 1) {
    const int ahead = c0 + (kStages - 1) * kCiChunk;
    if (ahead < kC) load_chunk(ahead, buf == 0 ? kStages - 1 : buf - 1);
    CpAsyncCommit();  // possibly empty, so that the wait below always means "this chunk is in"
    CpAsyncWait<kStages - 1>();
    __syncthreads();
    const float2* xb = xs + buf * kXBuf;
    const float2* gb = gs + buf * kGBuf;
    // conj F[u][co][ci] for u = 8a + b: twiddle G by W128^(b ky), then a 16-point FFT over ky.
    for (int i = t; (kParts & 1) && i < kCiChunk * kCoBlock * 8; i += kThreads) {
      const int co = i % kCoBlock, b = (i / kCoBlock) & 7, ci = i / (kCoBlock * 8);
      const float2* gp = gb + (ci * kCoBlock + co) * (R + 1);
      float2 z[16];
#pragma unroll
      for (int k = 0; k < R; ++k) z[k] = Mul(gp[k], tw[(b * k) & (kT - 1)]);
      if constexpr (R <= 8) {  // the second half is zero: the first stage only twiddles
#pragma unroll
        for (int k = R; k < 8; ++k) z[k] = make_float2(0.f, 0.f);
        z[8] = z[0];
        z[9] = Twiddle<8>(z[1]);
        z[10] = Twiddle<16>(z[2]);
        z[11] = Twiddle<24>(z[3]);
        z[12] = Twiddle<32>(z[4]);
        z[13] = Twiddle<40>(z[5]);
        z[14] = Twiddle<48>(z[6]);
        z[15] = Twiddle<56>(z[7]);
      } else {
#pragma unroll
        for (int k = R; k < 16; ++k) z[k] = make_float2(0.f, 0.f);
        DifStage<8>(z);
      }
      DifStage<4>(z);
      DifStage<2>(z);
      DifStage<1>(z);
#pragma unroll
      for (int p = 0; p < 16; ++p) {  // z[p] is output a = bitreverse4(p)
        const int a = ((p & 1) << 3) | ((p & 2) << 1) | ((p & 4) >> 1) | ((p & 8) >> 3);
        fs[(8 * a + b) * kFStride + ci * kCoBlock + co] = make_float2(z[p].x, -z[p].y);
      }
    }
    __syncthreads();
#pragma unroll
    for (int ci = 0; ci < ((kParts & 2) ? kCiChunk : 0); ++ci) {
      float2 xv[kN], fv[8];
      const float4* xp = reinterpret_cast<const float4*>(xb + mu * kXStride + ci * kN);
      const float4* fp =
          reinterpret_cast<const float4*>(fs + mu * kFStride + ci * kCoBlock + mh * 8);
#pragma unroll
      for (int q = 0; q < kN / 2; ++q) {
        const float4 p = xp[q];
        xv[2 * q] = make_float2(p.x, p.y);
        xv[2 * q + 1] = make_float2(p.z, p.w);
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 p = fp[q];
        fv[2 * q] = make_float2(p.x, p.y);
        fv[2 * q + 1] = make_float2(p.z, p.w);
      }
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          acc[n][j].x = fmaf(xv[n].x, fv[j].x, fmaf(-xv[n].y, fv[j].y, acc[n][j].x));
          acc[n][j].y = fmaf(xv[n].x, fv[j].y, fmaf(xv[n].y, fv[j].x, acc[n][j].y));
        }
    }
    __syncthreads();  // fs and this buffer are rewritten next
  }
  float4* yp = reinterpret_cast<float4*>(y + (size_t(mu) * kV + v) * kC * kN +
                                         (co0 + mh * 8) * kN);
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int q = 0; q < kN / 2; ++q)
      yp[j * kN / 2 + q] = make_float4(acc[2 * q][j].x, acc[2 * q][j].y, acc[2 * q + 1][j].x,
                                       acc[2 * q + 1][j].y);
}

struct Buffers {
  float* w;
  float2 *x, *g, *y;
  void* flush;
};
constexpr size_t kFlushBytes = size_t{256} << 20;

// which: 1 RowDft, 2 FusedMix, 3 both; 4 FusedMix's FFTs alone, 5 its mix alone.
template <int R>
void Launch(const Buffers& b, int which) {
  const dim3 grid(kV, kC / kCoBlock);
  constexpr size_t smem = FusedSmemBytes<R>();
  if (which & 1) RowDft<R><<<kC * kC * R / 256, 256>>>(b.w, b.g);
  if (which == 2 || which == 3) FusedMix<R><<<grid, kThreads, smem>>>(b.x, b.g, b.y);
  if (which == 4) FusedMix<R, 1><<<grid, kThreads, smem>>>(b.x, b.g, b.y);
  if (which == 5) FusedMix<R, 2><<<grid, kThreads, smem>>>(b.x, b.g, b.y);
}

// Mean ms over 20 calls after 2 warm-ups; KernelBot's protocol when flushed.
template <int R>
double Time(const Buffers& b, int which, bool flushed) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  double total = 0;
  for (int it = -2; it < 20; ++it) {
    if (flushed) cudaMemsetAsync(b.flush, 0, kFlushBytes);
    cudaEventRecord(e0);
    Launch<R>(b, which);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    if (it >= 0) total += ms;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return total / 20;
}

bool check_only = false;

template <int R>
int Run(unsigned seed) {
  const size_t nx = size_t(kF) * kC * kN, nw = size_t(kC) * kC * R * R,
               ng = size_t(kV) * kC * kC * R;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> hw(nw);
  std::vector<float2> hx(nx), hy(nx);
  for (float& e : hw) e = dist(rng);
  for (float2& e : hx) e = make_float2(dist(rng), dist(rng));
  Buffers b;
  CK(cudaMalloc(&b.w, nw * sizeof(float)));
  CK(cudaMalloc(&b.x, nx * sizeof(float2)));
  CK(cudaMalloc(&b.y, nx * sizeof(float2)));
  CK(cudaMalloc(&b.g, ng * sizeof(float2)));
  CK(cudaMalloc(&b.flush, kFlushBytes));
  CK(cudaMemcpy(b.w, hw.data(), nw * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.x, hx.data(), nx * sizeof(float2), cudaMemcpyHostToDevice));
  CK(cudaMemset(b.y, 0xff, nx * sizeof(float2)));  // NaN: every output must be written
  CK(cudaFuncSetAttribute(FusedMix<R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          int(FusedSmemBytes<R>())));
  CK(cudaFuncSetAttribute(FusedMix<R, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          int(FusedSmemBytes<R>())));
  CK(cudaFuncSetAttribute(FusedMix<R, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          int(FusedSmemBytes<R>())));
  Launch<R>(b, 3);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(hy.data(), b.y, nx * sizeof(float2), cudaMemcpyDeviceToHost));

  size_t nonfinite = 0;
  for (const float2& e : hy) nonfinite += !(std::isfinite(e.x) && std::isfinite(e.y));
  // fp64 at 256 sampled outputs; the error relative to sqrt(sum |X|^2 |F|^2).
  double worst = 0;
  std::uniform_int_distribution<int> pick_f(0, kF - 1), pick_c(0, kC - 1), pick_n(0, kN - 1);
  for (int s = 0; s < 256; ++s) {
    const int f = s < 4 ? (s == 0 ? 0 : s == 1 ? kV - 1 : s == 2 ? kF - kV : kF - 1) : pick_f(rng);
    const int co = pick_c(rng), n = pick_n(rng), u = f / kV, v = f % kV;
    std::complex<double> ref = 0;
    double scale2 = 0;
    for (int ci = 0; ci < kC; ++ci) {
      std::complex<double> F = 0;
      for (int ky = 0; ky < R; ++ky)
        for (int kx = 0; kx < R; ++kx)
          F += double(hw[((size_t(co) * kC + ci) * R + ky) * R + kx]) *
               std::polar(1.0, -2 * M_PI * ((u * ky + v * kx) % kT) / kT);
      const float2 xe = hx[(size_t(f) * kC + ci) * kN + n];
      const std::complex<double> X(xe.x, xe.y);
      ref += X * std::conj(F);
      scale2 += std::norm(X) * std::norm(F);
    }
    const float2 ye = hy[(size_t(f) * kC + co) * kN + n];
    worst = std::max(worst, std::abs(std::complex<double>(ye.x, ye.y) - ref) / std::sqrt(scale2));
  }
  const bool ok = nonfinite == 0 && worst < 1e-5;
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, FusedMix<R>));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, FusedMix<R>, kThreads,
                                                   FusedSmemBytes<R>()));
  std::printf("K=%2d check: %s (non-finite outputs %zu, worst relative error %.2e over 256 "
              "samples); FusedMix %d registers, %zu B shared, %d CTAs/SM, grid %d\n",
              R, ok ? "PASS" : "FAIL", nonfinite, worst, fa.numRegs, FusedSmemBytes<R>(), per_sm,
              kV * (kC / kCoBlock));
  const double mix_fma = double(kF) * kN * kC * kC * 4;
  for (int flushed = check_only ? -1 : 1; flushed >= 0; --flushed) {
    const double t1 = Time<R>(b, 1, flushed), t2 = Time<R>(b, 2, flushed),
                 t3 = Time<R>(b, 3, flushed);
    std::printf("K=%2d %s: RowDft %.4f ms (%.0f MB written), FusedMix %.4f ms (its mix FMAs at "
                "%.1f TFMA/s), both %.4f ms\n",
                R, flushed ? "after flush" : "warm L2    ", t1, ng * 8 / 1e6, t2,
                mix_fma / (t2 * 1e-3) / 1e12, t3);
  }
  const double fft_only = check_only ? 0 : Time<R>(b, 4, false);
  const double mix_only = check_only ? 0 : Time<R>(b, 5, false);
  if (!check_only) {
    std::printf("K=%2d warm L2 ablation: FusedMix with its column FFTs alone %.4f ms, with its "
                "mix alone %.4f ms (%.1f TFMA/s)\n",
                R, fft_only, mix_only, mix_fma / (mix_only * 1e-3) / 1e12);
  }
  CK(cudaGetLastError());
  cudaFree(b.w);
  cudaFree(b.x);
  cudaFree(b.y);
  cudaFree(b.g);
  cudaFree(b.flush);
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  // --check_only: skip the timings (for compute-sanitizer).
  check_only = argc > 1 && std::strcmp(argv[1], "--check_only") == 0;
  float2 tw[kT];
  for (int k = 0; k < kT; ++k) {
    const double a = -2 * M_PI * k / kT;
    tw[k] = make_float2(float(std::cos(a)), float(std::sin(a)));
  }
  CK(cudaMemcpyToSymbol(c_tw, tw, sizeof(tw)));
  const int bad = Run<8>(1) + Run<16>(2);
  std::printf("%s\n", bad == 0 ? "filter_in_mix: all checks passed" : "filter_in_mix: FAILED");
  return bad == 0 ? 0 : 1;
}
