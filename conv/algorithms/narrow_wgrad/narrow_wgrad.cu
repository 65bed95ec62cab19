// "narrow_wgrad" (narrow_wgrad.h). Thread (tm, tn) of a CTA owns dw's columns tm + i*m_tiles and
// rows tn + j*n_tiles (i, j < kTile): interleaved, so that a warp's lanes (consecutive tn) read
// consecutive staged rows of dy, kRowFloats apart (conflict-free), and one staged row of x
// (a broadcast). Staging walks each row's pixels with consecutive threads: coalesced where the
// pixels are (dy always; x at stride 1).
#include "conv/algorithms/narrow_wgrad/narrow_wgrad.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/implicit_gemm/wgrad_split.h"
#include "conv/arch/cp_async.cuh"
#include "conv/arch/int_math.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace narrow_wgrad_internal {

// The time: two launches (~6 us), then the longer of the tensors' bytes (x, dy, and the
// partials written and read back) at 2.5 TB/s and the staged tiles' multiply-adds at 8e12/s
// (each takes two shared-memory loads per four of them: bound by shared memory, about a third
// of the fp32 rate).
absl::StatusOr<Params> MakeParams(const Shape& s, double* seconds) {
  const int64_t m = s.in_channels * s.kernel_h * s.kernel_w, n = s.out_channels;
  const int64_t m_rows = RoundUp(m, kTile), n_rows = RoundUp(n, kTile);
  if (m_rows + n_rows > kMaxStagedRows || (m_rows / kTile) * (n_rows / kTile) > kThreads) {
    return absl::UnimplementedError(absl::StrCat(
        "narrow_wgrad takes dw of at most ", kMaxStagedRows, " staged rows (Cin*Kh*Kw + Cout, ",
        "each padded to ", kTile, ") and ", kThreads * kTile * kTile, " padded elements; this ",
        "shape has ", m, " x ", n));
  }
  RETURN_IF_ERROR(CheckFitsInt32(s, "narrow_wgrad"));
  const int64_t k = s.batch * s.out_h() * s.out_w();
  Params p;
  p.m = static_cast<int>(m), p.n = static_cast<int>(n);
  p.m_tiles = static_cast<int>(m_rows / kTile), p.n_tiles = static_cast<int>(n_rows / kTile);
  p.k = static_cast<int>(k);
  p.run = static_cast<int>(
      std::max<int64_t>(kMinRunPixels, RoundUp(CeilDiv(k, kTargetRuns), kStagePixels)));
  p.runs = static_cast<int>(CeilDiv(k, p.run));
  p.db = s.has_bias;
  p.centred = wgrad_split::Centres(k);
  p.row_sums = p.db || p.centred;
  p.slot = p.m * p.n + (p.row_sums ? p.n : 0);
  p.p = static_cast<int>(s.out_h() * s.out_w());
  p.h = static_cast<int>(s.height), p.w = static_cast<int>(s.width);
  p.ow = static_cast<int>(s.out_w()), p.kw = static_cast<int>(s.kernel_w);
  p.sh = static_cast<int>(s.stride_h), p.sw = static_cast<int>(s.stride_w);
  p.dh = static_cast<int>(s.dilation_h), p.dw = static_cast<int>(s.dilation_w);
  p.pt = static_cast<int>(s.pad_top), p.pl = static_cast<int>(s.pad_left);
  p.x_image = s.in_channels * s.height * s.width;
  p.dy_image = s.out_channels * s.out_h() * s.out_w();
  p.plane = static_cast<int>(s.height * s.width);
  p.div_p = FastDiv(static_cast<uint32_t>(p.p));
  p.div_ow = FastDiv(static_cast<uint32_t>(p.ow));
  p.div_taps = FastDiv(static_cast<uint32_t>(s.kernel_h * s.kernel_w));
  p.div_kw = FastDiv(static_cast<uint32_t>(s.kernel_w));
  const double bytes = 4.0 * static_cast<double>(s.input_elements() + s.output_elements()) +
                       16.0 * p.runs * p.slot;
  const double fmas = static_cast<double>(m_rows) * n_rows * k;
  *seconds = 6e-6 + std::max(bytes / 2.5e12, fmas / 8e12);
  return p;
}

