#include "reference/reference_gpu.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace conv2d {
namespace {

constexpr int kOutChannelsPerThread = 4;  // each x load feeds this many output channels

// One thread: output (b, o0 .. o0+3, i, j). Consecutive threads take consecutive j (coalesced x
// loads); w loads are uniform across the warp (one output-channel group per block row).
struct Dims {
  int64_t batch, in_channels, out_channels, height, width, kernel_h, kernel_w;
};

__global__ void ReferenceKernel(Dims s, int64_t oh, int64_t ow, const float* __restrict__ x,
                                const float* __restrict__ w, double* __restrict__ y) {
  const int64_t groups = (s.out_channels + kOutChannelsPerThread - 1) / kOutChannelsPerThread;
  const int64_t pixel = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t bg = blockIdx.y;  // b * groups + group
  if (pixel >= oh * ow) return;
  const int64_t b = bg / groups, o0 = (bg % groups) * kOutChannelsPerThread;
  const int64_t i = pixel / ow, j = pixel % ow;
  double acc[kOutChannelsPerThread] = {};
  for (int64_t c = 0; c < s.in_channels; ++c) {
    const float* xc = x + ((b * s.in_channels + c) * s.height + i) * s.width + j;
    for (int64_t p = 0; p < s.kernel_h; ++p) {
      for (int64_t q = 0; q < s.kernel_w; ++q) {
        const double v = xc[p * s.width + q];
#pragma unroll
        for (int t = 0; t < kOutChannelsPerThread; ++t) {
          const int64_t o = o0 + t;
          if (o < s.out_channels) {
            acc[t] += v * w[((o * s.in_channels + c) * s.kernel_h + p) * s.kernel_w + q];
          }
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kOutChannelsPerThread; ++t) {
    const int64_t o = o0 + t;
    if (o < s.out_channels) y[((b * s.out_channels + o) * oh + i) * ow + j] = acc[t];
  }
}

}  // namespace

absl::Status ReferenceConvGpu(const Shape& s, const float* x, const float* w, double* y64,
                              cudaStream_t stream) {
  const int64_t pixels = s.out_h() * s.out_w();
  const int64_t groups = (s.out_channels + kOutChannelsPerThread - 1) / kOutChannelsPerThread;
  constexpr int kThreads = 128;
  const dim3 grid(static_cast<unsigned>((pixels + kThreads - 1) / kThreads),
                  static_cast<unsigned>(s.batch * groups));
  if (grid.y > 65535) return absl::InvalidArgumentError("ReferenceConvGpu: batch * Cout too large");
  const Dims d{s.batch, s.in_channels, s.out_channels, s.height, s.width, s.kernel_h, s.kernel_w};
  ReferenceKernel<<<grid, kThreads, 0, stream>>>(d, s.out_h(), s.out_w(), x, w, y64);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("ReferenceConvGpu: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace conv2d
