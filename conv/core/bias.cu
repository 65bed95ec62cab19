#include "conv/core/bias.h"

#include <cuda_runtime.h>

#include <cstdint>

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

}  // namespace

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
  return AddBias(shape, args.bias, args.y, args.stream);
}

}  // namespace conv2d
