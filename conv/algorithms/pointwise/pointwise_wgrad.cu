// pointwise_wgrad (pointwise_wgrad.h): the tiling, the slice kernel, the slices' sum, the runner
// and the algorithm.
#include "conv/algorithms/pointwise/pointwise_wgrad.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/implicit_gemm/wgrad_split.h"
#include "conv/arch/cp_async.cuh"
#include "conv/arch/fast_div.h"
#include "conv/arch/int_math.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace pointwise_internal {

namespace {
constexpr size_t kAlign = 256;
constexpr int64_t kMaxWorkspaceBytes = int64_t{256} << 20;
int AsInt(int64_t v) { return static_cast<int>(v); }
// A side of n channels in tiles of at most `most` channels, multiples of kBlock, as even as can
// be.
void Side(int64_t n, int64_t most, int* tile, int* tiles) {
  const int64_t blocks = CeilDiv(n, kBlock);
  const int64_t per_tile = CeilDiv(blocks, CeilDiv(blocks, most / kBlock));
  *tile = AsInt(per_tile) * kBlock;
  *tiles = AsInt(CeilDiv(blocks, per_tile));
}
}  // namespace

size_t Tiling::workspace_bytes(const Shape& s) const {
  if (slices == 1) return 0;
  return static_cast<size_t>(slices) * 4 * static_cast<size_t>(s.filter_elements()) + kAlign;
}

absl::StatusOr<Tiling> TilingFor(const Shape& s) {
  Tiling t;
  // The fewer channels first, in tiles of at most kMaxTile / 2; the other side as long as the
  // tile's sums (kMaxTileElements doubles) and two stages (kMaxStageRows rows) allow, so that
  // the larger tensor is read once where the smaller side has few channels.
  const bool p_first = s.out_channels <= s.in_channels;
  int* first_tile = p_first ? &t.bp : &t.bq;
  int* first_tiles = p_first ? &t.tiles_p : &t.tiles_q;
  Side(std::min(s.out_channels, s.in_channels), kMaxTile / 2, first_tile, first_tiles);
  const int64_t most = std::min<int64_t>(
      {kMaxTile, kMaxTileElements / *first_tile, kMaxStageRows - *first_tile});
  Side(std::max(s.out_channels, s.in_channels), most / kBlock * kBlock,
       p_first ? &t.bq : &t.bp, p_first ? &t.tiles_q : &t.tiles_p);
  t.tile_threads = (t.bp / kBlock) * (t.bq / kBlock);
  t.groups = std::min(kChunk, kThreads / t.tile_threads);
  const int64_t k = s.batch * s.height * s.width;
  t.chunks = CeilDiv(k, kChunk);
  const int64_t columns = CeilDiv(kChunk, t.groups);  // a thread's terms per chunk, at most
  const int64_t tiles = int64_t{t.tiles_p} * t.tiles_q;
  const int64_t fewest = CeilDiv(t.chunks, kMaxContractReduction / columns);
  const int64_t wanted =
      std::min(CeilDiv(kTargetCtas, tiles), std::max<int64_t>(1, t.chunks / kMinSliceChunks));
  const int64_t slices = std::max(fewest, wanted);
  t.slice_chunks = AsInt(CeilDiv(t.chunks, slices));
  t.slices = AsInt(CeilDiv(t.chunks, t.slice_chunks));
  t.terms_per_thread = int64_t{t.slice_chunks} * columns;
  t.ctas = tiles * t.slices;
  t.smem_bytes = std::max(kStages * (t.bp + t.bq) * kPitch * 4, t.bp * t.bq * 8);
  if (t.workspace_bytes(s) > static_cast<size_t>(kMaxWorkspaceBytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "pointwise_wgrad: ", t.slices, " slices' partial dw need ", t.workspace_bytes(s),
        " bytes, beyond its cap of ", kMaxWorkspaceBytes));
  }
  if (t.ctas > (int64_t{1} << 31) - 1) {
    return absl::OutOfRangeError("pointwise_wgrad: more than 2^31 - 1 CTAs");
  }
  return t;
}

// The FMAs the kernel issues (the tiles' padding included) at 15 T/s (8x8 blocks from shared
// memory: a guess, ~45% of the fp32 peak, not yet measured), or x read once per tile column
// and dy once per tile row, and the partials written and read, at 3 TB/s; two launches.
double Seconds(const Shape& s, const Tiling& t) {
  const double k = static_cast<double>(t.chunks) * kChunk;
  const double fmas = k * t.tiles_p * t.bp * t.tiles_q * t.bq;
  const double bytes = 4.0 * (static_cast<double>(s.input_elements()) * t.tiles_p +
                              static_cast<double>(s.output_elements()) * t.tiles_q) +
                       2.0 * static_cast<double>(t.workspace_bytes(s));
  return std::max(fmas / 15e12, bytes / 3e12) + 5e-6;
}

