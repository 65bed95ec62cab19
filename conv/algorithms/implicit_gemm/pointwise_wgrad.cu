// "pointwise_wgrad" (pointwise_wgrad.h): the kernel, its configuration and its runner.
#include "conv/algorithms/implicit_gemm/pointwise_wgrad.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/arch/fast_div.h"
#include "conv/arch/mma_sync.cuh"
#include "conv/arch/pdl.cuh"
#include "conv/arch/split_3xtf32.h"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace pointwise_wgrad_internal {

absl::StatusOr<Config> ChooseConfig(const Shape& s, double* seconds) {
  const int64_t k = s.batch * s.height * s.width;
  const double kd = static_cast<double>(k);
  Config best;
  double best_kernel = 0, best_score = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kNumWarpTiles; ++i) {
    for (bool x_rows : {false, true}) {
      const int64_t ma = x_rows ? s.in_channels : s.out_channels;
      const int64_t nb = x_rows ? s.out_channels : s.in_channels;
      const int rows = 16 * kWarpTiles[i].tm, cols = 8 * kWarpTiles[i].tn;
      const int64_t tiles_m = (ma + rows - 1) / rows, tiles_n = (nb + cols - 1) / cols;
      // The model: the bytes of x and dy from memory once at 3 TB/s; what the warps load (a
      // tensor again for each tile along the other side) from L2 at 6 TB/s; the padded tiles'
      // three products per term at 100 TFLOP/s of TF32 (implicit_gemm_3xtf32's mma.sync rate,
      // ~30 TFLOP/s of fp32-accurate work); whichever is longest.
      const double dram = 4.0 * kd * static_cast<double>(ma + nb) / 3e12;
      const double l2 = 4.0 * kd * static_cast<double>(tiles_n * ma + tiles_m * nb) / 6e12;
      const double mma =
          6.0 * kd * static_cast<double>(tiles_m * tiles_n * rows * cols) / 100e12;
      const double kernel = std::max({dram, l2, mma});
      // Where the memory bounds tie, the tile that loads and multiplies least.
      const double score = kernel + 0.01 * (l2 + mma);
      if (score < best_score) {
        best_score = score;
        best_kernel = kernel;
        best.tile = i;
        best.x_rows = x_rows;
        best.tiles_m = static_cast<int>(tiles_m);
        best.tiles_n = static_cast<int>(tiles_n);
      }
    }
  }
  absl::StatusOr<wgrad_split::SliceRange> range =
      wgrad_split::SliceLimits(s, kChunk, "pointwise_wgrad");
  if (!range.ok()) return range.status();
  const int64_t tiles = int64_t{best.tiles_m} * best.tiles_n;
  const int64_t want = (kTargetUnits + tiles - 1) / tiles;
  best.split = wgrad_split::SplitOf(range->k_tiles,
                                    std::clamp<int64_t>(want, range->fewest, range->most));
  if (tiles * best.split.slices > std::numeric_limits<int32_t>::max()) {
    return absl::OutOfRangeError(absl::StrCat("pointwise_wgrad: ", tiles * best.split.slices,
                                              " units exceed the grid"));
  }
  // The kernel walks K in int: the last slice's end and a warp's next chunk must not wrap.
  const int64_t k_reach = int64_t{best.split.slices} * best.split.slice_tiles * kChunk +
                          int64_t{kChunk} * kWarps;
  if (k_reach > std::numeric_limits<int32_t>::max()) {
    return absl::OutOfRangeError(absl::StrCat("pointwise_wgrad: ", k, " terms (batch * H * W) ",
                                              "reach past its 32-bit walk of K"));
  }
  double launch = 3e-6, bytes = 0;
  if (best.split.slices > 1) {  // the partials written and read, the slices' sum
    launch += 3e-6;
    bytes += 8.0 * best.split.slices * static_cast<double>(s.filter_elements());
  }
  if (wgrad_split::Centres(k)) {  // x's centres and dy's channel sums (another read of dy)
    launch += 4e-6;
    bytes += 4.0 * static_cast<double>(s.output_elements());
  }
  *seconds = best_kernel + bytes / 3e12 + launch;
  return best;
}