namespace {

// Stage `stage`'s copies: x's columns and dy's rows at pixels [k0, k0 + kStagePixels) of the run
// ending at `end`, zeros past it, in x's padding and in the padded rows (cp.async's zero fill).
__device__ __forceinline__ void StageCopies(const float* __restrict__ x,
                                            const float* __restrict__ dy, float* stage,
                                            const Params& p, int k0, int end) {
  const int m_rows = p.m_tiles * kTile, n_rows = p.n_tiles * kTile;
  float* xs = stage;
  float* ds = stage + m_rows * kRowFloats;
  for (int e = static_cast<int>(threadIdx.x); e < m_rows * kStagePixels; e += kThreads) {
    const int m = e / kStagePixels, kk = e % kStagePixels, k = k0 + kk;
    const int64_t at = m < p.m && k < end ? XOffset(p, m, k) : -1;
    CpAsync<4>(xs + m * kRowFloats + kk, x + (at >= 0 ? at : 0), at >= 0);
  }
  for (int e = static_cast<int>(threadIdx.x); e < n_rows * kStagePixels; e += kThreads) {
    const int n = e / kStagePixels, kk = e % kStagePixels, k = k0 + kk;
    const bool in = n < p.n && k < end;
    CpAsync<4>(ds + n * kRowFloats + kk, dy + (in ? DyOffset(p, n, k) : 0), in);
  }
  CpAsyncCommit();
}

// CTA r: the pixels [r*run, min((r+1)*run, k)), two stages in flight (cp.async), its partial dw
// and dy's row sums to partials + r*slot. x's columns are taken minus their channel's centre
// (0 unless p.centred: then wgrad_split's, and the sum kernel adds the centre times dy's sum).
__global__ void __launch_bounds__(kThreads)
    NarrowWgradKernel(const float* __restrict__ x, const float* __restrict__ dy,
                      const float* __restrict__ centers, double* __restrict__ partials,
                      const Params p) {
  extern __shared__ float staged[];  // two stages: x's columns [m padded][kRowFloats], dy's rows
  const int stage_floats = (p.m_tiles + p.n_tiles) * kTile * kRowFloats;
  const int xs_floats = p.m_tiles * kTile * kRowFloats;
  const int tid = static_cast<int>(threadIdx.x);
  const int tn = tid % p.n_tiles, tm = tid / p.n_tiles;
  const bool owns = tm < p.m_tiles;
  float center[kTile];
#pragma unroll
  for (int i = 0; i < kTile; ++i) {
    const int m = tm + i * p.m_tiles;
    center[i] = p.centred && owns && m < p.m ? centers[p.div_taps.Div(m)] : 0.0f;
  }
  const int begin = static_cast<int>(blockIdx.x) * p.run;
  const int end = min(begin + p.run, p.k);
  double sum[kTile][kTile] = {};
  double row_sum = 0;
  StageCopies(x, dy, staged, p, begin, end);
  int stage = 0;
  for (int k0 = begin; k0 < end; k0 += kStagePixels, stage ^= 1) {
    if (k0 + kStagePixels < end) {
      StageCopies(x, dy, staged + (stage ^ 1) * stage_floats, p, k0 + kStagePixels, end);
    } else {
      CpAsyncCommit();  // an empty group: the wait below counts the same either way
    }
    CpAsyncWait<1>();
    __syncthreads();
    const float* xs = staged + stage * stage_floats;
    const float* ds = xs + xs_floats;
    if (owns) {
      float part[kTile][kTile] = {};
#pragma unroll 4
      for (int kk = 0; kk < kStagePixels; ++kk) {
        float a[kTile], b[kTile];
#pragma unroll
        for (int i = 0; i < kTile; ++i) {
          a[i] = xs[(tm + i * p.m_tiles) * kRowFloats + kk] - center[i];  // exact (Center)
        }
#pragma unroll
        for (int j = 0; j < kTile; ++j) b[j] = ds[(tn + j * p.n_tiles) * kRowFloats + kk];
#pragma unroll
        for (int i = 0; i < kTile; ++i)
#pragma unroll
          for (int j = 0; j < kTile; ++j) part[i][j] = fmaf(a[i], b[j], part[i][j]);
      }
#pragma unroll
      for (int i = 0; i < kTile; ++i)
#pragma unroll
        for (int j = 0; j < kTile; ++j) sum[i][j] += part[i][j];
    }
    if (p.row_sums && tid < p.n) {
      for (int kk = 0; kk < kStagePixels; ++kk) row_sum += ds[tid * kRowFloats + kk];
    }
    __syncthreads();  // the next iteration's copies overwrite this stage
  }
  double* out = partials + static_cast<int64_t>(blockIdx.x) * p.slot;
  if (owns) {
#pragma unroll
    for (int i = 0; i < kTile; ++i) {
#pragma unroll
      for (int j = 0; j < kTile; ++j) {
        const int m = tm + i * p.m_tiles, n = tn + j * p.n_tiles;
        if (m < p.m && n < p.n) out[n * p.m + m] = sum[i][j];
      }
    }
  }
  if (p.row_sums && tid < p.n) out[p.m * p.n + tid] = row_sum;
}

// Element e of dw (then db): the runs' partials in run order, in double, plus (centred) its
// column's centre times its row's dy sum, rounded once.
__global__ void __launch_bounds__(kThreads)
    NarrowWgradSumKernel(const double* __restrict__ partials, const float* __restrict__ centers,
                         float* __restrict__ dw, float* __restrict__ db, const Params p) {
  const int e = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  const int filter = p.m * p.n;
  if (e >= filter + (db != nullptr ? p.n : 0)) return;
  double s = 0;
  for (int r = 0; r < p.runs; ++r) s += partials[static_cast<int64_t>(r) * p.slot + e];
  if (e >= filter) {
    db[e - filter] = static_cast<float>(s);
    return;
  }
  if (p.centred) {
    const int n = e / p.m, m = e - n * p.m;
    double dy_sum = 0;
    for (int r = 0; r < p.runs; ++r) {
      dy_sum += partials[static_cast<int64_t>(r) * p.slot + filter + n];
    }
    s += static_cast<double>(centers[p.div_taps.Div(m)]) * dy_sum;
  }
  dw[e] = static_cast<float>(s);
}

constexpr size_t kAlign = 256;

class NarrowWgradRunner : public Runner {
 public:
  NarrowWgradRunner(const Shape& s, const Params& p) : s_(s), p_(p) {}
  size_t workspace_bytes() const override {
    return static_cast<size_t>(p_.runs) * p_.slot * sizeof(double) + kAlign +
           static_cast<size_t>(s_.in_channels) * sizeof(float);
  }
  bool adds_bias() const override { return true; }  // writes db
  bool records_launches() const override { return true; }
  absl::Status Run(const RunArgs& a) const override {
    double* partials = reinterpret_cast<double*>(
        RoundUp(reinterpret_cast<uintptr_t>(a.workspace), kAlign));
    float* centers = reinterpret_cast<float*>(partials + static_cast<int64_t>(p_.runs) * p_.slot);
    if (p_.centred) RETURN_IF_ERROR(wgrad_split::Centers(s_, a.x, centers, a.stream));
    RETURN_IF_ERROR(CudaStatus(
        LaunchPdl(/*pdl=*/false, &NarrowWgradKernel, static_cast<unsigned>(p_.runs), kThreads,
                  SmemBytes(p_), a.stream, a.x, a.dy, centers, partials, p_),
        "narrow_wgrad kernel launch"));
    return CudaStatus(
        LaunchPdl(/*pdl=*/false, &NarrowWgradSumKernel,
                  static_cast<unsigned>(CeilDiv(p_.slot, kThreads)), kThreads, 0, a.stream,
                  partials, centers, a.dw, p_.db ? a.db : nullptr, p_),
        "narrow_wgrad sum launch");
  }

