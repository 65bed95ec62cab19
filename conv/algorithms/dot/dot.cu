// "dot" (dot.h). The forward: a group of kLanes lanes per output (b, o): the lanes stride the n =
// Cin/groups * H * W terms (16-byte loads where n and the pointers allow), each keeps a partial
// sum, and shuffles add the partial sums; the first lane adds the bias and writes. x's slice is
// read by every output channel of its group and image, from L2 after the first.
// The weight gradient: one thread per dw element (o, t), dw[o, t] = the sum over the batch of
// dy[b, o] * x[b, g*n + t], consecutive threads on consecutive t (x's loads coalesced, dy's one
// value per warp); threads past dw write db[o], the sum of dy[:, o]. Both sums run in double in
// batch order and round once: exact enough for any batch, and fixed.
#include "conv/algorithms/dot/dot.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "conv/arch/fast_div.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace dot_internal {

int LanesPerOutput(int64_t terms) {
  int lanes = 4;
  while (lanes < 32 && lanes * 4 < terms) lanes *= 2;
  return lanes;
}

namespace {

constexpr int kThreads = 256;

struct Params {
  int outputs;        // batch * out_channels
  int n;              // terms per output: in_per_group * H * W
  int64_t x_image;    // floats per image of x: Cin * H * W
  int lanes;          // per output
  FastDiv by_out_channels, by_out_per_group;
  // The weight gradient's (0 for the forward): the batch, dw's elements (out_channels * n).
  int batch;
  int dw_elements;
  FastDiv by_n;
};

template <bool kVec4>
__global__ void __launch_bounds__(kThreads)
    DotKernel(const float* __restrict__ x, const float* __restrict__ w,
              const float* __restrict__ bias, float* __restrict__ y, const Params p) {
  const int thread = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  const int out = thread / p.lanes;  // lanes is a power of two: a shift
  const int lane = thread & (p.lanes - 1);
  const bool active = out < p.outputs;
  float acc = 0.0f;
  int o = 0;
  if (active) {
    const int b = p.by_out_channels.Div(out);
    o = out - b * static_cast<int>(p.by_out_channels.divisor);
    const int g = p.by_out_per_group.Div(o);
    const float* xs = x + b * p.x_image + static_cast<int64_t>(g) * p.n;
    const float* ws = w + static_cast<int64_t>(o) * p.n;
    if constexpr (kVec4) {
      const float4* x4 = reinterpret_cast<const float4*>(xs);
      const float4* w4 = reinterpret_cast<const float4*>(ws);
#pragma unroll 4
      for (int i = lane; i < p.n / 4; i += p.lanes) {
        const float4 a = __ldg(x4 + i), f = __ldg(w4 + i);
        acc = fmaf(a.x, f.x, acc);
        acc = fmaf(a.y, f.y, acc);
        acc = fmaf(a.z, f.z, acc);
        acc = fmaf(a.w, f.w, acc);
      }
    } else {
#pragma unroll 4
      for (int i = lane; i < p.n; i += p.lanes) acc = fmaf(__ldg(xs + i), __ldg(ws + i), acc);
    }
  }
  // Every lane of the warp takes part in the shuffles (inactive ones with zero); groups are
  // aligned power-of-two lane ranges, so xor stays inside a group.
  for (int offset = p.lanes / 2; offset > 0; offset /= 2) {
    acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  }
  if (active && lane == 0) y[out] = acc + (bias != nullptr ? bias[o] : 0.0f);
}

// Thread e < dw_elements: dw[e]; dw_elements <= e < dw_elements + Cout (with db): db[e -
// dw_elements].
__global__ void __launch_bounds__(kThreads)
    DotWgradKernel(const float* __restrict__ x, const float* __restrict__ dy,
                   float* __restrict__ dw, float* __restrict__ db, const Params p) {
  const int e = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  const int cout = static_cast<int>(p.by_out_channels.divisor);
  double acc = 0;
  if (e < p.dw_elements) {
    const int o = p.by_n.Div(e), t = e - o * p.n;
    const float* xs = x + static_cast<int64_t>(p.by_out_per_group.Div(o)) * p.n + t;
#pragma unroll 8
    for (int b = 0; b < p.batch; ++b) {
      acc = fma(static_cast<double>(__ldg(xs + b * p.x_image)),
                static_cast<double>(__ldg(dy + b * cout + o)), acc);
    }
    dw[e] = static_cast<float>(acc);
  } else if (db != nullptr && e < p.dw_elements + cout) {
    const int o = e - p.dw_elements;
#pragma unroll 8
    for (int b = 0; b < p.batch; ++b) acc += static_cast<double>(__ldg(dy + b * cout + o));
    db[o] = static_cast<float>(acc);
  }
}

class DotRunner : public Runner {
 public:
  DotRunner(const Params& p, bool has_bias) : p_(p), has_bias_(has_bias) {}
  size_t workspace_bytes() const override { return 0; }
  // The forward adds the bias; the weight gradient writes db.
  bool adds_bias() const override { return true; }
  absl::Status Run(const RunArgs& a) const override {
    if (p_.dw_elements > 0) {
      const int64_t threads =
          int64_t{p_.dw_elements} + (has_bias_ ? p_.by_out_channels.divisor : 0);
      return CudaStatus(
          LaunchPdl(/*pdl=*/false, &DotWgradKernel,
                    static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0,
                    a.stream, a.x, a.dy, a.dw, has_bias_ ? a.db : nullptr, p_),
          "dot wgrad kernel launch");
    }
    const int64_t threads = int64_t{p_.outputs} * p_.lanes;
    const unsigned blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
    // 16-byte loads need n % 4 == 0 (every slice then starts on a 16-byte boundary of a
    // 16-byte-aligned tensor) and the tensors' own alignment, which only the call knows.
    const bool vec4 = p_.n % 4 == 0 && p_.x_image % 4 == 0 &&
                      reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(a.w) % 16 == 0;
    auto* kernel = vec4 ? &DotKernel<true> : &DotKernel<false>;
    return CudaStatus(LaunchPdl(/*pdl=*/false, kernel, blocks, kThreads, 0, a.stream, a.x, a.w,
                                has_bias_ ? a.bias : nullptr, a.y, p_),
                      "dot kernel launch");
  }
  bool records_launches() const override { return true; }

