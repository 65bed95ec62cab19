// "direct": the GPU oracle. One thread per output element, the whole sum in fp64, 64-bit indices so
// that any shape the plan accepts works. Correctness over speed; auto never picks it.
#include <cuda_runtime.h>

#include <limits>

#include "conv/core/cuda_status.h"
#include "conv/algorithms/direct/direct.h"

namespace conv2d {
namespace {

__global__ void DirectKernel(const float* __restrict__ x, const float* __restrict__ w,
                             float* __restrict__ y, int64_t batch, int64_t cin, int64_t cout,
                             int64_t h, int64_t wd, int64_t kh, int64_t kw) {
  const int64_t oh = h - kh + 1, ow = wd - kw + 1;
  const int64_t total = batch * cout * oh * ow;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = idx % ow;
    const int64_t i = (idx / ow) % oh;
    const int64_t o = (idx / (ow * oh)) % cout;
    const int64_t b = idx / (ow * oh * cout);
    double acc = 0.0;
    for (int64_t c = 0; c < cin; ++c) {
      const float* xp = x + ((b * cin + c) * h + i) * wd + j;
      const float* wp = w + (o * cin + c) * kh * kw;
      for (int64_t p = 0; p < kh; ++p) {
        for (int64_t q = 0; q < kw; ++q) {
          acc += static_cast<double>(xp[p * wd + q]) * static_cast<double>(wp[p * kw + q]);
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
  absl::Status Run(const RunArgs& a) const override {
    const int threads = 256;
    const int64_t blocks64 = (s_.output_elements() + threads - 1) / threads;
    const int blocks = static_cast<int>(blocks64 < (1 << 20) ? blocks64 : (1 << 20));
    DirectKernel<<<blocks, threads, 0, a.stream>>>(a.x, a.w, a.y, s_.batch, s_.in_channels,
                                                   s_.out_channels, s_.height, s_.width,
                                                   s_.kernel_h, s_.kernel_w);
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
  absl::Status WithinContract(const Shape& shape) const override {
    return DirectSummationWithinContract(shape);
  }
  absl::StatusOr<Proposal> Propose(const Shape&, const DeviceInfo&) const override {
    Proposal p;
    p.estimated_seconds = std::numeric_limits<double>::infinity();
    return p;
  }
  absl::StatusOr<std::unique_ptr<Runner>> Initialize(const Shape& s, const Proposal&,
                                                     const DeviceInfo&) const override {
    return std::unique_ptr<Runner>(new DirectRunner(s));
  }
};

}  // namespace

std::unique_ptr<Algorithm> MakeDirect() { return std::make_unique<Direct>(); }

}  // namespace conv2d
