// wgrad's split of K, its centring and the slices' sum (wgrad_split.h).
#include "conv/algorithms/implicit_gemm/wgrad_split.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "conv/arch/block_sum.cuh"
#include "conv/arch/pdl.cuh"
#include "conv/core/bias.h"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace wgrad_split {

absl::StatusOr<SplitK> ChooseSplitK(const Shape& s, int64_t tiles, int bk,
                                    absl::string_view name) {
  const int64_t k = s.batch * s.out_h() * s.out_w();
  const int64_t k_tiles = (k + bk - 1) / bk;
  const int64_t max_slice_tiles = kMaxContractReduction / bk;
  const int64_t fewest = (k_tiles + max_slice_tiles - 1) / max_slice_tiles;
  // Enough slices for kTargetCtas, each at least kMinSliceTerms long where K allows.
  int64_t slices = (kTargetCtas + tiles - 1) / tiles;
  slices = std::max<int64_t>(1, std::min(slices, k_tiles / (kMinSliceTerms / bk)));
  slices = std::max(slices, fewest);
  const int64_t slice_bytes = 4 * s.filter_elements();
  const int64_t most = (kMaxWorkspaceBytes - 256) / slice_bytes;
  if (slices > 1 && slices > most) {
    if (fewest > most) {
      return absl::ResourceExhaustedError(absl::StrCat(
          name, " wgrad: ", fewest, " split-K slices of at most ", max_slice_tiles * bk,
          " terms need ", fewest * slice_bytes, " bytes of partial dw, beyond its workspace cap of ",
          kMaxWorkspaceBytes));
    }
    slices = most;
  }
  const SplitK split = SplitOf(k_tiles, slices);
  if (split.slices > 65535) {  // implicit_gemm_3xtf32's gridDim.y
    return absl::OutOfRangeError(absl::StrCat(name, " wgrad: ", split.slices,
                                              " split-K slices exceed the grid's 65535 rows"));
  }
  return split;
}

SplitK SplitOf(int64_t k_tiles, int64_t slices) {
  SplitK split;
  split.slice_tiles = static_cast<int>((k_tiles + slices - 1) / slices);
  split.slices = static_cast<int>((k_tiles + split.slice_tiles - 1) / split.slice_tiles);
  return split;
}

absl::StatusOr<SliceRange> SliceLimits(const Shape& s, int bk, absl::string_view name) {
  SliceRange r;
  const int64_t k = s.batch * s.out_h() * s.out_w();
  r.k_tiles = (k + bk - 1) / bk;
  const int64_t max_slice_tiles = kMaxContractReduction / bk;
  r.fewest = (r.k_tiles + max_slice_tiles - 1) / max_slice_tiles;
  const int64_t slice_bytes = 4 * s.filter_elements();
  const int64_t by_workspace = (kMaxWorkspaceBytes - 256) / slice_bytes;
  if (r.fewest > 1 && r.fewest > by_workspace) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name, " wgrad: ", r.fewest, " split-K slices of at most ", max_slice_tiles * bk,
        " terms need ", r.fewest * slice_bytes, " bytes of partial dw, beyond its workspace cap of ",
        kMaxWorkspaceBytes));
  }
  const int64_t by_length = std::max<int64_t>(1, r.k_tiles / (kMinSliceTerms / bk));
  r.most = std::max(r.fewest, std::min(by_length, std::max<int64_t>(1, by_workspace)));
  return r;
}