namespace {

constexpr int kThreads = 32 * kWarps;

struct Params {
  int ma = 0, nb = 0;                 // channels on the m16 side (A) and the n8 side (B)
  int64_t a_image = 0, b_image = 0;   // floats per image of A's and B's tensors
  int hw = 0;                         // pixels per image
  FastDiv by_hw;
  int k = 0;                          // batch * hw
  int slice_terms = 0;
  int tiles_n = 1, tiles = 1;
  int fold_chunks = 1;                // a warp's chunks between folds
  bool x_rows = false;
  int cin = 0;                        // dw's row length
  int64_t slice_stride = 0;           // floats between slices' partial dw
  const float* centers = nullptr;     // x's channel centres, or null
};

// The k order within a chunk: lane 4g + t holds pixels 4t..4t+3 of its rows; step 0 takes .x,
// .y as k = t, t + 4, step 1 .z, .w.
__device__ __forceinline__ void SplitPair(float lo_k, float hi_k, uint32_t& h0, uint32_t& l0,
                                          uint32_t& h1, uint32_t& l1) {
  SplitTf32(lo_k, h0, l0);
  SplitTf32(hi_k, h1, l1);
}

// Four consecutive terms k..k+3 (k a multiple of 4) of row `row` (its channel offset): one
// 16-byte load where hw % 4 == 0 and the tensor is aligned (kVec), else four loads; 0 past K.
template <bool kVec>
__device__ __forceinline__ float4 LoadTerms(const float* __restrict__ t, int64_t image,
                                            int row_off, const Params& p, int k,
                                            [[maybe_unused]] int b, [[maybe_unused]] int px) {
  if constexpr (kVec) {
    if (k >= p.k) return make_float4(0.f, 0.f, 0.f, 0.f);
    return __ldg(reinterpret_cast<const float4*>(t + b * image + row_off + px));
  } else {
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[j] = 0.f;
      if (k + j < p.k) {
        const int bj = p.by_hw.Div(k + j);
        v[j] = __ldg(t + bj * image + row_off + (k + j - bj * p.hw));
      }
    }
    return make_float4(v[0], v[1], v[2], v[3]);
  }
}

// Three CTAs an SM (168 registers) for the small tiles; two (255) for 96x16 and 64x32, whose
// accumulators and fragments spilled at 168: eight warps an SM still keep ~56 KB of loads in
// flight, past the ~25 KB that an SM's share of HBM's bandwidth-latency product asks.
constexpr int MinCtas(int tm, int tn) { return tm * tn >= 12 ? 2 : 3; }