 private:
  Shape s_;
  Params p_;
};

class NarrowWgrad : public AlgorithmWithConfig<Params> {
 public:
  std::string name() const override { return "narrow_wgrad"; }
  // Not yet fitted by tools/fit_auto.py: the model's own times.
  double calibration() const override { return 1.0; }
  Geometry geometry() const override { return Geometry{true, true, true, false}; }
  bool Computes(Op op) const override { return op == Op::kWgrad; }
  // fp32 over kStagePixels terms, then double: far inside the direct-summation bound.

 protected:
  absl::StatusOr<Params> Choose(const Shape& s, const DeviceInfo&,
                                double* seconds) const override {
    return MakeParams(s, seconds);
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const Params& p,
                                                const DeviceInfo&) const override {
    // Two stages of up to ~48 KB: past the default 48 KB of dynamic shared memory.
    RETURN_IF_ERROR(CudaStatus(cudaFuncSetAttribute(&NarrowWgradKernel,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    2 * kMaxStagedRows * kRowFloats * 4),
                               "narrow_wgrad: cudaFuncSetAttribute (shared memory size)"));
    return std::unique_ptr<Runner>(new NarrowWgradRunner(s, p));
  }
};

}  // namespace
}  // namespace narrow_wgrad_internal

std::unique_ptr<Algorithm> MakeNarrowWgrad() {
  return std::make_unique<narrow_wgrad_internal::NarrowWgrad>();
}

}  // namespace conv2d