namespace {

int64_t ReductionOf(const Shape& s) { return s.batch * s.out_h() * s.out_w(); }

int DyRuns(const Shape& s) {
  return ChannelSumSplits(s.batch, s.out_channels, s.out_h() * s.out_w());
}

// centers[c] = Center of image 0's plane of x's channel c: one CTA per channel, its sum and sum
// of squares in double by fixed trees.
constexpr int kCenterThreads = 256;
__global__ void __launch_bounds__(kCenterThreads)
    CentersKernel(const float* __restrict__ x, float* __restrict__ centers, int plane) {
  __shared__ double partial[kCenterThreads];
  const float* p = x + static_cast<int64_t>(blockIdx.x) * plane;
  double sum = 0, sum_sq = 0;
  for (int i = threadIdx.x; i < plane; i += kCenterThreads) {
    const double v = p[i];
    sum += v;
    sum_sq += v * v;
  }
  sum = BlockSum<kCenterThreads>(sum, partial);
  __syncthreads();  // every thread has read partial[0] before the second tree writes it
  sum_sq = BlockSum<kCenterThreads>(sum_sq, partial);
  if (threadIdx.x == 0) centers[blockIdx.x] = Center(sum, sum_sq, plane);
}

// dw[e] for the kSumThreads / ways elements of this CTA: thread t sums way t / per_cta (WaySum)
// of element t % per_cta, then way 0's threads add the ways in order (SliceSum's order) and
// finish (Finish).
constexpr int kSumThreads = 256;
template <class T>
__global__ void __launch_bounds__(kSumThreads)
    SumSlicesKernel(const T* __restrict__ part, float* __restrict__ dw, int n, const Sum s) {
  __shared__ double way_sums[kSumThreads];
  PdlWait();
  const int ways = SumWays(s.slices, n), per_cta = kSumThreads / ways;
  const int w = static_cast<int>(threadIdx.x) / per_cta;
  const int i = static_cast<int>(threadIdx.x) - w * per_cta;
  const int e = static_cast<int>(blockIdx.x) * per_cta + i;
  if (ways == 1) {  // no exchange: SumAt itself
    if (e < n) dw[e] = SumAt(s, part, e, n);
    return;
  }
  if (e < n) way_sums[threadIdx.x] = WaySum(part, e, n, s.slices, w, ways);
  __syncthreads();
  if (w == 0 && e < n) {
    double v = 0;
    for (int k = 0; k < ways; ++k) v += way_sums[k * per_cta + i];
    dw[e] = Finish(s, v, e);
  }
}

template <class T>
absl::Status LaunchSumSlices(const Sum& sum, const T* part, float* dw, int64_t n,
                             cudaStream_t stream) {
  const int count = static_cast<int>(n);
  const int per_cta = kSumThreads / SumWays(sum.slices, n);
  return CudaStatus(LaunchPdl(/*pdl=*/true, &SumSlicesKernel<T>,
                              static_cast<unsigned>((count + per_cta - 1) / per_cta),
                              static_cast<unsigned>(kSumThreads), size_t{0}, stream, part, dw,
                              count, sum),
                    "wgrad slices' sum launch");
}

}  // namespace

size_t WorkspaceBytes(const Shape& s, const SplitK& split) {
  const bool center = Centres(ReductionOf(s));
  if (split.slices == 1 && !center) return 0;
  const size_t part =
      static_cast<size_t>(split.slices) * 4 * static_cast<size_t>(s.filter_elements());
  const size_t sums = center ? 4 * static_cast<size_t>(s.in_channels) + 8 +
                                   8 * static_cast<size_t>(s.out_channels) * DyRuns(s)
                             : 0;
  return part + sums + 256;
}

Sum SumOf(const Shape& s, const SplitK& split) {
  Sum sum;
  sum.slices = split.slices;
  sum.red = static_cast<int>(s.reduction());
  sum.og = static_cast<int>(s.out_per_group());
  sum.cg = static_cast<int>(s.in_per_group());
  sum.khkw = static_cast<int>(s.kernel_h * s.kernel_w);
  sum.dy_runs = DyRuns(s);
  return sum;
}

Buffers Carve(void* workspace, const Shape& s, const SplitK& split) {
  Buffers b;
  if (WorkspaceBytes(s, split) == 0) return b;
  const uintptr_t at = (reinterpret_cast<uintptr_t>(workspace) + 255) & ~uintptr_t{255};
  b.part = reinterpret_cast<float*>(at);
  if (Centres(ReductionOf(s))) {
    b.centers = b.part + static_cast<size_t>(split.slices) * s.filter_elements();
    b.dy_sums = reinterpret_cast<double*>(
        (reinterpret_cast<uintptr_t>(b.centers + s.in_channels) + 7) & ~uintptr_t{7});
  }
  return b;
}

absl::Status Centers(const Shape& s, const float* x, float* centers, cudaStream_t stream) {
  // Through LaunchPdl, as the kernels after it: recorded where the plan records the call.
  return CudaStatus(LaunchPdl(/*pdl=*/false, &CentersKernel, static_cast<unsigned>(s.in_channels),
                              static_cast<unsigned>(kCenterThreads), size_t{0}, stream, x,
                              centers, static_cast<int>(s.height * s.width)),
                    "wgrad centres launch");
}

absl::Status Centre(const Shape& s, const float* x, const float* dy, const Buffers& b, Sum* sum,
                    cudaStream_t stream) {
  if (!Centres(ReductionOf(s))) return absl::OkStatus();
  RETURN_IF_ERROR(Centers(s, x, b.centers, stream));
  RETURN_IF_ERROR(ChannelSums(dy, s.batch, s.out_channels, s.out_h() * s.out_w(), b.dy_sums,
                              stream, b.centers, s.in_channels));
  sum->centers = b.centers;
  sum->dy_sums = b.dy_sums;
  return absl::OkStatus();
}

absl::Status SumSlices(const Sum& sum, const float* part, float* dw, int64_t n,
                       cudaStream_t stream) {
  return LaunchSumSlices(sum, part, dw, n, stream);
}
absl::Status SumSlices(const Sum& sum, const double* part, float* dw, int64_t n,
                       cudaStream_t stream) {
  return LaunchSumSlices(sum, part, dw, n, stream);
}

}  // namespace wgrad_split
}  // namespace conv2d
