#include "reference/reference_gpu.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/direct/direct_kernels.cuh"

namespace conv2d {
namespace {

constexpr int kOutChannelsPerThread = 4;  // each x load feeds this many output channels

// One thread: output (b, o0 .. o0+3, i, j) of one group (Cout/groups is padded to a multiple of
// four per group). Consecutive threads take consecutive j (coalesced x loads for stride 1); w
// loads are uniform across the warp (one output-channel quad per block row).
struct Dims {
  int64_t batch, in_channels, out_channels, height, width, kernel_h, kernel_w;
  int64_t pad_top, pad_left, stride_h, stride_w, dilation_h, dilation_w, cin_g, cout_g;
  int64_t quads;  // ceil(cout_g / 4) per group
};

__global__ void ReferenceKernel(Dims s, int64_t oh, int64_t ow, const float* __restrict__ x,
                                const float* __restrict__ w, const float* __restrict__ bias,
                                double* __restrict__ y) {
  const int64_t per_batch = s.quads * (s.out_channels / s.cout_g);  // quads of all groups
  const int64_t pixel = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t bq = blockIdx.y;  // b * per_batch + group * quads + quad
  if (pixel >= oh * ow) return;
  const int64_t b = bq / per_batch, gq = bq % per_batch;
  const int64_t g = gq / s.quads;
  const int64_t o0 = g * s.cout_g + (gq % s.quads) * kOutChannelsPerThread;
  const int64_t o_end = (g + 1) * s.cout_g;
  const int64_t i = pixel / ow, j = pixel % ow;
  double acc[kOutChannelsPerThread] = {};
  for (int64_t c = 0; c < s.cin_g; ++c) {
    const float* xc = x + (b * s.in_channels + g * s.cin_g + c) * s.height * s.width;
    for (int64_t p = 0; p < s.kernel_h; ++p) {
      const int64_t r = i * s.stride_h - s.pad_top + p * s.dilation_h;
      for (int64_t q = 0; q < s.kernel_w; ++q) {
        const int64_t col = j * s.stride_w - s.pad_left + q * s.dilation_w;
        // The padding is zeros that are multiplied, as F.conv2d's are: 0 * NaN or 0 * Inf in the
        // filter makes the output NaN.
        const bool inside = r >= 0 && r < s.height && col >= 0 && col < s.width;
        const double v = inside ? xc[r * s.width + col] : 0.0;
#pragma unroll
        for (int t = 0; t < kOutChannelsPerThread; ++t) {
          const int64_t o = o0 + t;
          if (o < o_end) acc[t] += v * w[((o * s.cin_g + c) * s.kernel_h + p) * s.kernel_w + q];
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kOutChannelsPerThread; ++t) {
    const int64_t o = o0 + t;
    if (o < o_end) {
      y[((b * s.out_channels + o) * oh + i) * ow + j] =
          acc[t] + (bias != nullptr ? static_cast<double>(bias[o]) : 0.0);
    }
  }
}

}  // namespace

absl::Status ReferenceConvGpu(const Shape& s, const float* x, const float* w, const float* bias,
                              double* y64, cudaStream_t stream) {
  const int64_t pixels = s.out_h() * s.out_w();
  const int64_t quads = (s.out_per_group() + kOutChannelsPerThread - 1) / kOutChannelsPerThread;
  constexpr int kThreads = 128;
  const int64_t rows = s.batch * s.groups * quads;
  if (rows > 65535) {
    return absl::InvalidArgumentError("ReferenceConvGpu: batch * groups * Cout/groups too large");
  }
  const dim3 grid(static_cast<unsigned>((pixels + kThreads - 1) / kThreads),
                  static_cast<unsigned>(rows));
  const Dims d{s.batch,      s.in_channels, s.out_channels, s.height,        s.width,
               s.kernel_h,   s.kernel_w,    s.pad_top,      s.pad_left,      s.stride_h,
               s.stride_w,   s.dilation_h,  s.dilation_w,   s.in_per_group(), s.out_per_group(),
               quads};
  ReferenceKernel<<<grid, kThreads, 0, stream>>>(d, s.out_h(), s.out_w(), x, w,
                                                 s.has_bias ? bias : nullptr, y64);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("ReferenceConvGpu: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

absl::Status ReferenceGpu(const Shape& s, const Tensors& in, double* out64, cudaStream_t stream) {
  if (s.op == Op::kFprop) return ReferenceConvGpu(s, in.x, in.w, in.bias, out64, stream);
  double* db = s.op == Op::kWgrad && s.has_bias ? out64 + s.filter_elements() : nullptr;
  const cudaError_t e =
      LaunchDirectBackward<double>(s, in.x, in.w, in.dy, out64, out64, db, stream);
  if (e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("ReferenceGpu: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace conv2d
