// "narrow_wgrad": the weight gradient of an ungrouped layer with few filter elements and a long
// reduction: the stems (3 input channels) and EfficientNet's early 1x1 layers (16-32 by 96-144
// channels at 56x56 and 112x112), whose dw is at most a few thousand elements, each a sum over
// 100k-400k pixels. A tensor-core GEMM pads such a dw to its 128-row tiles (implicit_gemm_wgmma:
// 0.11-0.20 ms on them, several times their bytes' time), so here dw is summed on the CUDA cores
// as outer products: each CTA takes a run of pixels, stages x's gathered columns and dy's rows
// for kStagePixels of them in shared memory (cp.async, two stages in flight), and every thread
// adds a 4x4 tile of dw's products, fp32 over one stage's kStagePixels terms and then in double;
// a second pass adds the CTAs' partial dw (and db) in CTA order in double and rounds once. Past
// wgrad_split's kCenterK terms x is taken centred as the wgmma wgrad takes it (x - c per
// channel, exact; c times dy's row sum, summed in double, added back): without it a large mean
// (x ~ 10) over 400k terms measured 1.35x the bar (PERF.md round 107). Deterministic: the runs
// depend on the shape only.
#ifndef CONV2D_CONV_ALGORITHMS_NARROW_WGRAD_NARROW_WGRAD_H_
#define CONV2D_CONV_ALGORITHMS_NARROW_WGRAD_NARROW_WGRAD_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "conv/arch/fast_div.h"
#include "conv/arch/host_device.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

std::unique_ptr<Algorithm> MakeNarrowWgrad();

namespace narrow_wgrad_internal {

constexpr int kThreads = 256;
constexpr int kStagePixels = 64;         // terms per stage, summed in fp32
constexpr int kRowFloats = kStagePixels + 1;  // a staged row, padded: conflict-free lanes
constexpr int kTile = 4;                 // each thread's dw tile, kTile x kTile
// Rows of x's columns and dy's channels staged at once (each padded to a multiple of kTile):
// a stage within 48 KB of shared memory.
constexpr int kMaxStagedRows = 184;
constexpr int kTargetRuns = 528;         // the pixel runs, ~4 CTAs per SM of an H100
constexpr int kMinRunPixels = 512;       // fewer would make the partial dw outweigh the run

struct Params {
  int m = 0, n = 0;          // dw's columns (Cin*Kh*Kw) and rows (Cout)
  int m_tiles = 0, n_tiles = 0;  // m and n padded to kTile, over kTile
  int k = 0;                 // batch*out_h*out_w pixels
  int run = 0, runs = 0;     // pixels per CTA (a multiple of kStagePixels), CTAs
  int slot = 0;              // doubles per CTA's partial: m*n (+ n for db)
  int p = 0;                 // out_h*out_w
  int h = 0, w = 0, ow = 0, kw = 0;
  int sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0;
  int64_t x_image = 0, dy_image = 0;  // floats per image
  int plane = 0;             // h*w
  FastDiv div_p, div_ow, div_taps, div_kw;
  bool db = false;
  bool centred = false;   // wgrad_split::Centres(k): x's columns minus their channel's centre
  bool row_sums = false;  // dy's row sums per run (db, or the centres' add-back)
};

// A stage's shared memory, twice (two in flight).
inline int SmemBytes(const Params& p) { return 2 * (p.m_tiles + p.n_tiles) * kTile * kRowFloats * 4; }

// The plan of a wgrad shape, and its modelled seconds; Unimplemented where dw has more rows or
// elements than a CTA stages and tiles.
absl::StatusOr<Params> MakeParams(const Shape& s, double* seconds);

// x's column m (input channel, tap) at pixel k (image, output row, output column): its offset in
// x, or -1 in the padding.
CONV2D_HOST_DEVICE_INLINE int64_t XOffset(const Params& p, int m, int k) {
  const int b = p.div_p.Div(k), pix = k - b * p.p;
  const int i = p.div_ow.Div(pix), j = pix - i * p.ow;
  const int c = p.div_taps.Div(m), t = m - c * static_cast<int>(p.div_taps.divisor);
  const int r = p.div_kw.Div(t), s = t - r * p.kw;
  const int y = i * p.sh - p.pt + r * p.dh, x = j * p.sw - p.pl + s * p.dw;
  if (y < 0 || y >= p.h || x < 0 || x >= p.w) return -1;
  return b * p.x_image + int64_t{c} * p.plane + y * p.w + x;
}

// dy's row n at pixel k.
CONV2D_HOST_DEVICE_INLINE int64_t DyOffset(const Params& p, int n, int k) {
  const int b = p.div_p.Div(k);
  return b * p.dy_image + int64_t{n} * p.p + (k - b * p.p);
}

}  // namespace narrow_wgrad_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_NARROW_WGRAD_NARROW_WGRAD_H_
