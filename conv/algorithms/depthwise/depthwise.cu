// "depthwise" (depthwise.h). One CTA per kTileH x kTileW block of one output plane: it stages the
// plane's filter and the block's input window (zeros where the window leaves the image: the
// padding is never materialised in global memory) in shared memory, then each thread sums
// Kh*Kw terms for each of its four outputs in fp32 (at most kMaxKernel^2 = 3969 terms, within
// the direct-summation contract's 4608) and adds the bias. At stride 1 and dilation 1 a thread
// slides a window of registers along each kernel row: one shared load per tap for four
// multiply-adds.
#include "conv/algorithms/depthwise/depthwise.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace depthwise_internal {

TileGeometry TileFor(const Shape& s) {
  TileGeometry t;
  t.in_rows = static_cast<int>((kTileH - 1) * s.stride_h + s.span_h());
  t.in_cols = static_cast<int>((kTileW - 1) * s.stride_w + s.span_w());
  // in_pitch = 1 (mod 4): the four rows a warp reads (8 threads of 4 outputs each) fall in
  // distinct banks at stride 1.
  t.in_pitch = (t.in_cols + 3) / 4 * 4 + 1;
  const int64_t filter_floats = (s.kernel_h * s.kernel_w + 3) / 4 * 4;
  t.smem_bytes = 4 * (filter_floats + int64_t{t.in_rows} * t.in_pitch);
  return t;
}

namespace {

struct Params {
  int h, w, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
  int in_channels, out_channels, multiplier;  // multiplier: Cout / Cin outputs per input plane
  int tiles_w;
  int in_rows, in_cols, in_pitch, filter_floats;
};

template <bool kUnitStride>
__global__ void __launch_bounds__(kThreads)
    DepthwiseKernel(const float* __restrict__ x, const float* __restrict__ w,
                    const float* __restrict__ bias, float* __restrict__ y, const Params p) {
  extern __shared__ float smem[];
  float* filter = smem;
  float* tile = smem + p.filter_floats;
  const int tid = static_cast<int>(threadIdx.x);
  const int o = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const int c = o / p.multiplier;
  const int tile_y = static_cast<int>(blockIdx.x) / p.tiles_w;
  const int tile_x = static_cast<int>(blockIdx.x) - tile_y * p.tiles_w;
  const int oy0 = tile_y * kTileH, ox0 = tile_x * kTileW;
  const int iy0 = oy0 * p.sh - p.pt, ix0 = ox0 * p.sw - p.pl;

  const float* wp = w + static_cast<int64_t>(o) * p.kh * p.kw;
  for (int i = tid; i < p.kh * p.kw; i += kThreads) filter[i] = wp[i];
  const float* plane = x + (static_cast<int64_t>(b) * p.in_channels + c) * p.h * p.w;
  for (int i = tid; i < p.in_rows * p.in_cols; i += kThreads) {
    const int r = i / p.in_cols, col = i - r * p.in_cols;
    const int gy = iy0 + r, gx = ix0 + col;
    const bool inside = gy >= 0 && gy < p.h && gx >= 0 && gx < p.w;
    tile[r * p.in_pitch + col] = inside ? plane[gy * p.w + gx] : 0.0f;
  }
  __syncthreads();

  constexpr int kThreadsPerRow = kTileW / kOutputsPerThread;
  const int ty = tid / kThreadsPerRow, tx = tid - ty * kThreadsPerRow;
  const int oy = oy0 + ty, ox = ox0 + tx * kOutputsPerThread;
  if (oy >= p.oh || ox >= p.ow) return;
  float acc[kOutputsPerThread] = {};
  if (kUnitStride) {
    for (int kp = 0; kp < p.kh; ++kp) {
      const float* row = tile + (ty + kp) * p.in_pitch + tx * kOutputsPerThread;
      const float* f = filter + kp * p.kw;
      float win[kOutputsPerThread];
#pragma unroll
      for (int j = 0; j < kOutputsPerThread - 1; ++j) win[j] = row[j];
      for (int kq = 0; kq < p.kw; ++kq) {
        win[kOutputsPerThread - 1] = row[kq + kOutputsPerThread - 1];
        const float fv = f[kq];
#pragma unroll
        for (int j = 0; j < kOutputsPerThread; ++j) acc[j] = fmaf(win[j], fv, acc[j]);
#pragma unroll
        for (int j = 0; j < kOutputsPerThread - 1; ++j) win[j] = win[j + 1];
      }
    }
  } else {
    for (int kp = 0; kp < p.kh; ++kp) {
      const float* row = tile + (ty * p.sh + kp * p.dh) * p.in_pitch + tx * kOutputsPerThread * p.sw;
      const float* f = filter + kp * p.kw;
      for (int kq = 0; kq < p.kw; ++kq) {
        const float fv = f[kq];
#pragma unroll
        for (int j = 0; j < kOutputsPerThread; ++j) {
          acc[j] = fmaf(row[j * p.sw + kq * p.dw], fv, acc[j]);
        }
      }
    }
  }
  const float add = bias != nullptr ? bias[o] : 0.0f;
  float* out = y + ((static_cast<int64_t>(b) * p.out_channels + o) * p.oh + oy) * p.ow + ox;
#pragma unroll
  for (int j = 0; j < kOutputsPerThread; ++j) {
    if (ox + j < p.ow) out[j] = acc[j] + add;
  }
}

class DepthwiseRunner : public Runner {
 public:
  DepthwiseRunner(const Shape& s, const Params& p, int64_t smem_bytes, bool unit)
      : s_(s), p_(p), smem_bytes_(static_cast<int>(smem_bytes)), unit_(unit) {}
  size_t workspace_bytes() const override { return 0; }
  bool adds_bias() const override { return true; }
  absl::Status Run(const RunArgs& a) const override {
    const int tiles_h = (p_.oh + kTileH - 1) / kTileH;
    const dim3 grid(static_cast<unsigned>(tiles_h * p_.tiles_w),
                    static_cast<unsigned>(p_.out_channels), static_cast<unsigned>(s_.batch));
    auto* kernel = unit_ ? &DepthwiseKernel<true> : &DepthwiseKernel<false>;
    kernel<<<grid, kThreads, smem_bytes_, a.stream>>>(a.x, a.w, s_.has_bias ? a.bias : nullptr,
                                                      a.y, p_);
    return LaunchStatus("depthwise kernel launch");
  }

