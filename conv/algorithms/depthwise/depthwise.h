// "depthwise": the convolution of each input channel with its own filters (in_channels / groups
// = 1: depthwise, with any channel multiplier Cout / groups), as MobileNet, EfficientNet and
// ConvNeXt use it, with padding, stride, dilation and the bias fused. A direct kernel on CUDA
// cores: there is no channel reduction to make a GEMM of, so each output is Kh*Kw terms summed
// in fp32, either from a shared-memory tile of its input plane (staged) or from global memory
// through the L1 (streaming), as TilingFor chooses.
#ifndef CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_H_
#define CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_H_

#include <cstdint>
#include <memory>

#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

std::unique_ptr<Algorithm> MakeDepthwise();

// "grouped_direct": grouped convolution with several input channels per group (groups > 1,
// in_channels / groups > 1: ResNeXt's 32 groups of 4 or 8 channels, and odd groupings), with
// padding, stride, dilation and the bias fused, kernels up to kMaxKernel a side. The grouped
// GEMMs are short and many (Cin/groups*Kh*Kw = 72 for 8 channels at 3x3), so it sums each output
// directly: depthwise's streaming kernel (one primitive, its tiling StreamingTilingFor's) run
// over the group's input channels, in_channels / groups * Kh * Kw terms per output in fp32,
// channel-major and then row-major, padding taps multiplied as zeros as F.conv2d does.
std::unique_ptr<Algorithm> MakeGroupedDirect();

namespace depthwise_internal {

// Each thread computes kCols consecutive outputs of kRows(shape) consecutive rows of one plane.
constexpr int kCols = 4;
// The largest kernel side taken (RepLKNet's 31 and beyond).
constexpr int64_t kMaxKernel = 63;
// A CTA's threads are at most this many: several whole planes when they are small, one tile of
// a large plane otherwise.
constexpr int kMaxThreads = 256;

// The square kernel sizes the streaming kernel unrolls; others take its run-time loop.
constexpr int kStreamingUnrolled[] = {3, 5, 7};

// How one shape is computed. Staged: a tile of tile_h x tile_w outputs of each of `planes` output
// planes per CTA, the input window each plane's tile reads (padding staged as zeros) and the
// shared memory it all takes. Streaming: only `threads`, outputs_per_thread and unrolled_kernel
// apply (every other field stays 0; smem_bytes is 0).
struct Tiling {
  bool staged = true;
  // Streaming: consecutive outputs of one row per thread (2 where the row step is one column,
  // sharing the input window between them; 1 otherwise), and the unrolled kernel size (one of
  // kStreamingUnrolled; 0 for the run-time loop).
  int outputs_per_thread = 0;
  int unrolled_kernel = 0;
  int rows_per_thread = 1;  // 4 at stride 1 and dilation 1 (an input row serves four outputs)
  int tile_h = 0, tile_w = 0;
  int tiles_h = 0, tiles_w = 0;
  int planes = 0;             // output planes per CTA
  int threads = 0;            // per CTA, a multiple of 32
  int in_rows = 0, in_cols = 0, pitch = 0;  // the staged window of one plane
  int filter_pitch = 0;       // kernel_w rounded up to 4 (16-byte rows)
  // Floats from one plane's window (in_rows x pitch) and filter (kernel_h x filter_pitch) to
  // the next's: padded so that the planes' and rows' loads fall on different banks.
  int plane_floats = 0, filter_floats = 0;
  int64_t smem_bytes = 0;
};
// Which kernel TilingFor takes. Streaming where the staged kernel's copy loop (one 4-byte cp.async
// per element with its index arithmetic, then a barrier) costs more than the reuse it buys: under
// kernels of at most 7x7, at stride or dilation above 1, or at stride 1 for kernels of at most
// 5x5 or planes of at most 196 outputs (14x14). Staged for kernels past 7 a side (the streaming
// kernel's run-time loop, one output a thread, lost 1.3x at 13x13 on 7x7 and 5.5x at 31x31 on
// 56x56) and for 6x6 and 7x7 on larger planes (even at 28x28, behind by 10% at 56x56). Measured on
// the H200 through the forced variants below, batch 32: streaming was 1.35-2.8x faster than staged
// on every layer it takes that was timed (the nets suite's stride-2 and small-plane layers, 3x3 at
// 112x112 and 56x56, 5x5 at 28x28); strided and dilated kernels past 7 were not timed.
bool PrefersStaged(const Shape& s);
// The staged kernel's tiling. Fails with ResourceExhausted when one plane's tile does not fit in
// `smem_limit` bytes.
absl::StatusOr<Tiling> StagedTilingFor(const Shape& s, int64_t smem_limit);
// The streaming kernel's: it needs no shared memory, so it takes every shape.
Tiling StreamingTilingFor(const Shape& s);
// The one PrefersStaged picks.
absl::StatusOr<Tiling> TilingFor(const Shape& s, int64_t smem_limit);

// "depthwise_staged" (staged = true) and "depthwise_streaming": depthwise with the kernel forced,
// the forward's and the wgrad's (depthwise_wgrad.h), so that both can be timed on one shape. Measurement only: registered by tools/lab, never
// ranked by auto (calibration() is infinite).
std::unique_ptr<Algorithm> MakeDepthwiseForced(bool staged);

}  // namespace depthwise_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_H_