namespace {

struct Params {
  int cin, cout, hw, k;
  int bp, bq, tiles, tiles_q, tile_threads, groups;
  int slice_chunks, chunks;
  FastDiv by_hw;
};

// Copies chunk `chunk` of the tile (rows p0.. of dy, then q0.. of x) into `buf`: row r, column
// col at buf[r * kPitch + col]; zeros past K and past the channels.
__device__ __forceinline__ void StageCopy(const Params& p, const float* __restrict__ x,
                                          const float* __restrict__ dy, int p0, int q0, int chunk,
                                          float* buf) {
  const int col = threadIdx.x % kChunk;
  const int k = chunk * kChunk + col;
  const bool k_valid = k < p.k;
  int b = 0, pix = 0;
  if (k_valid) p.by_hw.DivMod(k, &b, &pix);
  for (int r = threadIdx.x / kChunk; r < p.bp + p.bq; r += kThreads / kChunk) {
    const bool is_dy = r < p.bp;
    const int ch = is_dy ? p0 + r : q0 + r - p.bp;
    const int channels = is_dy ? p.cout : p.cin;
    const bool valid = k_valid && ch < channels;
    const float* base = is_dy ? dy : x;
    const float* src =
        valid ? base + (static_cast<int64_t>(b) * channels + ch) * p.hw + pix : base;
    CpAsync<4>(buf + r * kPitch + col, src, valid);
  }
}

// CTA = (slice, tile), the tile fastest: the CTAs running together read one slice's columns.
// Writes the tile's sums of the slice to out[slice * Cout*Cin + o * Cin + c].
__global__ void __launch_bounds__(kThreads, 1)
    PointwiseWgradKernel(const float* __restrict__ x, const float* __restrict__ dy,
                         float* __restrict__ out, const Params p) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int cta = static_cast<int>(blockIdx.x);
  const int slice = cta / p.tiles, tile = cta - slice * p.tiles;
  const int p0 = tile / p.tiles_q * p.bp, q0 = tile % p.tiles_q * p.bq;
  const int first = slice * p.slice_chunks;
  const int count = min(p.slice_chunks, p.chunks - first);
  const int stage_floats = (p.bp + p.bq) * kPitch;
  const int bp8 = p.bp / kBlock, bq8 = p.bq / kBlock;
  const int g = threadIdx.x / p.tile_threads, tt = threadIdx.x - g * p.tile_threads;
  const int tp = tt / bq8, tq = tt - tp * bq8;
  const bool active = g < p.groups;

  float acc[kBlock][kBlock];
#pragma unroll
  for (int i = 0; i < kBlock; ++i)
#pragma unroll
    for (int j = 0; j < kBlock; ++j) acc[i][j] = 0.0f;

  // A ring of kStages chunks: kStages - 1 copies in flight while one is summed (the sums are
  // short against a chunk's bytes; the copies' latency is what there is to hide). One commit per
  // step, empty past the slice, so that CpAsyncWait counts steps.
  PdlWait();
#pragma unroll
  for (int c = 0; c < kStages - 1; ++c) {
    if (c < count) StageCopy(p, x, dy, p0, q0, first + c, smem + c * stage_floats);
    CpAsyncCommit();
  }
  for (int c = 0; c < count; ++c) {
    const int ahead = c + kStages - 1;
    if (ahead < count) {
      StageCopy(p, x, dy, p0, q0, first + ahead, smem + (ahead % kStages) * stage_floats);
    }
    CpAsyncCommit();
    CpAsyncWait<kStages - 1>();
    __syncthreads();
    if (active) {
      const float* buf = smem + (c % kStages) * stage_floats;
      const float* rows_p = buf + tp * kPitch;
      const float* rows_q = buf + (p.bp + tq) * kPitch;
#pragma unroll 1
      for (int kk = g; kk < kChunk; kk += p.groups) {
        float a[kBlock], v[kBlock];
#pragma unroll
        for (int i = 0; i < kBlock; ++i) a[i] = rows_p[i * bp8 * kPitch + kk];
#pragma unroll
        for (int j = 0; j < kBlock; ++j) v[j] = rows_q[j * bq8 * kPitch + kk];
#pragma unroll
        for (int i = 0; i < kBlock; ++i)
#pragma unroll
          for (int j = 0; j < kBlock; ++j) acc[i][j] = fmaf(a[i], v[j], acc[i][j]);
      }
    }
    __syncthreads();  // the buffer is refilled next
  }
  CpAsyncWait<0>();