 private:
  Params p_;
  bool has_bias_;
};

class Dot : public AlgorithmWithConfig<Params> {
 public:
  std::string name() const override { return "dot"; }
  // Not yet fitted by tools/fit_auto.py: the model's own times.
  double calibration() const override { return 1.0; }
  // Stride is moot with one output pixel; padding and dilation would make the window not
  // contiguous.
  Geometry geometry() const override { return Geometry{false, true, false, true}; }
  // The weight gradient too (the squeeze-excite layers' dw: a reduction over the batch only).
  // Not dgrad: with one output pixel it is this forward on dy (transposed_dgrad.h).
  bool Computes(Op op) const override { return op == Op::kFprop || op == Op::kWgrad; }
  // wgrad sums in double: within the contract whatever the batch.
  absl::Status WithinContract(const Shape& shape) const override {
    if (shape.op == Op::kWgrad) return absl::OkStatus();
    return DirectSummationWithinContract(shape);
  }

 protected:
  // The time: 3 us for the launch, plus every term's two loads (8 bytes; x's again for every
  // output channel, from L2) at ~8 TB/s or the tensors' bytes at 3 TB/s, whichever is longer;
  // the same for the weight gradient, whose terms are dw's elements times the batch.
  absl::StatusOr<Params> Choose(const Shape& s, const DeviceInfo&,
                                double* seconds) const override {
    if (s.kernel_h != s.height || s.kernel_w != s.width) {
      return absl::UnimplementedError(absl::StrCat(
          "dot takes kernels the size of the image (one output pixel) only; this shape has ",
          s.kernel_h, "x", s.kernel_w, " on ", s.height, "x", s.width));
    }
    RETURN_IF_ERROR(CheckFitsInt32(s, "dot"));
    Params p;
    p.outputs = static_cast<int>(s.batch * s.out_channels);
    p.n = static_cast<int>(s.reduction());
    p.x_image = s.in_channels * s.height * s.width;
    p.lanes = LanesPerOutput(p.n);
    if (int64_t{p.outputs} * p.lanes > int64_t{1} << 31) {
      return absl::OutOfRangeError("dot: more than 2^31 threads");
    }
    p.by_out_channels = FastDiv(static_cast<uint32_t>(s.out_channels));
    p.by_out_per_group = FastDiv(static_cast<uint32_t>(s.out_per_group()));
    p.batch = 0;
    p.dw_elements = 0;
    p.by_n = FastDiv(static_cast<uint32_t>(p.n));
    if (s.op == Op::kWgrad) {
      p.batch = static_cast<int>(s.batch);
      p.dw_elements = static_cast<int>(s.filter_elements());
      if (s.filter_elements() + s.out_channels > int64_t{1} << 31) {
        return absl::OutOfRangeError("dot wgrad: more than 2^31 threads");
      }
    }
    const double terms = static_cast<double>(p.outputs) * p.n;
    *seconds = 3e-6 + std::max(8.0 * terms / 8e12, s.min_bytes() / 3e12);
    return p;
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const Params& p,
                                                const DeviceInfo&) const override {
    return std::unique_ptr<Runner>(new DotRunner(p, s.has_bias));
  }
};

}  // namespace
}  // namespace dot_internal

std::unique_ptr<Algorithm> MakeDot() { return std::make_unique<dot_internal::Dot>(); }

}  // namespace conv2d
