#include "conv/algorithms/depthwise/depthwise_dgrad.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
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

// One CTA's chunk of one dx plane (dx_pass.cuh). The channel's zero term (conv/shape.h: a
// non-finite tap reaches every dx of its channel) by a vote over its mult x taps filter values.
__global__ void __launch_bounds__(kDxPassThreads)
    DepthwiseDgradKernel(const float* __restrict__ dy, const float* __restrict__ w,
                         float* __restrict__ dx, const FoldMap m, int mult, int64_t channels,
                         int chunks) {
  DxPass(
      m, dx, chunks,
      [&](int64_t bc) {
        const int64_t taps = int64_t{m.kh} * m.kw, n = mult * taps;
        const float* f = DepthwiseChannelFilter(w, bc % channels, mult, taps);
        bool finite = true;
        for (int64_t e = threadIdx.x; e < n; e += blockDim.x) finite &= isfinite(f[e]);
        return __syncthreads_and(finite) ? 0.0f : __int_as_float(0x7fc00000);
      },
      [&](int64_t bc, int y, int x) {
        return DepthwiseDgradPixel<float>(m, mult, dy, w, bc / channels, bc % channels,
                                          channels, y, x);
      });
}

struct DgradConfig {
  FoldMap map;
};

class DgradRunner : public Runner {
 public:
  DgradRunner(const Shape& s, const FoldMap& m) : s_(s), m_(m) {}
  size_t workspace_bytes() const override { return 0; }
  bool records_launches() const override { return true; }
  absl::Status Run(const RunArgs& a) const override {
    const DxPassDims d = DxPassDimsFor(s_.batch * s_.in_channels, s_.height * s_.width);
    return CudaStatus(LaunchPdl(false, DepthwiseDgradKernel, dim3(d.blocks), d.threads, 0,
                                a.stream, a.dy, a.w, a.dx, m_,
                                static_cast<int>(s_.out_per_group()), s_.in_channels, d.chunks),
                      "depthwise_dgrad kernel launch");
  }

 private:
  Shape s_;
  FoldMap m_;
};

class DepthwiseDgrad : public AlgorithmWithConfig<DgradConfig> {
 public:
  std::string name() const override { return "depthwise_dgrad"; }
  // Not fitted (no measurement yet): the model's own times.
  double calibration() const override { return 1.0; }
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
    RETURN_IF_ERROR(CheckFitsInt32(s, "depthwise_dgrad"));
    const int64_t kMaxPlane = std::numeric_limits<int32_t>::max();
    if (s.height * s.width > kMaxPlane || s.out_h() * s.out_w() > kMaxPlane ||
        s.out_per_group() * s.kernel_h * s.kernel_w > kMaxPlane) {
      return absl::OutOfRangeError("depthwise_dgrad: a plane or a channel's filter of 2^31 "
                                   "or more elements");
    }
    DgradConfig c;
    c.map = MakeFoldMap(s);
    const double bytes = 4.0 * static_cast<double>(s.input_elements() + s.output_elements() +
                                                   s.filter_elements());
    const double fmas = static_cast<double>(s.output_elements()) * s.kernel_h * s.kernel_w;
    *seconds = std::max(bytes / 3e12, fmas / 20e12) + 3e-6;
    return c;
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const DgradConfig& c,
                                                const DeviceInfo& device) const override {
    (void)device;
    return std::unique_ptr<Runner>(new DgradRunner(s, c.map));
  }
};

}  // namespace
}  // namespace depthwise_internal

std::unique_ptr<Algorithm> MakeDepthwiseDgrad() {
  return std::make_unique<depthwise_internal::DepthwiseDgrad>();
}

}  // namespace conv2d
