// "direct": the GPU oracle. One thread per output element, the whole sum in fp64, 64-bit indices so
// that any shape the plan accepts works, every part of the geometry and the bias; the backward
// by definition as well (direct_kernels.cuh: dgrad one thread per dx element, wgrad one CTA per dw
// element and db). Correctness over speed; auto never picks it.
#include <cuda_runtime.h>

#include <limits>

#include "conv/core/cuda_status.h"
#include "conv/algorithms/direct/direct.h"
#include "conv/algorithms/direct/direct_kernels.cuh"

namespace conv2d {
namespace {

// Every part of the geometry (conv/shape.h): taps outside the image read zero.
__global__ void DirectKernel(const float* __restrict__ x, const float* __restrict__ w,
                             const float* __restrict__ bias, float* __restrict__ y,
                             DirectGeometry g) {
  const int64_t total = g.batch * g.cout * g.oh * g.ow;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const NchwIndex at = NchwOf(idx, g.cout, g.oh, g.ow);
    const int64_t b = at.n, o = at.c, i = at.row, j = at.col;
    const int64_t c0 = (o / g.cout_g) * g.cin_g;  // the group's first input channel
    double acc = bias != nullptr ? static_cast<double>(bias[o]) : 0.0;
    for (int64_t c = 0; c < g.cin_g; ++c) {
      const float* xc = x + (b * g.cin + c0 + c) * g.h * g.w;
      const float* wp = w + (o * g.cin_g + c) * g.kh * g.kw;
      for (int64_t p = 0; p < g.kh; ++p) {
        const int64_t r = i * g.stride_h - g.pad_top + p * g.dilation_h;
        for (int64_t q = 0; q < g.kw; ++q) {
          const int64_t col = j * g.stride_w - g.pad_left + q * g.dilation_w;
          // Padding taps multiply a zero (a non-finite filter tap reaches them, as in F.conv2d).
          const bool inside = r >= 0 && r < g.h && col >= 0 && col < g.w;
          const double v = inside ? static_cast<double>(xc[r * g.w + col]) : 0.0;
          acc += v * static_cast<double>(wp[p * g.kw + q]);
        }
      }
    }
    y[idx] = static_cast<float>(acc);
  }
}

class DirectRunner : public Runner {
 public:
  explicit DirectRunner(const Shape& s) : s_(s) {}
  size_t workspace_bytes() const override { return 0; }
  bool adds_bias() const override { return true; }
  absl::Status Run(const RunArgs& a) const override {
    if (s_.op != Op::kFprop) {
      return CudaStatus(LaunchDirectBackward<float>(s_, a.x, a.w, a.dy, a.dx, a.dw, a.db, a.stream),
                        "direct backward kernel launch");
    }
    const int threads = 256;
    const int64_t blocks64 = (s_.output_elements() + threads - 1) / threads;
    const int blocks = static_cast<int>(blocks64 < (1 << 20) ? blocks64 : (1 << 20));
    DirectKernel<<<blocks, threads, 0, a.stream>>>(a.x, a.w, a.bias, a.y, DirectGeometry::Of(s_));
    return LaunchStatus("direct kernel launch");
  }

 private:
  Shape s_;
};

// Reference only: an infinite estimate keeps it out of auto's choice.
class Direct : public Algorithm {
 public:
  std::string name() const override { return "direct"; }
  double calibration() const override { return 1.0; }  // never ranked
  Geometry geometry() const override { return Geometry{true, true, true, true}; }
  bool Computes(Op) const override { return true; }
  // The backward's sums are fp64 however long (one rounding at the end); the forward keeps the
  // rule of the fp32 methods it is the oracle for.
  absl::Status WithinContract(const Shape& shape) const override {
    if (shape.op != Op::kFprop) return absl::OkStatus();
    return DirectSummationWithinContract(shape);
  }
  absl::StatusOr<Proposal> ProposeFor(const Shape&, const DeviceInfo&) const override {
    Proposal p;
    p.estimated_seconds = std::numeric_limits<double>::infinity();
    return p;
  }
  absl::StatusOr<std::unique_ptr<Runner>> InitializeFor(const Shape& s, const Proposal&,
                                                        const DeviceInfo&) const override {
    return std::unique_ptr<Runner>(new DirectRunner(s));
  }
};

}  // namespace

std::unique_ptr<Algorithm> MakeDirect() { return std::make_unique<Direct>(); }

}  // namespace conv2d