  // The k-groups in double, in group order, into the tile's sums in shared memory.
  double* red = reinterpret_cast<double*>(smem);
  for (int gi = 0; gi < p.groups; ++gi) {
    if (g == gi) {
#pragma unroll
      for (int i = 0; i < kBlock; ++i)
#pragma unroll
        for (int j = 0; j < kBlock; ++j) {
          const int e = (tp + i * bp8) * p.bq + tq + j * bq8;
          red[e] = (gi == 0 ? 0.0 : red[e]) + static_cast<double>(acc[i][j]);
        }
    }
    __syncthreads();
  }
  float* dst = out + static_cast<int64_t>(slice) * p.cout * p.cin;
  for (int e = threadIdx.x; e < p.bp * p.bq; e += kThreads) {
    const int r = e / p.bq, col = e - r * p.bq;
    const int o = p0 + r, ch = q0 + col;
    if (o < p.cout && ch < p.cin) dst[o * p.cin + ch] = static_cast<float>(red[e]);
  }
  PdlLaunchDependents();
}

Params MakeParams(const Shape& s, const Tiling& t) {
  Params p = {};
  p.cin = AsInt(s.in_channels), p.cout = AsInt(s.out_channels);
  p.hw = AsInt(s.height * s.width), p.k = AsInt(s.batch * s.height * s.width);
  p.bp = t.bp, p.bq = t.bq, p.tiles = t.tiles_p * t.tiles_q, p.tiles_q = t.tiles_q;
  p.tile_threads = t.tile_threads, p.groups = t.groups;
  p.slice_chunks = t.slice_chunks, p.chunks = AsInt(t.chunks);
  p.by_hw = FastDiv(static_cast<uint32_t>(p.hw));
  return p;
}

class PointwiseWgradRunner : public Runner {
 public:
  PointwiseWgradRunner(const Shape& s, const Tiling& t)
      : s_(s), t_(t), p_(MakeParams(s, t)),
        sum_(wgrad_split::SumOf(s, wgrad_split::SplitK{t.slices, t.slice_chunks})) {}
  // The caller's workspace needs no alignment (Plan::Run's contract): the partials start at the
  // first 256-byte boundary in it.
  size_t workspace_bytes() const override { return t_.workspace_bytes(s_); }
  bool records_launches() const override { return true; }
  absl::Status Run(const RunArgs& a) const override {
    float* part = a.dw;
    if (t_.slices > 1) {
      const uintptr_t base = reinterpret_cast<uintptr_t>(a.workspace);
      part = reinterpret_cast<float*>((base + kAlign - 1) / kAlign * kAlign);
    }
    RETURN_IF_ERROR(CudaStatus(
        LaunchPdl(/*pdl=*/false, &PointwiseWgradKernel, static_cast<unsigned>(t_.ctas),
                  static_cast<unsigned>(kThreads), static_cast<size_t>(t_.smem_bytes), a.stream,
                  a.x, a.dy, part, p_),
        "pointwise_wgrad kernel launch"));
    if (t_.slices == 1) return absl::OkStatus();
    return wgrad_split::SumSlices(sum_, part, a.dw, s_.filter_elements(), a.stream);
  }

 private:
  Shape s_;
  Tiling t_;
  Params p_;
  wgrad_split::Sum sum_;
};

class PointwiseWgrad : public AlgorithmWithConfig<Tiling> {
 public:
  std::string name() const override { return "pointwise_wgrad"; }
  // Not yet fitted: the model's own times.
  double calibration() const override { return 1.0; }
  bool Computes(Op op) const override { return op == Op::kWgrad; }
  // Each thread's fp32 sum is at most kMaxContractReduction terms, the rest in double: the
  // blocked sum of conv.h.
  absl::Status WithinContract(const Shape&) const override { return absl::OkStatus(); }

 protected:
  absl::StatusOr<Tiling> Choose(const Shape& s, const DeviceInfo& device,
                                double* seconds) const override {
    if (s.kernel_h != 1 || s.kernel_w != 1) {
      return absl::UnimplementedError(absl::StrCat(
          "pointwise_wgrad takes 1x1 kernels only; this shape has ", s.kernel_h, "x",
          s.kernel_w));
    }
    RETURN_IF_ERROR(CheckFitsInt32(s, "pointwise_wgrad"));
    ASSIGN_OR_RETURN(Tiling t, TilingFor(s));
    if (static_cast<size_t>(t.smem_bytes) > device.shared_memory_per_block_optin) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pointwise_wgrad needs ", t.smem_bytes, " bytes of shared memory per block; the device ",
          "allows ", device.shared_memory_per_block_optin));
    }
    *seconds = Seconds(s, t);
    return t;
  }
  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const Tiling& t,
                                                const DeviceInfo& device) const override {
    RETURN_IF_ERROR(AllowOptinSmem(reinterpret_cast<const void*>(&PointwiseWgradKernel),
                                   static_cast<int>(device.shared_memory_per_block_optin),
                                   "pointwise_wgrad: cudaFuncSetAttribute (shared memory size)"));
    return std::unique_ptr<Runner>(new PointwiseWgradRunner(s, t));
  }
};

}  // namespace
}  // namespace pointwise_internal

std::unique_ptr<Algorithm> MakePointwiseWgrad() {
  return std::make_unique<pointwise_internal::PointwiseWgrad>();
}

}  // namespace conv2d
