#include "conv/algorithms/depthwise/depthwise_dgrad.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "conv/arch/fast_div.h"
#include "conv/arch/pdl.cuh"
#include "conv/core/cuda_status.h"
#include "conv/core/dx_pass.cuh"
#include "conv/core/status_macros.h"

namespace conv2d {
namespace depthwise_internal {
namespace {

// One CTA's chunk of one dx plane (dx_pass.cuh). First the chunk's dy rows (DepthwiseDgradRows)
// of the group's mult output channels and the channel's filter into shared memory, with the
// channel's zero term (conv/shape.h: a non-finite tap reaches every dx of its channel) by a vote
// that is also the barrier; then each pixel from them.
__global__ void __launch_bounds__(kDxPassThreads)
    DepthwiseDgradKernel(const float* __restrict__ dy, const float* __restrict__ w,
                         float* __restrict__ dx, const FoldMap m, int mult, int64_t channels,
                         int chunks, int max_rows) {
  extern __shared__ float smem[];
  float* const window = smem;  // [mult][max_rows][out_w]
  float* const filter = smem + int64_t{mult} * max_rows * m.out_w;  // [mult][taps]
  DyRows rows;
  int64_t window_plane = 0;
  DxPass(
      m, dx, chunks,
      [&](const DxPassChunk& ch) {
        const int taps = m.kh * m.kw;
        rows = DepthwiseDgradRows(m, m.div_w.Div(ch.begin), m.div_w.Div(ch.end - 1));
        window_plane = int64_t{rows.rows} * m.out_w;
        const int64_t plane = int64_t{m.out_h} * m.out_w;
        const float* g = dy + ch.bc * mult * plane + int64_t{rows.lo} * m.out_w;
        for (int k = 0; k < mult; ++k) {
          for (int64_t e = threadIdx.x; e < window_plane; e += blockDim.x) {
            window[k * window_plane + e] = g[k * plane + e];
          }
        }
        const float* f = DepthwiseChannelFilter(w, ch.bc % channels, mult, taps);
        bool finite = true;
        for (int e = threadIdx.x; e < mult * taps; e += blockDim.x) {
          filter[e] = f[e];
          finite &= isfinite(f[e]);
        }
        return __syncthreads_and(finite) ? 0.0f : __int_as_float(0x7fc00000);
      },
      [&](int64_t, int y, int x) {
        return DepthwiseDgradPixel<float>(m, mult, window, rows.lo, window_plane, filter, y, x);
      });
}

}  // namespace

bool DgradTakesBlocks(const Shape& s) {
  return s.in_per_group() == 1 && s.out_per_group() == 1 && s.kernel_h == s.kernel_w &&
         (s.kernel_h == 3 || s.kernel_h == 5 || s.kernel_h == 7) && s.stride_h == 2 &&
         s.stride_w == 2 && s.dilation_h == 1 && s.dilation_w == 1 &&
         s.pad_top % 2 == s.pad_left % 2;
}

namespace {

// The block kernel's launch: blocks_w x blocks_h 2x2 blocks a plane, `items` in all.
struct BlockParams {
  int h, w, out_h, out_w, uh, uw, channels, items;
  FastDiv by_blocks_w, by_blocks_h, by_channels;
};
constexpr int kBlockThreads = 256;

// Thread = one 2x2 block of dx (DepthwiseDgradBlock), blocks in (plane, block row, block) order.
template <int kK, int kV>
__global__ void __launch_bounds__(kBlockThreads)
    DepthwiseDgradBlockKernel(const float* __restrict__ dy, const float* __restrict__ w,
                              float* __restrict__ dx, const BlockParams p) {
  const int item = static_cast<int>(blockIdx.x) * kBlockThreads + static_cast<int>(threadIdx.x);
  if (item >= p.items) return;
  int row, bx, bc, by;
  p.by_blocks_w.DivMod(item, &row, &bx);
  p.by_blocks_h.DivMod(row, &bc, &by);
  const int c = bc - p.by_channels.Div(bc) * p.channels;
  const float* filter = DepthwiseChannelFilter(w, c, 1, kK * kK);
  float f[kK * kK];
  bool finite = true;
#pragma unroll
  for (int e = 0; e < kK * kK; ++e) {
    f[e] = __ldg(filter + e);
    finite &= isfinite(f[e]);
  }
  const float zero = finite ? 0.0f : __int_as_float(0x7fc00000);
  constexpr int kLo = DgradBlockLo(kK, kV);
  float out[2][2];
  DepthwiseDgradBlock<kK, kV>(dy + int64_t{bc} * p.out_h * p.out_w, f, p.out_h, p.out_w,
                              by + p.uh + kLo, bx + p.uw + kLo, out);
  float* d = dx + int64_t{bc} * p.h * p.w;
#pragma unroll
  for (int a = 0; a < 2; ++a) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int y = 2 * by + a, x = 2 * bx + b;
      if (y < p.h && x < p.w) d[y * p.w + x] = out[a][b] + zero;
    }
  }
}

using BlockKernelFn = void (*)(const float*, const float*, float*, const BlockParams);

template <int kV>
BlockKernelFn BlockKernelOfSize(int64_t k) {
  return k == 3 ? &DepthwiseDgradBlockKernel<3, kV>
         : k == 5 ? &DepthwiseDgradBlockKernel<5, kV>
                  : &DepthwiseDgradBlockKernel<7, kV>;
}

// The block kernel compiled for `s` (DgradTakesBlocks's).
BlockKernelFn BlockKernelFor(const Shape& s) {
  return s.pad_top % 2 == 0 ? BlockKernelOfSize<0>(s.kernel_h) : BlockKernelOfSize<1>(s.kernel_h);
}

BlockParams MakeBlockParams(const Shape& s) {
  BlockParams p = {};
  p.h = static_cast<int>(s.height), p.w = static_cast<int>(s.width);
  p.out_h = static_cast<int>(s.out_h()), p.out_w = static_cast<int>(s.out_w());
  p.uh = static_cast<int>(s.pad_top / 2), p.uw = static_cast<int>(s.pad_left / 2);
  p.channels = static_cast<int>(s.in_channels);
  const int blocks_h = (p.h + 1) / 2, blocks_w = (p.w + 1) / 2;
  // At most (h + 1)(w + 1) / 4 a plane: below dx's element count for h, w >= 2, and below
  // 2^31 for the 1-wide planes CheckFitsInt32 lets through.
  p.items = static_cast<int>(s.batch * s.in_channels * blocks_h * blocks_w);
  p.by_blocks_w = FastDiv(static_cast<uint32_t>(blocks_w));
  p.by_blocks_h = FastDiv(static_cast<uint32_t>(blocks_h));
  p.by_channels = FastDiv(static_cast<uint32_t>(p.channels));
  return p;
}

// Without an opt-in, so that several CTAs share an SM (the nets' layers take 1-2 KB).
constexpr size_t kMaxSmem = 48 * 1024;

struct DgradConfig {
  bool blocks = false;  // the block kernel (DgradTakesBlocks); the gather's fields then unused
  BlockParams block;
  FoldMap map;
  int max_rows = 0;    // DepthwiseDgradMaxRows
  size_t smem = 0;     // the window and the filter
};

class DgradRunner : public Runner {
 public:
  DgradRunner(const Shape& s, const DgradConfig& c) : s_(s), c_(c) {}
  size_t workspace_bytes() const override { return 0; }
  bool records_launches() const override { return true; }
  absl::Status Run(const RunArgs& a) const override {
    if (c_.blocks) {
      const unsigned ctas = static_cast<unsigned>((c_.block.items + kBlockThreads - 1) /
                                                  kBlockThreads);
      return CudaStatus(LaunchPdl(false, BlockKernelFor(s_), dim3(ctas), dim3(kBlockThreads),
                                  size_t{0}, a.stream, a.dy, a.w, a.dx, c_.block),
                        "depthwise_dgrad block kernel launch");
    }
    const DxPassDims d = DxPassDimsFor(s_.batch * s_.in_channels, s_.height * s_.width);
    return CudaStatus(LaunchPdl(false, DepthwiseDgradKernel, dim3(d.blocks), d.threads, c_.smem,
                                a.stream, a.dy, a.w, a.dx, c_.map,
                                static_cast<int>(s_.out_per_group()), s_.in_channels, d.chunks,
                                c_.max_rows),
                      "depthwise_dgrad kernel launch");
  }

