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

// out[c] = sum over b, i of t[b, c, i] (db from dy; implicit_gemm_3xtf32's wgrad centering,
// ChannelSums): one CTA per channel, each thread summing a fixed stride of the channel's
// elements in double, then a fixed tree over the threads. The order depends on the shape alone,
// so the sums are bitwise the same on every call; double keeps db within the bar however many
// terms (401,408 on EfficientNet's 112x112 layers at batch 32). Each thread has kUnroll loads in
// flight (a CTA per channel leaves SMs idle where there are few channels, so the memory
// parallelism must come from within: one load at a time measured ~0.15 ms on ConvNeXt's
// 96-channel 56x56 layer, round 96), added in their fixed order.
constexpr int kChannelSumThreads = 512;
constexpr int kUnroll = 4;
template <class T>
__global__ void __launch_bounds__(kChannelSumThreads)
    ChannelSumKernel(const float* __restrict__ t, T* __restrict__ out, int64_t batch,
                     int64_t channels, int64_t plane) {
  __shared__ double partial[kChannelSumThreads];
  const int64_t o = blockIdx.x;
  double sum = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const float* p = t + (b * channels + o) * plane;
    for (int64_t i0 = threadIdx.x; i0 < plane; i0 += kUnroll * kChannelSumThreads) {
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = i0 + u * kChannelSumThreads;
        v[u] = i < plane ? p[i] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) sum += v[u];
    }
  }
  const double total = BlockSum<kChannelSumThreads>(sum, partial);
  if (threadIdx.x == 0) out[o] = static_cast<T>(total);
}

template <class T>
absl::Status LaunchChannelSums(const float* t, int64_t batch, int64_t channels, int64_t plane,
                               T* out, cudaStream_t stream) {
  return CudaStatus(LaunchPdl(/*pdl=*/false, ChannelSumKernel<T>,
                              dim3(static_cast<unsigned>(channels)), kChannelSumThreads, 0,
                              stream, t, out, batch, channels, plane),
                    "ChannelSums");
}

}  // namespace

absl::Status BiasGrad(const Shape& s, const float* dy, float* db, cudaStream_t stream) {
  return LaunchChannelSums(dy, s.batch, s.out_channels, s.out_h() * s.out_w(), db, stream);
}

absl::Status ChannelSums(const float* t, int64_t batch, int64_t channels, int64_t plane,
                         double* sums, cudaStream_t stream) {
  return LaunchChannelSums(t, batch, channels, plane, sums, stream);
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