 private:
  Shape s_;
  Params p_;
  int smem_bytes_;
  bool unit_;
};

struct Config {
  Params params;
  int64_t smem_bytes = 0;
  bool unit = false;
};

class Depthwise : public AlgorithmWithConfig<Config> {
 public:
  std::string name() const override { return "depthwise"; }
  // Not yet fitted by tools/fit_auto.py: the model's own times. It is the only algorithm but
  // the oracle that takes depthwise shapes, so auto's choice does not depend on it.
  double calibration() const override { return 1.0; }
  Geometry geometry() const override { return Geometry{true, true, true, true}; }
  absl::Status WithinContract(const Shape& shape) const override {
    return DirectSummationWithinContract(shape);
  }

 protected:
  // The time: the input planes (read once, plus the halo each tile reads again), the filter and
  // the output at 3 TB/s, or the multiply-adds at ~15 T/s (a quarter of the fp32 peak: two shared
  // loads per four), whichever is longer, plus 3 us for the launch.
  absl::StatusOr<Config> Choose(const Shape& s, const DeviceInfo& device,
                                double* seconds) const override {
    if (s.in_per_group() != 1) {
      return absl::UnimplementedError(absl::StrCat(
          "depthwise takes in_channels / groups = 1 only; this shape has ", s.in_per_group()));
    }
    if (s.kernel_h > kMaxKernel || s.kernel_w > kMaxKernel) {
      return absl::UnimplementedError(
          absl::StrCat("depthwise takes kernels up to ", kMaxKernel, " a side"));
    }
    RETURN_IF_ERROR(CheckFitsInt32(s, "depthwise"));
    if (s.out_channels > 65535 || s.batch > 65535) {
      return absl::OutOfRangeError("depthwise: more than 65535 output channels or images");
    }
    const TileGeometry t = TileFor(s);
    if (static_cast<size_t>(t.smem_bytes) > device.shared_memory_per_block_optin) {
      return absl::ResourceExhaustedError(absl::StrCat("depthwise: its tile needs ", t.smem_bytes,
                                                       " bytes of shared memory"));
    }
    Config c;
    Params& p = c.params;
    p.h = static_cast<int>(s.height);
    p.w = static_cast<int>(s.width);
    p.kh = static_cast<int>(s.kernel_h);
    p.kw = static_cast<int>(s.kernel_w);
    p.sh = static_cast<int>(s.stride_h);
    p.sw = static_cast<int>(s.stride_w);
    p.dh = static_cast<int>(s.dilation_h);
    p.dw = static_cast<int>(s.dilation_w);
    p.pt = static_cast<int>(s.pad_top);
    p.pl = static_cast<int>(s.pad_left);
    p.oh = static_cast<int>(s.out_h());
    p.ow = static_cast<int>(s.out_w());
    p.in_channels = static_cast<int>(s.in_channels);
    p.out_channels = static_cast<int>(s.out_channels);
    p.multiplier = static_cast<int>(s.out_per_group());
    p.tiles_w = (p.ow + kTileW - 1) / kTileW;
    const int64_t tiles = int64_t{(p.oh + kTileH - 1) / kTileH} * p.tiles_w;
    if (tiles > std::numeric_limits<int32_t>::max()) {
      return absl::OutOfRangeError("depthwise: too many tiles per plane");
    }
    p.in_rows = t.in_rows;
    p.in_cols = t.in_cols;
    p.in_pitch = t.in_pitch;
    p.filter_floats = static_cast<int>((s.kernel_h * s.kernel_w + 3) / 4 * 4);
    c.smem_bytes = t.smem_bytes;
    c.unit = !s.strided() && !s.dilated();
    const double planes = static_cast<double>(s.batch) * s.out_channels;
    const double staged = planes * tiles * t.in_rows * t.in_cols * 4.0;
    const double bytes = std::max(staged, 4.0 * s.input_elements()) +
                         4.0 * (s.filter_elements() + s.output_elements());
    const double fmas = static_cast<double>(s.output_elements()) * s.kernel_h * s.kernel_w;
    (void)device;
    *seconds = std::max(bytes / 3e12, fmas / 15e12) + 3e-6;
    return c;
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const Config& c,
                                                const DeviceInfo&) const override {
    for (auto* kernel : {&DepthwiseKernel<true>, &DepthwiseKernel<false>}) {
      RETURN_IF_ERROR(CudaStatus(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(c.smem_bytes)),
          "depthwise: cudaFuncSetAttribute (shared memory size)"));
    }
    return std::unique_ptr<Runner>(new DepthwiseRunner(s, c.params, c.smem_bytes, c.unit));
  }
};

}  // namespace
}  // namespace depthwise_internal

std::unique_ptr<Algorithm> MakeDepthwise() {
  return std::make_unique<depthwise_internal::Depthwise>();
}

}  // namespace conv2d