template <int TM, int TN, bool kVec, bool kCentred>
__global__ void __launch_bounds__(kThreads, MinCtas(TM, TN))
    PointwiseWgradKernel(const float* __restrict__ a_t, const float* __restrict__ b_t,
                         float* __restrict__ out, const Params p) {
  constexpr int kAcc = TM * TN * 4;
  __shared__ float total[kWarps][kAcc][32];  // each warp's fp32 totals, a lane's own column
  const int unit = static_cast<int>(blockIdx.x);
  const int slice = unit / p.tiles, tile = unit - slice * p.tiles;
  const int tile_m = tile / p.tiles_n, tile_n = tile - tile_m * p.tiles_n;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int m0 = tile_m * 16 * TM, n0 = tile_n * 8 * TN;

  // This lane's rows: A rows m0 + 16 mi + g + 8 h, B rows n0 + 8 ni + g; -1 past the channels.
  int a_off[TM][2], b_off[TN];
  float a_center[TM][2], b_center[TN];
#pragma unroll
  for (int mi = 0; mi < TM; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m0 + 16 * mi + g + 8 * h;
      a_off[mi][h] = m < p.ma ? m * p.hw : -1;
      a_center[mi][h] = kCentred && p.x_rows && m < p.ma ? p.centers[m] : 0.f;
    }
#pragma unroll
  for (int ni = 0; ni < TN; ++ni) {
    const int n = n0 + 8 * ni + g;
    b_off[ni] = n < p.nb ? n * p.hw : -1;
    b_center[ni] = kCentred && !p.x_rows && n < p.nb ? p.centers[n] : 0.f;
  }
#pragma unroll
  for (int i = 0; i < kAcc; ++i) total[warp][i][lane] = 0.f;

  const int k_begin = slice * p.slice_terms;
  const int k_end = min(p.k, k_begin + p.slice_terms);
  float acc[TM][TN][4];
  int since_fold = 0;
  // f(accumulator, its index in a warp's totals) for each of the lane's accumulators.
  auto each = [&](auto&& f) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) f(acc[i / 4 / TN][i / 4 % TN][i % 4], i);
  };
  auto clear = [&] { each([](float& a, int) { a = 0.f; }); };
  // The tensor core's running sum, added to the fp32 totals: its truncation stays that of a
  // ChunkTerms-term sum (wgrad_split.h).
  auto fold = [&] {
    each([&](float& a, int i) {
      total[warp][i][lane] += a;
      a = 0.f;
    });
  };
  clear();
  for (int kc = k_begin + kChunk * warp; kc < k_end; kc += kChunk * kWarps) {
    const int k = kc + 4 * t;
    int b = 0, px = 0;
    if constexpr (kVec) {
      b = p.by_hw.Div(k);
      px = k - b * p.hw;
    }
    float4 av[TM][2], bv[TN];
#pragma unroll
    for (int mi = 0; mi < TM; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        av[mi][h] = a_off[mi][h] >= 0
                        ? LoadTerms<kVec>(a_t, p.a_image, a_off[mi][h], p, k, b, px)
                        : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
    for (int ni = 0; ni < TN; ++ni) {
      bv[ni] = b_off[ni] >= 0 ? LoadTerms<kVec>(b_t, p.b_image, b_off[ni], p, k, b, px)
                              : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if constexpr (kCentred) {  // x - its channel's centre; dy's centres are 0 (exact)
#pragma unroll
      for (int mi = 0; mi < TM; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float4& v = av[mi][h];
          const float c = a_center[mi][h];
          v = make_float4(v.x - c, v.y - c, v.z - c, v.w - c);
        }
#pragma unroll
      for (int ni = 0; ni < TN; ++ni) {
        float4& v = bv[ni];
        const float c = b_center[ni];
        v = make_float4(v.x - c, v.y - c, v.z - c, v.w - c);
      }
    }
#pragma unroll
    for (int step = 0; step < 2; ++step) {
      uint32_t bh[TN][2], bl[TN][2];
#pragma unroll
      for (int ni = 0; ni < TN; ++ni) {
        const float4 v = bv[ni];
        SplitPair(step == 0 ? v.x : v.z, step == 0 ? v.y : v.w, bh[ni][0], bl[ni][0], bh[ni][1],
                  bl[ni][1]);
      }
#pragma unroll
      for (int mi = 0; mi < TM; ++mi) {
        uint32_t ah[4], al[4];
        const float4 v0 = av[mi][0], v1 = av[mi][1];
        // a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
        SplitPair(step == 0 ? v0.x : v0.z, step == 0 ? v0.y : v0.w, ah[0], al[0], ah[2], al[2]);
        SplitPair(step == 0 ? v1.x : v1.z, step == 0 ? v1.y : v1.w, ah[1], al[1], ah[3], al[3]);
        // The small products first, as every 3xTF32 kernel here (split_3xtf32.h).
#pragma unroll
        for (int ni = 0; ni < TN; ++ni) MmaTf32(acc[mi][ni], al, bh[ni]);
#pragma unroll
        for (int ni = 0; ni < TN; ++ni) MmaTf32(acc[mi][ni], ah, bl[ni]);
#pragma unroll
        for (int ni = 0; ni < TN; ++ni) MmaTf32(acc[mi][ni], ah, bh[ni]);
      }
    }
    if (++since_fold == p.fold_chunks) {
      fold();
      since_fold = 0;
    }
  }
  fold();
  __syncthreads();
  // The slice's partial dw: the warps' totals added in warp order.
  float* part = out + static_cast<int64_t>(slice) * p.slice_stride;
  for (int e = static_cast<int>(threadIdx.x); e < kAcc * 32; e += kThreads) {
    const int i = e / 32, l = e % 32;
    float v = total[0][i][l];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) v += total[w][i][l];
    const int c = i % 4, mi = i / 4 / TN, ni = i / 4 % TN;
    const int m = m0 + 16 * mi + l / 4 + (c >= 2 ? 8 : 0);
    const int n = n0 + 8 * ni + 2 * (l % 4) + (c & 1);
    if (m < p.ma && n < p.nb) part[p.x_rows ? n * p.cin + m : m * p.cin + n] = v;
  }
}

// wgrad_split's centring where K calls for it, the slices' partials (or dw itself: one slice,
// no centring), the slices' sum in double.
class PointwiseWgradRunner : public Runner {
 public:
  PointwiseWgradRunner(const Shape& s, const Config& c, const Params& p)
      : shape_(s), config_(c), p_(p) {}
  size_t workspace_bytes() const override {
    return wgrad_split::WorkspaceBytes(shape_, config_.split);
  }
  bool records_launches() const override { return true; }

  absl::Status Run(const RunArgs& a) const override {
    const wgrad_split::Buffers b = wgrad_split::Carve(a.workspace, shape_, config_.split);
    wgrad_split::Sum sum = wgrad_split::SumOf(shape_, config_.split);
    RETURN_IF_ERROR(wgrad_split::Centre(shape_, a.x, a.dy, b, &sum, a.stream));
    Params p = p_;
    p.centers = sum.centers;
    float* out = b.part != nullptr ? b.part : a.dw;
    const float* at = config_.x_rows ? a.x : a.dy;
    const float* bt = config_.x_rows ? a.dy : a.x;
    const bool vec = p.hw % 4 == 0 && reinterpret_cast<uintptr_t>(at) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(bt) % 16 == 0;
    switch (config_.tile) {
      case 0: RETURN_IF_ERROR((Launch<2, 2>(vec, p, at, bt, out, a.stream))); break;
      case 1: RETURN_IF_ERROR((Launch<3, 3>(vec, p, at, bt, out, a.stream))); break;
      case 2: RETURN_IF_ERROR((Launch<6, 2>(vec, p, at, bt, out, a.stream))); break;
      case 3: RETURN_IF_ERROR((Launch<4, 4>(vec, p, at, bt, out, a.stream))); break;
      default:
        return absl::InternalError(absl::StrCat("pointwise_wgrad: no warp tile ", config_.tile));
    }
    if (b.part == nullptr) return absl::OkStatus();
    return wgrad_split::SumSlices(sum, b.part, a.dw, shape_.filter_elements(), a.stream);
  }

