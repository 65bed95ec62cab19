#include "conv/core/bias.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "conv/arch/block_sum.cuh"
#include "conv/arch/pdl.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace {

// One CTA row per (b, o) plane, planes first_plane onward; the plane's elements strided over the
// row's threads. Planes of every size, so 64-bit offsets.
__global__ void AddBiasKernel(const float* __restrict__ bias, float* __restrict__ y,
                              int64_t channels, int64_t plane, int64_t first_plane) {
  const int64_t bo = first_plane + blockIdx.y;
  const float v = bias[bo % channels];
  float* p = y + bo * plane;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < plane;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] += v;
  }
}

// out[c * splits + s] = the sum of part s of channel c's batch*plane elements of t (batch,
// channels, plane), taken in (b, i) order and cut into `splits` equal runs, one CTA each (db from
// dy with one split; implicit_gemm_3xtf32's wgrad centring with enough splits to fill the GPU).
// Each thread sums a fixed stride of its run in double, kUnroll loads in flight, then a fixed
// tree over the threads: the order depends on the shape alone, so the sums are bitwise the same
// on every call; double keeps db within the bar however many terms (401,408 on EfficientNet's
// 112x112 layers at batch 32). The run is one flat index, so that a thread's loads do not wait
// on one image at a time (latency-bound: one CTA per channel over image after image measured
// ~50 us on a 64-channel 56x56 dy at batch 32, session 30; one load at a time ~0.15 ms on
// ConvNeXt's 96-channel 56x56 layer, round 96).
constexpr int kChannelSumThreads = 512;
constexpr int kUnroll = 4;
template <class T>
__global__ void __launch_bounds__(kChannelSumThreads)
    ChannelSumKernel(const float* __restrict__ t, T* __restrict__ out, int64_t channels,
                     int64_t plane, int64_t n, int64_t run, const float* __restrict__ gate,
                     int64_t gate_n) {
  __shared__ double partial[kChannelSumThreads];
  if (gate != nullptr) {
    int any = 0;
    for (int64_t j = threadIdx.x; j < gate_n; j += kChannelSumThreads) any |= gate[j] != 0.0f;
    if (!__syncthreads_or(any)) return;
  }
  const int64_t c = blockIdx.x;
  const int64_t begin = blockIdx.y * run;
  const int64_t end = begin + run < n ? begin + run : n;
  constexpr int64_t kStep = int64_t{kUnroll} * kChannelSumThreads;
  // Element j = begin + threadIdx.x + u * kChannelSumThreads + r * kStep is (b[u], i[u]) at
  // round r, advanced without a division per element.
  int64_t b[kUnroll], i[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t j = begin + threadIdx.x + u * kChannelSumThreads;
    b[u] = j / plane;
    i[u] = j - b[u] * plane;
  }
  const int64_t step_b = kStep / plane, step_i = kStep - step_b * plane;
  double sum = 0;
  for (int64_t j0 = begin + threadIdx.x; j0 < end; j0 += kStep) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      v[u] = j0 + u * kChannelSumThreads < end ? t[(b[u] * channels + c) * plane + i[u]] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      sum += v[u];
      b[u] += step_b;
      i[u] += step_i;
      if (i[u] >= plane) {
        i[u] -= plane;
        ++b[u];
      }
    }
  }
  const double total = BlockSum<kChannelSumThreads>(sum, partial);
  if (threadIdx.x == 0) out[c * gridDim.y + blockIdx.y] = static_cast<T>(total);
}

template <class T>
absl::Status LaunchChannelSums(const float* t, int64_t batch, int64_t channels, int64_t plane,
                               int splits, T* out, cudaStream_t stream,
                               const float* gate = nullptr, int64_t gate_n = 0) {
  const int64_t n = batch * plane;
  const int64_t run = (n + splits - 1) / splits;
  return CudaStatus(LaunchPdl(/*pdl=*/false, ChannelSumKernel<T>,
                              dim3(static_cast<unsigned>(channels), static_cast<unsigned>(splits)),
                              kChannelSumThreads, 0, stream, t, out, channels, plane, n, run,
                              gate, gate_n),
                    "ChannelSums");
}

}  // namespace

absl::Status BiasGrad(const Shape& s, const float* dy, float* db, cudaStream_t stream) {
  return LaunchChannelSums(dy, s.batch, s.out_channels, s.out_h() * s.out_w(), 1, db, stream);
}

int ChannelSumSplits(int64_t batch, int64_t channels, int64_t plane) {
  // About four CTAs per SM of an H100 (a constant, not the device's count: the split sets the
  // order of the sum), each run at least 8192 elements.
  const int64_t by_ctas = (528 + channels - 1) / channels;
  const int64_t by_length = batch * plane / 8192;
  const int64_t splits = by_ctas < by_length ? by_ctas : by_length;
  return static_cast<int>(splits < 1 ? 1 : splits > 65535 ? 65535 : splits);
}

absl::Status ChannelSums(const float* t, int64_t batch, int64_t channels, int64_t plane,
                         double* sums, cudaStream_t stream, const float* gate, int64_t gate_n) {
  return LaunchChannelSums(t, batch, channels, plane, ChannelSumSplits(batch, channels, plane),
                           sums, stream, gate, gate_n);
}

absl::Status AddBias(const Shape& s, const float* bias, float* y, cudaStream_t stream) {
  const int64_t plane = s.out_h() * s.out_w();
  const int64_t planes = s.batch * s.out_channels;
  constexpr int kThreads = 256;
  constexpr int64_t kMaxRows = 65535;  // gridDim.y's limit: more planes take more launches
  const int64_t per_plane = (plane + kThreads - 1) / kThreads;
  const unsigned gx = static_cast<unsigned>(per_plane < 64 ? per_plane : 64);
  for (int64_t first = 0; first < planes; first += kMaxRows) {
    const int64_t count = planes - first < kMaxRows ? planes - first : kMaxRows;
    RETURN_IF_ERROR(CudaStatus(LaunchPdl(/*pdl=*/false, AddBiasKernel,
                                         dim3(gx, static_cast<unsigned>(count)), kThreads, 0,
                                         stream, bias, y, s.out_channels, plane, first),
                               "AddBias"));
  }
  return absl::OkStatus();
}

absl::Status RunWithBias(const Runner& runner, const Shape& shape, const RunArgs& args) {
  absl::Status st = runner.Run(args);
  if (!st.ok() || !shape.has_bias || runner.adds_bias()) return st;
  if (shape.op == Op::kWgrad) return BiasGrad(shape, args.dy, args.db, args.stream);
  return AddBias(shape, args.bias, args.y, args.stream);
}

}  // namespace conv2d
