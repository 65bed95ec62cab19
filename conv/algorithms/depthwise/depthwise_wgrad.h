// depthwise's weight gradient (shape.op = kWgrad, in_channels / groups = 1, any channel
// multiplier): dw[o, p, q] = sum over b, i, j of dy[b, o, i, j] * x[b, o / m, i*sh - pt + p*dh,
// j*sw - pl + q*dw]. Few outputs (Kh*Kw per channel), each a reduction of batch*out_h*out_w terms.
// Two kernels, as the forward has (depthwise.h), WgradTilingFor choosing.
//
// The streaming kernel (square kernels of 1, 3, 5 or 7, dilation 1, stride_w 1 or 2: every
// depthwise wgrad of the three networks; by rule all but ConvNeXt's 7x7 on its 56x56 and 28x28
// planes, which the staged kernel's rows serve faster) stages nothing. A CTA takes one output channel and one
// slice of its items; an item is `outputs` consecutive dy pixels of one row (two at stride_w 1,
// sharing kernel_w - 1 of their x columns; one at 2), and consecutive threads take consecutive
// items in (image, row, item) order, so that a warp's loads cover adjacent columns and the L1
// serves the x rows that neighbouring items and taps share. A thread keeps every tap's sum in
// registers and reads each item's dy and x window straight from global memory: the forward's
// streaming kernel's access pattern, which runs near the bytes' floor on these layers, where the
// staged kernel's copy loop (a 4-byte cp.async and two divisions per element) held the SMs at
// 48% busy and DRAM at 16% (ncu, PERF.md round 104).
//
// The staged kernel (the rest: larger kernels, dilation, other strides). A CTA takes one output
// channel, one tile of kTileP x kTileQ taps and one slice of the channel's
// stages. A stage is what is in shared memory at once: `images` whole planes of the channel (small
// planes), or one band of `rows` output rows of one image (large planes), x's window (padding
// staged as zeros) and dy's rows. A thread owns every tap of the tile over items of kSeg
// consecutive pixels of one dy row: it keeps the item's dy values and, per tap row, the x values
// they meet in registers, so that an x value loaded from shared memory serves up to kTileQ taps
// and a dy value kTileP*kTileQ (the reduction stays on the FMA pipe, not on shared-memory
// bandwidth). The tile is the whole kernel up to 8x8; larger kernels are cut into 8x8 tiles, each
// CTA of a tile staging its own window.
//
// Both multiply x's padding as zeros (0 * an infinite dy is NaN, as the definition's sum over
// the window gives) and skip the pixels past out_w of a row's last item.
//
// The sum, deterministic and within the bar whatever batch*out_h*out_w: x centred past
// kCenterK terms (Centred, below), each thread sums at most
// kMaxContractReduction terms per tap in fp32 (the slice count is raised until it does), the
// CTA's threads are added in double in a fixed order (a shuffle tree, then the warps in order)
// into a [slices][Cout][Kh*Kw] workspace, and a second kernel adds the slices in double in a
// fixed order (wgrad_split::SumSlices) and rounds once. The slice count and every split are
// functions of the shape alone.
#ifndef CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_WGRAD_H_
#define CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_WGRAD_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "conv/algorithms/implicit_gemm/wgrad_split.h"
#include "conv/arch/fast_div.h"
#include "conv/arch/host_device.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {
namespace depthwise_internal {

// Pixels per item (one dy row segment).
constexpr int kSeg = 16;
constexpr int kWgradThreads = 128;
// Items per thread in one stage, at most: a stage is sized for this many per thread.
constexpr int kItemsPerThread = 2;
// The CTAs the slice count aims at (about two waves of 4 CTAs on 132 SMs): a constant, so
// that the split depends on the shape alone.
constexpr int64_t kTargetCtas = 1024;

// Which kernel: WgradTilingFor's rule (streaming wherever it takes the shape but 7x7 at stride
// 1 on planes past 14x14), or one forced for measurement (the lab's depthwise_staged and
// depthwise_streaming).
enum class WgradPath { kByRule, kStaged, kStreaming };
// Whether the streaming kernel takes `s`: a square kernel of 1, 3, 5 or 7, dilation 1, stride_w
// 1 or 2 (stride_h any).
bool WgradStreams(const Shape& s);
// The streaming kernel's threads a CTA, and the CTAs its slice count aims at (two waves of eight
// CTAs an SM on 132 SMs) unless a slice would then give a thread fewer than kStreamMinItems items.
constexpr int kStreamThreads = 256;
constexpr int64_t kStreamTargetCtas = 2048;
constexpr int kStreamMinItems = 8;

// The column step the kernel is compiled for: (stride_w, dilation_w) = (1, 1) or (2, 1), the x
// values of a tap row held in registers; kRuntime reads them from shared memory per term.
enum class WgradCols : int { kUnit = 0, kStride2 = 1, kRuntime = 2 };

// Whether the kernels take x centred (wgrad_split's centring: past kCenterK terms a tap, a
// channel of large mean gives each term its mean while the sum cancels, and fp32 summation's
// error grows with the terms: RepLKNet's 31x31 at 56x56, batch 32, missed the bar 4.08x on the
// large-mean class uncentred, PERF.md round 105). The kernels then multiply x - center_c inside
// x and 0 in its padding (-center_c there, as the wgmma wgrad takes it, made the padding's
// terms as large again: 1.75x the bar on that layer, whose windows are half padding at their
// edges), and the slices' sum adds back center_c times, per tap, dy's sum over the pixels whose
// tap lies inside x (TapRange's rows times its columns), in double.
inline bool Centred(const Shape& s) {
  return wgrad_split::Centres(s.batch * s.out_h() * s.out_w());
}
// The centring's workspace (0 where not Centred): x's centres, the per-tap sums of dy
// ([Cout][Kh*Kw]) and their scratch (dy summed over the batch, [Cout][out_h*out_w], then over
// each tap row's rows, [Cout][Kh][out_w]), in double.
size_t CentringBytes(const Shape& s);

// The outputs [*lo, *hi) (of `out`) whose tap t lies inside x (of `in`) along one axis:
// 0 <= i*stride - pad + t*dilation < in.
CONV2D_HOST_DEVICE_INLINE void TapRange(int pad, int t, int dilation, int stride, int in, int out,
                                        int* lo, int* hi) {
  const int a = pad - t * dilation;           // i*stride >= a
  const int b = in - 1 + pad - t * dilation;  // i*stride <= b
  int l = a <= 0 ? 0 : (a + stride - 1) / stride;
  int h = b < 0 ? 0 : b / stride + 1;
  if (h > out) h = out;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

struct WgradTiling {
  bool streaming = false;
  // Streaming: items of `outputs` dy pixels, row_groups a row, `items` a channel, cut into
  // `slices` of items_per_slice (tile_p = tile_q = the kernel; the staged fields below unused).
  int outputs = 0, row_groups = 0, items_per_slice = 0;
  int64_t items = 0;
  int tile_p = 0, tile_q = 0;    // taps per CTA (the kernel's size up to 8, else 8)
  int tiles_p = 0, tiles_q = 0;  // tap tiles over the kernel
  WgradCols cols = WgradCols::kRuntime;
  int segs = 0;                  // items per dy row: ceil(out_w / kSeg)
  int images = 0, rows = 0;      // a stage: `images` planes of `rows` output rows
  int bands = 0;                 // stages per image (images == 1), else 1
  int64_t stages = 0;            // per channel
  int slices = 0, stages_per_slice = 0;
  int x_rows = 0, x_cols = 0, x_pitch = 0, dy_pitch = 0;
  int x_plane = 0, dy_plane = 0;  // floats per image of a stage
  int buffers = 0;               // 2 (double-buffered) when a slice has more than one stage
  int64_t ctas = 0;
  int64_t smem_bytes = 0;
  // Terms one thread sums in fp32 per tap: at most kMaxContractReduction.
  int64_t terms_per_thread = 0;
  int64_t items_per_stage() const { return int64_t{images} * rows * segs; }
  // The partials [slices][Cout][Kh*Kw] in double, then the centring's buffers (Centred).
  size_t workspace_bytes(const Shape& s) const {
    return static_cast<size_t>(slices) * static_cast<size_t>(s.out_channels * s.kernel_h *
                                                             s.kernel_w) * sizeof(double) +
           CentringBytes(s);
  }
};

// The tiling for a depthwise wgrad shape by `path`; ResourceExhausted when one stage exceeds
// smem_limit, Unimplemented when the streaming kernel is forced on a shape it does not take.
absl::StatusOr<WgradTiling> WgradTilingFor(const Shape& s, int64_t smem_limit,
                                           WgradPath path = WgradPath::kByRule);

// The streaming kernel's item `item` of a channel: image b, dy row i, and its first pixel j0 =
// g * outputs; by_row_groups and by_oh divide by row_groups and out_h. The kernel and the CPU
// test share it.
struct WgradStreamItem {
  int b, i, g;
};
CONV2D_HOST_DEVICE_INLINE WgradStreamItem WgradStreamItemOf(int item, const FastDiv& by_row_groups,
                                                            const FastDiv& by_oh) {
  WgradStreamItem r;
  int row;
  by_row_groups.DivMod(item, &row, &r.g);
  by_oh.DivMod(row, &r.b, &r.i);
  return r;
}

// Which (image, dy row, segment) of a stage item `item` is: segments outermost within an image
// and rows innermost, so that a warp's lanes take consecutive rows (x rows a pitch apart, the
// pitch odd: different banks). The kernel and the CPU test share it.
struct WgradItem {
  int image, row, seg;
};
CONV2D_HOST_DEVICE_INLINE WgradItem WgradItemOf(int item, int rows, int segs) {
  const int per_image = rows * segs;
  const int image = item / per_image, rem = item - image * per_image;
  return WgradItem{image, rem % rows, rem / rows};
}

// The first image and output row of stage `stage` (< stages) of a channel.
CONV2D_HOST_DEVICE_INLINE void WgradStageOrigin(int64_t stage, int images, int bands, int rows,
                                                int64_t* image0, int* row0) {
  if (bands > 1) {
    *image0 = stage / bands;
    *row0 = static_cast<int>(stage % bands) * rows;
  } else {
    *image0 = stage * images;
    *row0 = 0;
  }
}

// The runner of tiling `t` for shape `s` (a depthwise wgrad); lets its kernel use `smem_optin`
// bytes of shared memory (the device's opt-in limit, as the forward's staged kernel does).
absl::StatusOr<std::unique_ptr<Runner>> MakeWgradRunner(const Shape& s, const WgradTiling& t,
                                                         int smem_optin);
// The modelled time (seconds) of tiling `t` on `s`.
double WgradSeconds(const Shape& s, const WgradTiling& t);

}  // namespace depthwise_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_DEPTHWISE_DEPTHWISE_WGRAD_H_