 private:
  Shape s_;
  DgradConfig c_;
};

class DepthwiseDgrad : public AlgorithmWithConfig<DgradConfig> {
 public:
  std::string name() const override { return "depthwise_dgrad"; }
  // The block kernel's measured over modelled time on EfficientNet-B0's four strided depthwise
  // dgrads, 1.47-2.0x (geometric mean 1.75; H100, PERF.md round 105); the gather's own factor
  // is in its model below.
  double calibration() const override { return 1.75; }
  Geometry geometry() const override { return Geometry{true, true, true, true}; }
  bool Computes(Op op) const override { return op == Op::kDgrad; }
  // Each dx is a direct fp32 sum of its taps' terms (Cout/groups x Kh x Kw at most).
  absl::Status WithinContract(const Shape& shape) const override {
    return DirectSummationWithinContract(shape);
  }

 protected:
  // The time: dx written and dy and w read once at 3 TB/s, or the multiply-adds (dy's elements
  // times the taps, each once) at 20 T/s, whichever is longer, plus 3 us for the launch.
  absl::StatusOr<DgradConfig> Choose(const Shape& s, const DeviceInfo& device,
                                     double* seconds) const override {
    (void)device;
    if (!s.grouped() || s.in_per_group() != 1) {
      return absl::UnimplementedError(
          "depthwise_dgrad takes groups of one input channel (depthwise) only");
    }
    if (!s.strided()) {
      return absl::UnimplementedError(
          "depthwise_dgrad takes stride > 1 only; at stride 1 the depthwise forward on dy "
          "computes it (transposed_dgrad.h)");
    }
    // Every plane and channel filter is within dx's, dy's and w's element counts, so below 2^31.
    RETURN_IF_ERROR(CheckFitsInt32(s, "depthwise_dgrad"));
    const double bytes = 4.0 * static_cast<double>(s.input_elements() + s.output_elements() +
                                                   s.filter_elements());
    const double fmas = static_cast<double>(s.output_elements()) * s.kernel_h * s.kernel_w;
    const double floor = std::max(bytes / 3e12, fmas / 20e12);
    DgradConfig c;
    if (DgradTakesBlocks(s)) {
      c.blocks = true;
      c.block = MakeBlockParams(s);
      *seconds = floor + 3e-6;
      return c;
    }
    c.map = MakeFoldMap(s);
    c.max_rows = DepthwiseDgradMaxRows(c.map);
    c.smem = sizeof(float) * static_cast<size_t>(s.out_per_group()) *
             (static_cast<size_t>(c.max_rows) * c.map.out_w + s.kernel_h * s.kernel_w);
    if (c.smem > kMaxSmem) {
      return absl::UnimplementedError(absl::StrCat(
          "depthwise_dgrad: a chunk's dy rows and filter take ", c.smem,
          " bytes of shared memory, more than ", kMaxSmem, " (the stride phases take it)"));
    }
    // The gather's index arithmetic, which the bytes leave out: its measured over modelled time
    // on EfficientNet-B0's four strided depthwise dgrads (5.1-8.9x, geometric mean 6.5, H100,
    // PERF.md round 103), over the block kernel's calibration.
    *seconds = 6.5 / calibration() * floor + 3e-6;
    return c;
  }

  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& s, const DgradConfig& c,
                                                const DeviceInfo& device) const override {
    (void)device;
    return std::unique_ptr<Runner>(new DgradRunner(s, c));
  }
};

}  // namespace
}  // namespace depthwise_internal

std::unique_ptr<Algorithm> MakeDepthwiseDgrad() {
  return std::make_unique<depthwise_internal::DepthwiseDgrad>();
}

}  // namespace conv2d
