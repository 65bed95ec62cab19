// The weight gradient's reduction, shared by the two implicit-GEMM kernels that compute it
// (implicit_gemm_3xtf32 on mma.sync, implicit_gemm_wgmma): wgrad's GEMM (per group M =
// (Cin/groups)*Kh*Kw taps, N = Cout/groups, K = batch*out_h*out_w) has a long K (100,352 terms on
// ResNet-50's 56x56 layers at batch 32), so K is cut into slices, each slice's tile is an fp32
// blocked sum of at most kMaxContractReduction terms, and the slices' partial dw are added in
// double in a fixed order (SliceSum). Where x has a large mean its channels are centred first.
// Everything here is a function of the shape alone (never of the device or the kernel's grid), so that dw
// is the same, bit for bit, on every GPU and every call. Plain C++ for the device and the CPU
// replays, and the host side of the launches around a kernel's slices.
#ifndef CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_WGRAD_SPLIT_H_
#define CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_WGRAD_SPLIT_H_

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "conv/arch/float_bits.h"
#include "conv/arch/host_device.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {
namespace wgrad_split {

// The split of K: `slices` slices of slice_tiles k-tiles each (the last may be shorter).
struct SplitK {
  int slices = 1;
  int slice_tiles = 0;
};

// The accumulator chunk, in terms: shorter as K grows. The chunks' errors (the tensor core
// accumulator's truncation bias, ~L^1.5 for a chunk of L terms) have random signs, so a sum of K
// terms errs ~ L * sqrt(K): the forward's verified case, 128-term chunks at K = 4608 (worst 0.41
// of the bar on large-mean data), holds L * sqrt(K) <= 128 * sqrt(4608) for K <= 4608 at 128,
// <= 18432 at 64 and <= 73728 at 32. Measured on the large-mean class at K = 100,352 (ResNet's
// 64-channel 3x3 56x56 layer, H100, implicit_gemm_3xtf32): 128-term chunks, 44 of 36,864
// elements past the bar (worst 2.93x, round 97); 32-term chunks, rms 6.5e-4 and one element at
// 1.47x (round 98), the tf32 model's rms (cpu_replay/tf32_model.h) within 2% of it. With x
// centred the model gives 1.3e-4 at 32 terms (implicit_gemm_3xtf32_backward_cpu_test's
// WgradChunk).
constexpr int ChunkTerms(int64_t k) { return k <= 4608 ? 128 : k <= 18432 ? 64 : 32; }

// The centring. dw[o, c, tap] = sum over k of x[c, k + tap] dy[o, k] is a sum of K terms; where
// x has a large mean (the large-mean class, x = |N(0, 1)| + 10) every term carries it while
// their sum cancels, and the accumulator's truncation grows with the terms' magnitude. So beyond
// kCenterK terms, where even 32-term chunks pass the verified L * sqrt(K), a channel c whose
// image 0 has |mean| > its standard deviation is centred: the GEMM takes x - center_c (center_c:
// that mean to 8 significant bits, so that x - center_c is exact for x within a factor two of
// it; the zero padding becomes -center_c too) and the reduction adds back center_c * sum(dy[:,
// o]) in double: the same dw in exact arithmetic, with terms of the data's spread instead of its
// mean. Other channels (randn; ReLU-like data, mean 0.7 of the spread) keep center_c = 0, and
// where no channel is centred dy's channel sums (one more read of dy: +30-40% on ResNet's 1x1
// 56x56 wgrad, measured session 30) are skipped (ChannelSums's gate).
constexpr int64_t kCenterK = 73728;
inline bool Centres(int64_t k) { return k > kCenterK; }
// center_c from image 0's sum and sum of squares over its `plane` elements (0: not centred).
CONV2D_HOST_DEVICE_INLINE float Center(double sum, double sum_sq, int plane) {
  const double mean = sum / plane, var = sum_sq / plane - mean * mean;
  if (!(fabs(mean) <= 1e38) || !(mean * mean > var)) return 0.f;  // NaN, inf, or spread-bound
  return BitsFloat(FloatBits(static_cast<float>(mean)) & 0xffff8000u);
}
// A channel's sum from ChannelSums's runs, in their order.
CONV2D_HOST_DEVICE_INLINE double RunsSum(const double* sums, int c, int runs) {
  double s = 0;
  for (int r = 0; r < runs; ++r) s += sums[c * runs + r];
  return s;
}

// The CTAs (tiles x slices) the split aims for: two waves of two resident CTAs on each of an
// H100's 132 SMs. A constant, not the device's count: it sets how the sum is rounded.
constexpr int64_t kTargetCtas = 2 * 2 * 132;
// A slice holds at least 256 terms, so that its partial tile (one store, one load in the
// reduction) stays small against its tensor-core work, and at most kMaxContractReduction terms,
// so that each slice's fp32 sum is one the accuracy contract covers (algorithm.h).
constexpr int kMinSliceTerms = 256;
// The partial dw tiles' workspace cap.
constexpr int64_t kMaxWorkspaceBytes = int64_t{256} << 20;
// The split for a kernel with `tiles` output tiles and k-tiles of bk terms: enough slices for
// kTargetCtas. ResourceExhausted when even the fewest slices the accuracy allows exceed the cap;
// `name` is the kernel's, for the messages.
absl::StatusOr<SplitK> ChooseSplitK(const Shape& shape, int64_t tiles, int bk,
                                    absl::string_view name);
// The slice counts a kernel that chooses by its own cost model may take (implicit_gemm_wgmma):
// from the fewest whose slices stay within kMaxContractReduction terms to the most that keeps
// kMinSliceTerms a slice and the partials within kMaxWorkspaceBytes (never below the fewest).
// ResourceExhausted as ChooseSplitK's.
struct SliceRange {
  int64_t k_tiles = 0, fewest = 1, most = 1;
};
absl::StatusOr<SliceRange> SliceLimits(const Shape& shape, int bk, absl::string_view name);
// `slices` slices of K's k_tiles: ceil(k_tiles / slices) k-tiles each, and the count that takes.
SplitK SplitOf(int64_t k_tiles, int64_t slices);
// The workspace of a split (0 with one slice and no centring: the epilogue writes dw), with 256
// bytes of alignment slack: the partials, then x's channel centres and dy's channel sums.
size_t WorkspaceBytes(const Shape& shape, const SplitK& split);

// What the reduction of the partials needs.
struct Sum {
  int slices = 1;
  int red = 0;       // one filter's length, (Cin/groups)*kh*kw
  int og = 0, cg = 0;  // output and input channels per group
  int khkw = 0;
  int dy_runs = 1;   // ChannelSums's runs per channel of dy
  const float* centers = nullptr;  // x's channel centres, or null (not centred)
  const double* dy_sums = nullptr;
  // Where the kernel multiplied x's padding as 0 rather than -center (depthwise's, whose large
  // kernels see much padding: -center there would be a large term again), per dw element the
  // sum of dy over the pixels whose tap lies inside x; null: the channel's whole sum, dy_sums.
  const double* tap_dy_sums = nullptr;
};
Sum SumOf(const Shape& shape, const SplitK& split);

// dw[e] from the slices' partials part[slice*n + e], in double (exact enough that the sum's
// rounding does not depend on K) and in a fixed order, so that the result is reproducible: the
// slices are dealt to SumWays interleaved ways (way w: slices w, w + ways, ...), each summed in
// slice order, and the ways added in way order. The GPU sums the ways in parallel, a thread
// each: with few elements and many slices one thread per element summing every slice in turn
// waited on each load (0.26 ms for 512 elements of 523 slices: PERF.md round 104), while with
// many elements one thread per element fills the GPU and more ways only add CTAs (+30 us on
// ResNet's 3x3 wgrad at 7x7, 2.4M elements of 4 slices). Its sum is this one's bit for bit.
constexpr int kMaxSumWays = 8;
constexpr int64_t kOneWayElements = 32768;  // 128 CTAs of 256 threads, a thread per element
CONV2D_HOST_DEVICE_INLINE int SumWays(int slices, int64_t n) {
  if (n >= kOneWayElements) return 1;
  int ways = 1;
  while (ways * 2 <= slices && ways * 2 <= kMaxSumWays) ways *= 2;
  return ways;
}
template <class T>
CONV2D_HOST_DEVICE_INLINE double WaySum(const T* part, int64_t e, int64_t n, int slices, int way,
                                        int ways) {
  double s = 0;
  for (int i = way; i < slices; i += ways) s += static_cast<double>(part[i * n + e]);
  return s;
}
template <class T>
CONV2D_HOST_DEVICE_INLINE double SliceSum(const T* part, int64_t e, int64_t n, int slices) {
  const int ways = SumWays(slices, n);
  double s = 0;
  for (int w = 0; w < ways; ++w) s += WaySum(part, e, n, slices, w, ways);
  return s;
}
// dw[e] from its slices' sum v: plus, where x was centred, center_c * the sum of dy[:, o]
// (e = o * red + m, c = g * cg + m / (kh * kw)), in double, in a fixed order; rounded once.
CONV2D_HOST_DEVICE_INLINE float Finish(const Sum& s, double v, int64_t e) {
  if (s.centers != nullptr) {
    const int o = static_cast<int>(e / s.red), m = static_cast<int>(e - int64_t{o} * s.red);
    const float center = s.centers[o / s.og * s.cg + m / s.khkw];
    if (center != 0.f) {
      v += static_cast<double>(center) *
           (s.tap_dy_sums != nullptr ? s.tap_dy_sums[e] : RunsSum(s.dy_sums, o, s.dy_runs));
    }
  }
  return static_cast<float>(v);
}
template <class T>
CONV2D_HOST_DEVICE_INLINE float SumAt(const Sum& s, const T* part, int64_t e, int64_t n) {
  return Finish(s, SliceSum(part, e, n, s.slices), e);
}

// ---- The launches around a kernel's slices (wgrad_split.cu).
// The workspace of WorkspaceBytes, carved: the partials (256-byte aligned), the centres, dy's
// channel sums. Partials are null where the split needs none.
struct Buffers {
  float* part = nullptr;
  float* centers = nullptr;
  double* dy_sums = nullptr;
};
Buffers Carve(void* workspace, const Shape& shape, const SplitK& split);
// x's channel centres from image 0 (Center) into centers[Cin], whatever K.
absl::Status Centers(const Shape& shape, const float* x, float* centers, cudaStream_t stream);
// Where Centres(K): x's channel centres from image 0 and dy's channel sums (gated on the
// centres), into b; sets sum->centers and sum->dy_sums. Otherwise nothing.
absl::Status Centre(const Shape& shape, const float* x, const float* dy, const Buffers& b,
                    Sum* sum, cudaStream_t stream);
// dw from the partials (fp32, or double: depthwise's wgrad), SumAt's sums: CTAs of 256
// threads, 256 / ways elements each, a thread per element and way. Through LaunchPdl (recorded
// where the plan records the call's launches; it waits for the kernel before it).
absl::Status SumSlices(const Sum& sum, const float* part, float* dw, int64_t n,
                       cudaStream_t stream);
absl::Status SumSlices(const Sum& sum, const double* part, float* dw, int64_t n,
                       cudaStream_t stream);

}  // namespace wgrad_split
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_IMPLICIT_GEMM_WGRAD_SPLIT_H_
