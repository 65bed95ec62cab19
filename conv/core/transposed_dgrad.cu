#include "conv/core/transposed_dgrad.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "conv/arch/pdl.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace {

// w'[g*Cg + c, o, p, q] = w[g*Cog + o, c, Kh-1-p, Kw-1-q], one thread per element of w' (the
// writes coalesced; the reads of a warp span a few filters).
__global__ void TransposeFilterKernel(const float* __restrict__ w, float* __restrict__ wt,
                                      int64_t cg, int64_t og, int64_t kh, int64_t kw,
                                      int64_t total) {
  const int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (e < total) wt[e] = w[TransposedFilterSource(e, cg, og, kh, kw)];
}

constexpr size_t kAlign = 256;

size_t FilterBytes(const Shape& s) {
  return (static_cast<size_t>(s.filter_elements()) * sizeof(float) + kAlign - 1) / kAlign * kAlign;
}

class TransposedDgradRunner : public Runner {
 public:
  TransposedDgradRunner(const Shape& dgrad, std::unique_ptr<Runner> forward)
      : s_(dgrad), forward_(std::move(forward)) {}
  size_t workspace_bytes() const override {
    return kAlign + FilterBytes(s_) + forward_->workspace_bytes();
  }
  bool records_launches() const override { return forward_->records_launches(); }

  absl::Status Run(const RunArgs& a) const override {
    const uintptr_t base = reinterpret_cast<uintptr_t>(a.workspace);
    float* wt = reinterpret_cast<float*>((base + kAlign - 1) / kAlign * kAlign);
    const int64_t total = s_.filter_elements();
    constexpr int kThreads = 256;
    RETURN_IF_ERROR(CudaStatus(
        LaunchPdl(/*pdl=*/false, TransposeFilterKernel,
                  dim3(static_cast<unsigned>((total + kThreads - 1) / kThreads)), kThreads, 0,
                  a.stream, a.w, wt, s_.in_per_group(), s_.out_per_group(), s_.kernel_h,
                  s_.kernel_w, total),
        "transposed dgrad: filter transform"));
    RunArgs f;
    f.x = a.dy;
    f.w = wt;
    f.y = a.dx;
    f.workspace = reinterpret_cast<char*>(wt) + FilterBytes(s_);
    f.workspace_bytes = forward_->workspace_bytes();
    f.stream = a.stream;
    return forward_->Run(f);
  }

 private:
  Shape s_;
  std::unique_ptr<Runner> forward_;
};

std::unique_ptr<Runner> MakeTransposedDgradRunner(const Shape& dgrad,
                                                  std::unique_ptr<Runner> forward) {
  return std::make_unique<TransposedDgradRunner>(dgrad, std::move(forward));
}

// Linked into every binary that links the plan (alwayslink): Algorithm::Initialize finds it.
const bool registered = (transposed_dgrad_factory = &MakeTransposedDgradRunner, true);

}  // namespace
}  // namespace conv2d
