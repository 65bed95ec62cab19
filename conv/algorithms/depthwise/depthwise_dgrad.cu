#include "conv/algorithms/depthwise/depthwise_dgrad.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/dx_pass.cuh"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace depthwise_internal {
namespace {

// One CTA's chunk of one dx plane (dx_pass.cuh). First the chunk's dy rows (DepthwiseDgradRows)
// of the group's mult output channels and the channel's filter into shared memory, with the
// channel's zero term (conv/shape.h: a non-finite tap reaches every dx of its channel) by a vote
// that is also the barrier; then each pixel from them.
__global__ void __launch_bounds__(kDxPassThreads)
    DepthwiseDgradKernel(const float* __restrict__ dy, const float* __restrict__ w,
                         float* __restrict__ dx, const FoldMap m, int mult, int64_t channels,
                         int chunks, int max_rows) {
  extern __shared__ float smem[];
  float* const window = smem;  // [mult][max_rows][out_w]
  float* const filter = smem + int64_t{mult} * max_rows * m.out_w;  // [mult][taps]
  DyRows rows;
  int64_t window_plane = 0;
  DxPass(
      m, dx, chunks,
      [&](const DxPassChunk& ch) {
        const int taps = m.kh * m.kw;
        rows = DepthwiseDgradRows(m, m.div_w.Div(ch.begin), m.div_w.Div(ch.end - 1));
        window_plane = int64_t{rows.rows} * m.out_w;
        const int64_t plane = int64_t{m.out_h} * m.out_w;
        const float* g = dy + ch.bc * mult * plane + int64_t{rows.lo} * m.out_w;
        for (int k = 0; k < mult; ++k) {
          for (int64_t e = threadIdx.x; e < window_plane; e += blockDim.x) {
            window[k * window_plane + e] = g[k * plane + e];
          }
        }
        const float* f = DepthwiseChannelFilter(w, ch.bc % channels, mult, taps);
        bool finite = true;
        for (int e = threadIdx.x; e < mult * taps; e += blockDim.x) {
          filter[e] = f[e];
          finite &= isfinite(f[e]);
        }
        return __syncthreads_and(finite) ? 0.0f : __int_as_float(0x7fc00000);
      },
      [&](int64_t, int y, int x) {
        return DepthwiseDgradPixel<float>(m, mult, window, rows.lo, window_plane, filter, y, x);
      });
}

// Without an opt-in, so that several CTAs share an SM (the nets' layers take 1-2 KB).
constexpr size_t kMaxSmem = 48 * 1024;

struct DgradConfig {
  FoldMap map;
  int max_rows = 0;    // DepthwiseDgradMaxRows
  size_t smem = 0;     // the window and the filter
};

class DgradRunner : public Runner {
 public:
  DgradRunner(const Shape& s, const DgradConfig& c) : s_(s), c_(c) {}
  size_t workspace_bytes() const override { return 0; }
  bool records_launches() const override { return true; }
  absl::Status Run(const RunArgs& a) const override {
    const DxPassDims d = DxPassDimsFor(s_.batch * s_.in_channels, s_.height * s_.width);
    return CudaStatus(LaunchPdl(false, DepthwiseDgradKernel, dim3(d.blocks), d.threads, c_.smem,
                                a.stream, a.dy, a.w, a.dx, c_.map,
                                static_cast<int>(s_.out_per_group()), s_.in_channels, d.chunks,
                                c_.max_rows),
                      "depthwise_dgrad kernel launch");
  }

 private:
  Shape s_;
  DgradConfig c_;
};

class DepthwiseDgrad : public AlgorithmWithConfig<DgradConfig> {
 public:
  std::string name() const override { return "depthwise_dgrad"; }
  // Fitted by hand to EfficientNet-B0's four strided depthwise dgrads on an H100 (PERF.md round
  // 103: measured over modelled 5.1-8.9x, geometric mean 6.5): the gather's index arithmetic,
  // which the bytes model leaves out. auto keeps it on all four (the phases' calibrated models
  // are 1.2-1.5x its time there) and would give a large strided kernel (31x31/2) to the phases.
  double calibration() const override { return 6.5; }
  Geometry geometry() const override { return Geometry{true, true, true, true}; }
  bool Computes(Op op) const override { return op == Op::kDgrad; }
  // Each dx is a direct fp32 sum of its taps' terms (Cout/groups x Kh x Kw at most).
  absl::Status WithinContract(const Shape& shape) const override {
    return DirectSummationWithinContract(shape);
  }

 protected:
  // The time: dx written and dy and w read once at 3 TB/s, or the multiply-adds (dy's elements
  // times the taps, each once) at 20 T/s, whichever is longer, plus 3 us for the launch.
  absl::StatusOr<DgradConfig> Choose(const Shape& s, const DeviceInfo& device,
                                     double* seconds) const override {
    (void)device;
    if (!s.grouped() || s.in_per_group() != 1) {
      return absl::UnimplementedError(
          "depthwise_dgrad takes groups of one input channel (depthwise) only");
    }
    if (!s.strided()) {
      return absl::UnimplementedError(
          "depthwise_dgrad takes stride > 1 only; at stride 1 the depthwise forward on dy "
          "computes it (transposed_dgrad.h)");
    }
    // Every plane and channel filter is within dx's, dy's and w's element counts, so below 2^31.
    RETURN_IF_ERROR(CheckFitsInt32(s, "depthwise_dgrad"));
    DgradConfig c;
    c.map = MakeFoldMap(s);
    c.max_rows = DepthwiseDgradMaxRows(c.map);
    c.smem = sizeof(float) * static_cast<size_t>(s.out_per_group()) *
             (static_cast<size_t>(c.max_rows) * c.map.out_w + s.kernel_h * s.kernel_w);
    if (c.smem > kMaxSmem) {
      return absl::UnimplementedError(absl::StrCat(
          "depthwise_dgrad: a chunk's dy rows and filter take ", c.smem,
          " bytes of shared memory, more than ", kMaxSmem, " (the stride phases take it)"));
    }
    const double bytes = 4.0 * static_cast<double>(s.input_elements() + s.output_elements() +
                                                   s.filter_elements());
    const double fmas = static_cast<double>(s.output_elements()) * s.kernel_h * s.kernel_w;
    *seconds = std::max(bytes / 3e12, fmas / 20e12) + 3e-6;
    return c;
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const DgradConfig& c,
                                                const DeviceInfo& device) const override {
    (void)device;
    return std::unique_ptr<Runner>(new DgradRunner(s, c));
  }
};

}  // namespace
}  // namespace depthwise_internal

std::unique_ptr<Algorithm> MakeDepthwiseDgrad() {
  return std::make_unique<depthwise_internal::DepthwiseDgrad>();
}

}  // namespace conv2d
