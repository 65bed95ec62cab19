// "gemm_1x1": 1x1 convolution as one strided-batched cuBLAS SGEMM (gemm_1x1.h
// says why).
//
// Per image b, row-major y_b (Cout x HW) = w (Cout x Cin) x_b (Cin x HW). In
// cuBLAS's column-major terms that is y_b^T (HW x Cout) = x_b^T (HW x Cin) w^T
// (Cin x Cout): every operand is read in place, no transposes, w shared by all
// images (stride 0).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "conv/cublas_handle.h"
#include "conv/gemm_1x1.h"
#include "conv/status_macros.h"

namespace conv2d {
namespace {

using gemm_1x1_internal::kMaxReduction;

// Images per cuBLAS call. cuBLAS takes the batch count as an int; chunks of
// 2^16 - 1 also stay within any grid dimension a batched kernel may map them
// to.
constexpr int64_t kMaxBatchPerCall = 65535;

absl::Status CheckShape(const Shape& s) {
  if (s.kernel_h != 1 || s.kernel_w != 1) {
    return absl::UnimplementedError(
        absl::StrCat("gemm_1x1 takes 1x1 kernels only, not ", s.kernel_h, "x", s.kernel_w));
  }
  if (s.in_channels > kMaxReduction) {
    return absl::UnimplementedError(
        absl::StrCat("gemm_1x1: reduction length Cin = ", s.in_channels, " exceeds ", kMaxReduction,
                     ", beyond which one fp32 accumulator is not verified to "
                     "meet the accuracy bar"));
  }
  const int64_t pixels = s.height * s.width;
  if (pixels > INT_MAX || s.out_channels > INT_MAX) {
    return absl::OutOfRangeError(absl::StrCat(
        "gemm_1x1: H*W = ", pixels, " or Cout = ", s.out_channels, " exceeds cuBLAS's int range"));
  }
  return absl::OkStatus();
}

class Gemm1x1Runner : public Runner {
 public:
  explicit Gemm1x1Runner(const Shape& s) : s_(s), blas_("gemm_1x1") {}

  // Pedantic: fp32 FMA only; TF32 would miss the accuracy bar by 60-470x.
  absl::Status Init() { return blas_.Init(CUBLAS_PEDANTIC_MATH); }

  size_t workspace_bytes() const override { return kCublasWorkspaceBytes; }

  absl::Status Run(const RunArgs& a) const override {
    if (a.workspace == nullptr || a.workspace_bytes < kCublasWorkspaceBytes) {
      return absl::InvalidArgumentError(absl::StrCat("gemm_1x1: workspace of ", a.workspace_bytes,
                                                     " bytes given, ", kCublasWorkspaceBytes,
                                                     " needed"));
    }
    RETURN_IF_ERROR(blas_.Bind(a.stream, a.workspace, kCublasWorkspaceBytes));
    const int m = static_cast<int>(s_.height * s_.width);
    const int n = static_cast<int>(s_.out_channels);
    const int k = static_cast<int>(s_.in_channels);
    const long long stride_x = static_cast<long long>(k) * m;
    const long long stride_y = static_cast<long long>(n) * m;
    const float one = 1.0f, zero = 0.0f;
    for (int64_t b0 = 0; b0 < s_.batch; b0 += kMaxBatchPerCall) {
      const int count = static_cast<int>(std::min(kMaxBatchPerCall, s_.batch - b0));
      RETURN_IF_ERROR(
          blas_.Check(cublasSgemmStridedBatched(blas_.get(), CUBLAS_OP_N, CUBLAS_OP_N, m, n, k,
                                                &one, a.x + b0 * stride_x, m, stride_x, a.w, k, 0,
                                                &zero, a.y + b0 * stride_y, m, stride_y, count),
                      "cublasSgemmStridedBatched"));
    }
    return absl::OkStatus();
  }

 private:
  Shape s_;
  CublasHandle blas_;
};

class Gemm1x1 : public Algorithm {
 public:
  std::string name() const override { return "gemm_1x1"; }
  absl::Status CanImplement(const Shape& s) const override { return CheckShape(s); }
  absl::StatusOr<std::unique_ptr<Runner>> Initialize(const Shape& s) const override {
    RETURN_IF_ERROR(CheckShape(s));
    auto runner = std::make_unique<Gemm1x1Runner>(s);
    RETURN_IF_ERROR(runner->Init());
    return std::unique_ptr<Runner>(std::move(runner));
  }
  // The bytes of x, w and y once at HBM rate, or the fp32 FMAs at cuBLAS's
  // SGEMM rate, whichever is longer; calibrated by tools/fit_auto.py.
  double EstimateSeconds(const Shape& s) const override {
    if (!CheckShape(s).ok()) return std::numeric_limits<double>::infinity();
    return std::max(s.min_bytes() / 3.5e12, s.flops() / 45e12) + 5e-6;
  }
};

}  // namespace

void RegisterGemm1x1(Registry& registry) { (void)registry.Add(std::make_unique<Gemm1x1>()); }

}  // namespace conv2d