 private:
  template <int TM, int TN>
  absl::Status Launch(bool vec, const Params& p, const float* at, const float* bt, float* out,
                      cudaStream_t stream) const {
    static_assert(kWarpTiles[0].tm == 2 && kWarpTiles[1].tm == 3 && kWarpTiles[2].tm == 6 &&
                      kWarpTiles[3].tm == 4,
                  "Run's switch follows kWarpTiles");
    const bool centred = p.centers != nullptr;
    auto* kernel = vec ? (centred ? &PointwiseWgradKernel<TM, TN, true, true>
                                  : &PointwiseWgradKernel<TM, TN, true, false>)
                       : (centred ? &PointwiseWgradKernel<TM, TN, false, true>
                                  : &PointwiseWgradKernel<TM, TN, false, false>);
    const unsigned grid = static_cast<unsigned>(p.tiles) * config_.split.slices;
    return CudaStatus(
        LaunchPdl(/*pdl=*/false, kernel, grid, kThreads, size_t{0}, stream, at, bt, out, p),
        "pointwise_wgrad kernel launch");
  }

  Shape shape_;
  Config config_;
  Params p_;
};

// Each slice an fp32 sum of at most kMaxContractReduction terms, the slices added in double:
// within the contract at any K. The basic form only (geometry() is the default), 1x1 filters.
class PointwiseWgrad : public AlgorithmWithConfig<Config> {
 public:
  std::string name() const override { return "pointwise_wgrad"; }
  bool Computes(Op op) const override { return op == Op::kWgrad; }
  double calibration() const override { return 1.0; }  // unfitted: the model's own times

 protected:
  absl::StatusOr<Config> Choose(const Shape& s, const DeviceInfo&,
                                double* seconds) const override {
    if (s.kernel_h != 1 || s.kernel_w != 1) {
      return absl::UnimplementedError(absl::StrCat(
          "pointwise_wgrad takes 1x1 filters only; this shape's is ", s.kernel_h, "x",
          s.kernel_w));
    }
    if (s.height * s.width == 1) {  // K = the batch: too short for a tensor-core tile
      return absl::UnimplementedError(
          "pointwise_wgrad: one-pixel images are dot's (a sum over the batch only)");
    }
    RETURN_IF_ERROR(CheckFitsInt32(s, "pointwise_wgrad"));
    absl::StatusOr<Config> c = ChooseConfig(s, seconds);
    if (c.ok() && std::min(s.in_channels, s.out_channels) > kMaxRankedNarrowSide) {
      *seconds = std::numeric_limits<double>::infinity();  // forced only (pointwise_wgrad.h)
    }
    return c;
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const Config& c,
                                                const DeviceInfo&) const override {
    Params p;
    p.x_rows = c.x_rows;
    p.ma = static_cast<int>(c.x_rows ? s.in_channels : s.out_channels);
    p.nb = static_cast<int>(c.x_rows ? s.out_channels : s.in_channels);
    p.hw = static_cast<int>(s.height * s.width);
    p.a_image = int64_t{p.ma} * p.hw;
    p.b_image = int64_t{p.nb} * p.hw;
    p.by_hw = FastDiv(static_cast<uint32_t>(p.hw));
    p.k = static_cast<int>(s.batch * p.hw);
    p.slice_terms = c.split.slice_tiles * kChunk;
    p.tiles_n = c.tiles_n;
    p.tiles = c.tiles_m * c.tiles_n;
    p.fold_chunks = wgrad_split::ChunkTerms(p.k) / kChunk;
    p.cin = static_cast<int>(s.in_channels);
    p.slice_stride = s.filter_elements();
    return std::unique_ptr<Runner>(new PointwiseWgradRunner(s, c, p));
  }
};

}  // namespace
}  // namespace pointwise_wgrad_internal

std::unique_ptr<Algorithm> MakePointwiseWgrad() {
  return std::make_unique<pointwise_wgrad_internal::PointwiseWgrad>();
}

}  // namespace conv2d
