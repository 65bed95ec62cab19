// "winograd" (see winograd.h; the transforms and the planning: winograd_internal.h).
// Every step is on the caller's stream and every buffer is carved from the caller's workspace;
// y is written only by the last kernel, so a failure in an earlier step leaves it untouched.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "conv/core/cublas_handle.h"
#include "conv/core/cuda_status.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/status_macros.h"
#include "conv/algorithms/winograd/winograd.h"
#include "conv/algorithms/winograd/winograd_internal.h"

namespace conv2d {
namespace winograd {
namespace {

// Each transform kernel gives one tile (or filter) six threads, one per line of its 6x6 tile: a
// thread per tile left the grids at ~17 warps per SM, latency-bound with each thread's 36 loads
// or stores in series (ncu, (32,256,256,14,3): 21-24% achieved occupancy). A 2D transform is a
// pass over the columns and one over the rows, so the threads of one tile trade the
// intermediate through shared memory between the two. The arithmetic is the transform
// functions' of winograd_internal.h, in their order: the results are bitwise those of
// FilterTransform, InputTransform and OutputTransform.
constexpr int kItems = 64;                 // tiles (or filters) per block
constexpr int kThreads = kTile * kItems;  // thread = (line, item), item fastest (coalescing)

struct TileParams {
  int in_channels, out_channels;
  int height, width, out_h, out_w;
  int tiles_h, tiles_w, tiles;
};

struct Lane {
  int item, line;
};
__device__ __forceinline__ Lane LaneOfThread() {
  const int t = static_cast<int>(threadIdx.x);
  return Lane{t % kItems, t / kItems};
}

// The block's filters n0 .. n0+63 (n = o * Cin + c), thread (row i, filter): U[p][n] for the six
// points p of row i (coalesced across n). `staged` holds the block's 64 contiguous 3x3 filters.
__device__ void FilterTransformBlock(int n0, int filters, const float* __restrict__ w,
                                     Real* __restrict__ u, float* staged) {
  const int count = min(kItems, filters - n0) * kKernel * kKernel;
  const float* src = w + static_cast<int64_t>(kKernel * kKernel) * n0;
  for (int e = static_cast<int>(threadIdx.x); e < count; e += kThreads) staged[e] = src[e];
  __syncthreads();
  const Lane l = LaneOfThread();
  const int n = n0 + l.item;
  if (n >= filters) return;
  Real row[kTile];
  FilterTransformRow(staged + kKernel * kKernel * l.item, l.line, row);
#pragma unroll
  for (int j = 0; j < kTile; ++j) {
    u[(kTile * l.line + j) * static_cast<int64_t>(filters) + n] = row[j];
  }
}

// Items n = c * T + t (channel c, tile t). Column pass: thread (column j, item) reads column j of
// the tile's 6x6 window (zeros past the image; those only feed outputs past the image, which are
// not written). Row pass: thread (row i, item) writes V[p][n] for the six points of row i
// (coalesced across consecutive tiles).
__device__ void InputTransformBlock(int n0, const TileParams& k, const float* __restrict__ x,
                                    Real* __restrict__ v, Real (*bt_d)[kTile][kItems]) {
  const Lane l = LaneOfThread();
  const int n = n0 + l.item;
  const bool active = n < k.in_channels * k.tiles;
  if (active) {
    const TileIndex ti = TileOfThread(n, k.tiles, k.tiles_h, k.tiles_w);
    const int plane = (ti.b * k.in_channels + ti.channel) * k.height * k.width;
    const int col = ti.col0 + l.line;
    Real d[kTile];
#pragma unroll
    for (int r = 0; r < kTile; ++r) {
      const int row = ti.row0 + r;
      d[r] = row < k.height && col < k.width ? x[plane + row * k.width + col] : 0.0f;
    }
    Real out[kTile];
    BtRows(d, out);
#pragma unroll
    for (int r = 0; r < kTile; ++r) bt_d[r][l.line][l.item] = out[r];
  }
  __syncthreads();
  if (!active) return;
  Real row[kTile];
#pragma unroll
  for (int j = 0; j < kTile; ++j) row[j] = bt_d[l.line][j][l.item];
  Real out[kTile];
  BtRows(row, out);
  const int64_t stride = static_cast<int64_t>(k.in_channels) * k.tiles;
#pragma unroll
  for (int j = 0; j < kTile; ++j) v[(kTile * l.line + j) * stride + n] = out[j];
}

// Both forward transforms in one launch, the filter's in the first `filter_blocks` blocks: they
// are independent, and each alone underfills the GPU, so side by side they overlap.
__global__ void __launch_bounds__(kThreads)
    ForwardTransformsKernel(int filter_blocks, int filters, const float* __restrict__ w,
                            Real* __restrict__ u, TileParams k, const float* __restrict__ x,
                            Real* __restrict__ v) {
  __shared__ Real scratch[kTile][kTile][kItems];  // the input's B^T d, or the staged filters
  static_assert(sizeof(scratch) >= sizeof(float) * kItems * kKernel * kKernel, "filter staging");
  PdlLaunchDependents();  // for cuBLAS's GEMM, if it launches with PDL (it then waits for us)
  const int block = static_cast<int>(blockIdx.x);
  if (block < filter_blocks) {
    FilterTransformBlock(block * kItems, filters, w, u, reinterpret_cast<float*>(scratch));
  } else {
    InputTransformBlock((block - filter_blocks) * kItems, k, x, v, scratch);
  }
}

// Items n = o * T + t (out channel o, tile t). Column pass: thread (column j, item) reads the six
// M[p][n] of column j (coalesced across n). Row pass: thread (row i < 4, item) writes the tile's
// output row i where it lies inside y.
__global__ void __launch_bounds__(kThreads)
    OutputTransformKernel(TileParams k, const Real* __restrict__ m, float* __restrict__ y) {
  __shared__ Real at_m[kOut][kTile][kItems];  // A^T M
  PdlWait();  // the products come from cuBLAS's GEMM
  const Lane l = LaneOfThread();
  const int n = static_cast<int>(blockIdx.x) * kItems + l.item;
  const bool active = n < k.out_channels * k.tiles;
  if (active) {
    const int64_t stride = static_cast<int64_t>(k.out_channels) * k.tiles;
    Real col[kTile];
#pragma unroll
    for (int r = 0; r < kTile; ++r) col[r] = m[(kTile * r + l.line) * stride + n];
    Real out[kOut];
    AtRows(col, out);
#pragma unroll
    for (int i = 0; i < kOut; ++i) at_m[i][l.line][l.item] = out[i];
  }
  __syncthreads();
  if (!active || l.line >= kOut) return;
  Real row[kTile];
#pragma unroll
  for (int j = 0; j < kTile; ++j) row[j] = at_m[l.line][j][l.item];
  Real out[kOut];
  AtRows(row, out);
  const TileIndex ti = TileOfThread(n, k.tiles, k.tiles_h, k.tiles_w);
  const int out_row = ti.row0 + l.line;
  if (out_row >= k.out_h) return;
  float* dst = y + (ti.b * k.out_channels + ti.channel) * k.out_h * k.out_w + out_row * k.out_w;
#pragma unroll
  for (int j = 0; j < kOut; ++j) {
    if (ti.col0 + j < k.out_w) dst[ti.col0 + j] = static_cast<float>(out[j]);
  }
}

int Blocks(int64_t items) { return static_cast<int>((items + kItems - 1) / kItems); }

class WinogradRunner : public Runner {
 public:
  WinogradRunner(const Shape& s, const WorkspaceLayout& layout) : layout_(layout) {
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

  absl::Status Init() {
    // Default math: plain fp64 (DMMA on Hopper); no emulation or reduced precision is opted in.
    return blas_.Init(CUBLAS_DEFAULT_MATH);
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
    RETURN_IF_ERROR(blas_.Bind(a.stream, blas_work, layout_.bytes[kBlasWork]));
    const double one = 1.0, zero = 0.0;
    const long long stride_v = static_cast<long long>(k_.in_channels) * k_.tiles;
    const long long stride_u = static_cast<long long>(k_.out_channels) * k_.in_channels;
    const long long stride_m = static_cast<long long>(k_.out_channels) * k_.tiles;
    RETURN_IF_ERROR(blas_.Check(
        cublasDgemmStridedBatched(blas_.get(), CUBLAS_OP_N, CUBLAS_OP_N, k_.tiles, k_.out_channels,
                                  k_.in_channels, &one, v, k_.tiles, stride_v, u, k_.in_channels,
                                  stride_u, &zero, m, k_.tiles, stride_m, kPoints),
        "cublasDgemmStridedBatched"));

    return CudaStatus(LaunchPdl(/*pdl=*/true, OutputTransformKernel,
                                Blocks(static_cast<int64_t>(k_.out_channels) * k_.tiles),
                                kThreads, 0, a.stream, k_, static_cast<const Real*>(m), a.y),
                      "winograd output transform");
  }

 private:
  WorkspaceLayout layout_;
  TileParams k_{};
  CublasHandle blas_{"winograd"};
};

// The proposal carries the workspace layout; the cost model is EstimateCost (winograd_plan.cc).
class Winograd : public AlgorithmWithConfig<WorkspaceLayout> {
 public:
  std::string name() const override { return "winograd"; }
  // Fitted by tools/fit_auto.py (docs/data/round45_fit_*.json).
  double calibration() const override { return 0.983; }

 protected:
  absl::StatusOr<WorkspaceLayout> Choose(const Shape& shape, const DeviceInfo&,
                                         double* seconds) const override {
    RETURN_IF_ERROR(CheckShape(shape));
    *seconds = EstimateCost(shape).seconds;
    return MakeWorkspaceLayout(shape);
  }
  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& shape, const WorkspaceLayout& layout,
                                                const DeviceInfo&) const override {
    auto runner = std::make_unique<WinogradRunner>(shape, layout);
    RETURN_IF_ERROR(runner->Init());
    return std::unique_ptr<Runner>(std::move(runner));
  }
};

}  // namespace
}  // namespace winograd

std::unique_ptr<Algorithm> MakeWinograd() { return std::make_unique<winograd::Winograd>(); }

}  // namespace conv2d
