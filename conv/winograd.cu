// "winograd" (see winograd.h; the transforms and the planning: winograd_internal.h).
// Every step is on the caller's stream and every buffer is carved from the caller's workspace;
// y is written only by the last kernel, so a failure in an earlier step leaves it untouched.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "conv/cuda_status.h"
#include "conv/pdl.cuh"
#include "conv/status_macros.h"
#include "conv/winograd.h"
#include "conv/winograd_internal.h"

namespace conv2d {
namespace winograd {
namespace {

// 128 rather than 256: the grids are a few hundred blocks, which smaller blocks spread more evenly
// over 132 SMs.
constexpr int kThreads = 128;

struct TileParams {
  int in_channels, out_channels;
  int height, width, out_h, out_w;
  int tiles_h, tiles_w, tiles;
};

// One thread per filter n = o * Cin + c: U[p][n] for the 36 points (coalesced across n).
__device__ void FilterTransformThread(int n, int filters, const float* __restrict__ w,
                                      Real* __restrict__ u) {
  if (n >= filters) return;
  float g[9];
#pragma unroll
  for (int i = 0; i < 9; ++i) g[i] = w[9 * static_cast<int64_t>(n) + i];
  Real out[kPoints];
  FilterTransform(g, out);
#pragma unroll
  for (int p = 0; p < kPoints; ++p) u[p * static_cast<int64_t>(filters) + n] = out[p];
}

// One thread per (channel c, tile t), n = c * T + t: V[p][n] (coalesced across consecutive
// tiles). The 6x6 window starts at (4 tile row, 4 tile column); past the image it reads zeros
// (those only feed outputs past the image, which are not written).
__device__ void InputTransformThread(int n, const TileParams& k, const float* __restrict__ x,
                                     Real* __restrict__ v) {
  if (n >= k.in_channels * k.tiles) return;
  const TileIndex ti = TileOfThread(n, k.tiles, k.tiles_h, k.tiles_w);
  const int plane = (ti.b * k.in_channels + ti.channel) * k.height * k.width;
  float d[kPoints];
#pragma unroll
  for (int i = 0; i < kTile; ++i) {
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      const int row = ti.row0 + i, col = ti.col0 + j;
      d[kTile * i + j] = row < k.height && col < k.width ? x[plane + row * k.width + col] : 0.0f;
    }
  }
  Real out[kPoints];
  InputTransform(d, out);
  const int64_t stride = static_cast<int64_t>(k.in_channels) * k.tiles;
#pragma unroll
  for (int p = 0; p < kPoints; ++p) v[p * stride + n] = out[p];
}

// Both forward transforms in one launch, the filter's in the first `filter_blocks` blocks: they
// are independent, and each alone is a grid too small to fill the GPU (ncu, (32,256,256,14,3):
// 11.6 and 12.7 us at 21-24% achieved occupancy, latency-bound), so side by side they overlap.
__global__ void __launch_bounds__(kThreads)
    ForwardTransformsKernel(int filter_blocks, int filters, const float* __restrict__ w,
                            Real* __restrict__ u, TileParams k, const float* __restrict__ x,
                            Real* __restrict__ v) {
  PdlLaunchDependents();  // for cuBLAS's GEMM, if it launches with PDL (it then waits for us)
  const int block = static_cast<int>(blockIdx.x);
  if (block < filter_blocks) {
    FilterTransformThread(block * kThreads + threadIdx.x, filters, w, u);
  } else {
    InputTransformThread((block - filter_blocks) * kThreads + threadIdx.x, k, x, v);
  }
}

// One thread per (out channel o, tile t), n = o * T + t: reads M[p][n], writes the tile's
// outputs that lie inside y.
__global__ void __launch_bounds__(kThreads)
    OutputTransformKernel(TileParams k, const Real* __restrict__ m, float* __restrict__ y) {
  PdlWait();  // the products come from cuBLAS's GEMM
  const int n = blockIdx.x * kThreads + threadIdx.x;
  if (n >= k.out_channels * k.tiles) return;
  const int64_t stride = static_cast<int64_t>(k.out_channels) * k.tiles;
  Real mm[kPoints];
#pragma unroll
  for (int p = 0; p < kPoints; ++p) mm[p] = m[p * stride + n];
  Real out[kOut * kOut];
  OutputTransform(mm, out);
  const TileIndex ti = TileOfThread(n, k.tiles, k.tiles_h, k.tiles_w);
  const int plane = (ti.b * k.out_channels + ti.channel) * k.out_h * k.out_w;
#pragma unroll
  for (int i = 0; i < kOut; ++i) {
#pragma unroll
    for (int j = 0; j < kOut; ++j) {
      const int row = ti.row0 + i, col = ti.col0 + j;
      if (row < k.out_h && col < k.out_w) {
        y[plane + row * k.out_w + col] = static_cast<float>(out[kOut * i + j]);
      }
    }
  }
}

absl::Status CublasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("winograd: ", what, ": ", cublasGetStatusName(s), " (",
                                          cublasGetStatusString(s), ")"));
}

int Blocks(int64_t threads) { return static_cast<int>((threads + kThreads - 1) / kThreads); }

class WinogradRunner : public Runner {
 public:
  explicit WinogradRunner(const Shape& s) : layout_(MakeWorkspaceLayout(s)) {
    const Geometry g = MakeGeometry(s);
    k_.in_channels = static_cast<int>(s.in_channels);
    k_.out_channels = static_cast<int>(s.out_channels);
    k_.height = static_cast<int>(s.height);
    k_.width = static_cast<int>(s.width);
    k_.out_h = static_cast<int>(s.out_h());
    k_.out_w = static_cast<int>(s.out_w());
    k_.tiles_h = static_cast<int>(g.tiles_h);
    k_.tiles_w = static_cast<int>(g.tiles_w);
    k_.tiles = static_cast<int>(g.tiles);
  }
  WinogradRunner(const WinogradRunner&) = delete;
  WinogradRunner& operator=(const WinogradRunner&) = delete;
  ~WinogradRunner() override {
    if (blas_ != nullptr) cublasDestroy(blas_);
  }

  absl::Status Init() {
    RETURN_IF_ERROR(CublasStatus(cublasCreate(&blas_), "cublasCreate"));
    // Default math: plain fp64 (DMMA on Hopper); no emulation or reduced precision is opted in.
    return CublasStatus(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }

  size_t workspace_bytes() const override { return layout_.total_bytes; }

  absl::Status Run(const RunArgs& a) const override {
    if (a.workspace == nullptr || a.workspace_bytes < layout_.total_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("winograd: workspace of ", a.workspace_bytes,
                                                     " bytes given, ", layout_.total_bytes,
                                                     " needed"));
    }
    const uintptr_t base_address =
        (reinterpret_cast<uintptr_t>(a.workspace) + kAlignment - 1) / kAlignment * kAlignment;
    char* base = reinterpret_cast<char*>(base_address);
    auto* u = reinterpret_cast<Real*>(base + layout_.offset[kFilter]);
    auto* v = reinterpret_cast<Real*>(base + layout_.offset[kInput]);
    auto* m = reinterpret_cast<Real*>(base + layout_.offset[kProduct]);
    void* blas_work = base + layout_.offset[kBlasWork];
    const int filters = k_.out_channels * k_.in_channels;

    const int filter_blocks = Blocks(filters);
    const int input_blocks = Blocks(static_cast<int64_t>(k_.in_channels) * k_.tiles);
    ForwardTransformsKernel<<<filter_blocks + input_blocks, kThreads, 0, a.stream>>>(
        filter_blocks, filters, a.w, u, k_, a.x, v);
    RETURN_IF_ERROR(LaunchStatus("winograd filter and input transforms"));

    // Per point p, row-major M_p (Cout x T) = U_p (Cout x Cin) V_p (Cin x T); in cuBLAS's
    // column-major terms M_p^T (T x Cout) = V_p^T (T x Cin) U_p^T (Cin x Cout), no transposes.
    RETURN_IF_ERROR(CublasStatus(cublasSetStream(blas_, a.stream), "cublasSetStream"));
    // After cublasSetStream, which resets the handle to cuBLAS's own workspace pool.
    RETURN_IF_ERROR(CublasStatus(cublasSetWorkspace(blas_, blas_work, layout_.bytes[kBlasWork]),
                                 "cublasSetWorkspace"));
    const double one = 1.0, zero = 0.0;
    const long long stride_v = static_cast<long long>(k_.in_channels) * k_.tiles;
    const long long stride_u = static_cast<long long>(k_.out_channels) * k_.in_channels;
    const long long stride_m = static_cast<long long>(k_.out_channels) * k_.tiles;
    RETURN_IF_ERROR(CublasStatus(
        cublasDgemmStridedBatched(blas_, CUBLAS_OP_N, CUBLAS_OP_N, k_.tiles, k_.out_channels,
                                  k_.in_channels, &one, v, k_.tiles, stride_v, u,
                                  k_.in_channels, stride_u, &zero, m, k_.tiles, stride_m,
                                  kPoints),
        "cublasDgemmStridedBatched"));

    return CudaStatus(LaunchPdl(/*pdl=*/true, OutputTransformKernel,
                                Blocks(static_cast<int64_t>(k_.out_channels) * k_.tiles),
                                kThreads, 0, a.stream, k_, static_cast<const Real*>(m), a.y),
                      "winograd output transform");
  }

 private:
  WorkspaceLayout layout_;
  TileParams k_{};
  cublasHandle_t blas_ = nullptr;
};

class Winograd : public Algorithm {
 public:
  std::string name() const override { return "winograd"; }
  absl::Status CanImplement(const Shape& shape) const override { return CheckShape(shape); }
  absl::StatusOr<std::unique_ptr<Runner>> Initialize(const Shape& shape) const override {
    RETURN_IF_ERROR(CheckShape(shape));
    auto runner = std::make_unique<WinogradRunner>(shape);
    RETURN_IF_ERROR(runner->Init());
    return std::unique_ptr<Runner>(std::move(runner));
  }
  double EstimateSeconds(const Shape& shape) const override {
    return CheckShape(shape).ok() ? EstimateCost(shape).seconds
                                  : std::numeric_limits<double>::infinity();
  }
};

}  // namespace
}  // namespace winograd

void RegisterWinograd(Registry& registry) {
  (void)registry.Add(std::make_unique<winograd::Winograd>());
}

}  // namespace conv2d
