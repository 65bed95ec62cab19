// dgrad as forwards of dy (shared/BACKWARD.md's identity). At stride 1, dx = conv(dy, w') with
// w'[g*Cg + c, o, p, q] = w[g*Cog + o, c, Kh-1-p, Kw-1-q] (the filter flipped, its in- and
// out-channel roles swapped within each group) and the padding (K-1)*dilation - pad on each side,
// the dilation and groups as they are. At stride s > 1 (dilation 1) dx splits into s_h x s_w stride
// phases, the pixels (rh + sh*u, rw + sw*v): the taps that reach a phase are p = p0 + sh*t with
// p0 = (rh + pad_top) mod sh, so each phase is a stride-1 forward of dy with that sub-filter
// (flipped) and no inserted zero is multiplied; its output goes to the workspace and a scatter
// writes it to the phase's pixels of dx (as CUTLASS's strided dgrad walks one phase at a time).
// So every forward algorithm computes such a dgrad with its own kernels, after one pass over the
// filter: Algorithm::Propose and Initialize (algorithm.cc) offer it for any algorithm that does not
// compute dgrad itself, by the algorithm's own name. The forward's accuracy argument and
// determinism carry over: each phase is the same computation on other tensors. The zeros between a
// stride's outputs that the definition multiplies (conv/shape.h) are added by the scatter: 0 times
// the channel's filters, NaN where one of them is not finite.
#ifndef CONV2D_CONV_CORE_TRANSPOSED_DGRAD_H_
#define CONV2D_CONV_CORE_TRANSPOSED_DGRAD_H_

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "conv/arch/fast_div.h"
#include "conv/arch/host_device.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

// One stride phase of a dgrad. The phase's filter is [Cin, Cout/groups, th, tw]:
// w'[g*Cg + c, o, t, u] = w[g*Cog + o, c, p0h + sh*(th-1-t), p0w + sw*(tw-1-u)] at stride > 1, the
// dilated flip at stride 1 (p0 = 0, sh = sw = 1).
struct DgradPhase {
  int64_t rh = 0, rw = 0;      // the phase's first dx row and column
  int64_t rows = 0, cols = 0;  // its dx rows and columns (rh + sh*u < H, rw + sw*v < W)
  int64_t p0h = 0, p0w = 0;    // its first tap
  Shape forward;               // the stride-1 forward (filter th x tw); unset when empty()
  int64_t filter_offset = 0;   // where its filter starts among the phases' (floats)
  bool fold = false;           // DgradAsFold's: forward is the 1x1 whose columns FoldPixel adds
  bool empty() const { return forward.kernel_h == 0; }  // no tap reaches it: dx = 0 there
};

// The forwards that make `dgrad` (a dgrad shape), one per phase; false where there are none: a
// stride > 1 with a dilation > 1, or a padding that would make a phase's forward pad negatively.
// A stride-1 dgrad has one phase whose forward writes dx itself.
bool DgradAsForwards(const Shape& dgrad, std::vector<DgradPhase>* phases);

// The fold form (col2im), for any geometry: one 1x1 forward of dy whose output channels are the
// (input channel, tap) pairs, the columns
//   cols[b, c*taps + t, i, j] = sum_{o in c's group} dy[b, o, i, j] * w[o, c - g*Cg, t]
// (its filter w''[c*taps + t, o - g*Cog] = w[o, c - g*Cg, t]: FoldFilterSource), every product
// the definition adds to dx; then each dx pixel adds the columns of the taps that reach it, in
// tap order (FoldPixel), plus the channel's zero term as the scatter's. Where a phase's forward
// would have a handful of output channels (the stems' Cin = 3 against 32-128 wide tiles) the one
// forward has Cin x taps of them (ResNet-50's 7x7/2 stem: 147, against four phases of 3), for
// the price of the columns' bytes (taps times dy's plane per input channel): Propose offers it
// beside the phases for ungrouped dgrads of fewer than 32 input channels and takes the faster by
// its model, and alone where there are no phases.
// The forward's accuracy argument holds for the 1x1 (Cout/groups terms, fewer than a phase's);
// the gather adds at most Kh x Kw partial sums in fp32 in a fixed order. Returns false only
// where the columns or dx's planes would pass the gather's 32-bit plane index.
bool DgradAsFold(const Shape& dgrad, DgradPhase* fold);

// The flat index into w ([Cout, Cg, Kh, Kw]) of element e of the fold's filter ([Cin*taps, Cog]).
CONV2D_HOST_DEVICE_INLINE int64_t FoldFilterSource(int64_t e, int64_t cg, int64_t og,
                                                   int64_t taps) {
  const int64_t o = e % og, ct = e / og;
  const int64_t t = ct % taps, c = ct / taps;
  const int64_t g = c / cg;
  return ((g * og + o) * cg + (c - g * cg)) * taps + t;
}

// The dgrad's geometry as the gather reads it (one axis of which FoldAxis walks).
struct FoldMap {
  int32_t h = 0, w = 0, out_h = 0, out_w = 0, kh = 0, kw = 0;
  int32_t pt = 0, pl = 0, sh = 1, sw = 1, dh = 1, dw = 1;
  int32_t step_h = 1, step_w = 1;  // s / gcd(s, d): the tap step between outputs that reach
  int32_t back_h = 1, back_w = 1;  // d / gcd(s, d): how far back the output moves per step
  FastDiv div_w;                   // by w: a pixel's row
  FastDiv div_sh, div_sw;          // by the strides: FoldAxis at dilation 1
};
FoldMap MakeFoldMap(const Shape& dgrad);

// The taps of one axis that reach dx coordinate v: taps first + step*k with outputs
// out0 - back*k, for k in [k0, k1] (none when k1 < k0). A tap p reaches v where
// v + pad - p*d = s*i with 0 <= i < out; the p that satisfy the congruence repeat every step.
struct FoldRun {
  int first = 0, out0 = 0, k0 = 0, k1 = -1;
};
CONV2D_HOST_DEVICE_INLINE FoldRun FoldAxis(int v, int pad, int k, const FastDiv& by_s, int d,
                                           int out, int step, int back) {
  FoldRun r;
  const int s = static_cast<int>(by_s.divisor);  // the stride
  const int at = v + pad;  // >= 0
  if (d == 1) {  // step = s, back = 1: the taps at + ... congruent to `at`, one division
    int q, p;
    by_s.DivMod(at, &q, &p);
    if (p >= k) return r;
    r.first = p;
    r.out0 = q;
    r.k0 = q >= out ? q - out + 1 : 0;
    const int by_tap = by_s.Div(k - 1 - p);
    r.k1 = q < by_tap ? q : by_tap;
    return r;
  }
  int p = 0;
  while (p < step && p < k && (at - p * d) % s != 0) ++p;  // C's % of a negative: nonzero too
  if (p >= step || p >= k || at - p * d < 0) return r;
  r.first = p;
  r.out0 = (at - p * d) / s;
  r.k0 = r.out0 >= out ? (r.out0 - out + back) / back : 0;  // the first k with an output < out
  const int by_out = r.out0 / back, by_tap = (k - 1 - p) / step;
  r.k1 = by_out < by_tap ? by_out : by_tap;
  return r;
}

// dx at (y, x) of plane bc = b*Cin + c without its zero term: the columns of the taps that reach
// it, rows then columns in tap order.
template <typename T>
CONV2D_HOST_DEVICE_INLINE T FoldPixel(const FoldMap& m, const T* cols, int64_t bc, int y, int x) {
  const int64_t plane = int64_t{m.out_h} * m.out_w;
  const T* col = cols + bc * m.kh * m.kw * plane;
  const FoldRun r = FoldAxis(y, m.pt, m.kh, m.div_sh, m.dh, m.out_h, m.step_h, m.back_h);
  const FoldRun q = FoldAxis(x, m.pl, m.kw, m.div_sw, m.dw, m.out_w, m.step_w, m.back_w);
  T sum = 0;
  for (int a = r.k0; a <= r.k1; ++a) {
    const int p = r.first + m.step_h * a, i = r.out0 - m.back_h * a;
    for (int b = q.k0; b <= q.k1; ++b) {
      const int t = q.first + m.step_w * b, j = q.out0 - m.back_w * b;
      sum += col[(p * m.kw + t) * plane + int64_t{i} * m.out_w + j];
    }
  }
  return sum;
}

// What Propose carries for such a dgrad: the phases and the algorithm's proposal for each.
struct TransposedDgradProposal {
  std::vector<DgradPhase> phases;
  std::vector<Proposal> inner;  // one per phase, none for an empty one
};

// The runner: the phases' filters into the workspace, then each phase's forward (a runner of the
// phase's forward shape) on dy, writing dx (stride 1) or the workspace and a scatter into dx. Set
// by transposed_dgrad.cu when it is linked (every binary that links the plan); null otherwise.
using TransposedDgradFactory = std::unique_ptr<Runner> (*)(
    const Shape& dgrad, const std::vector<DgradPhase>& phases,
    std::vector<std::unique_ptr<Runner>> forwards);
extern TransposedDgradFactory transposed_dgrad_factory;

// The flat index into w ([Cout, Cg, Kh, Kw]) of element e of a phase's filter ([Cin, Cog, th, tw])
// whose taps start at (p0h, p0w) with steps (sh, sw): the one index map of the transform, for the
// kernel and the CPU test.
CONV2D_HOST_DEVICE_INLINE int64_t TransposedFilterSource(int64_t e, int64_t cg, int64_t og,
                                                         int64_t kh, int64_t kw, int64_t th,
                                                         int64_t tw, int64_t p0h, int64_t p0w,
                                                         int64_t sh, int64_t sw) {
  const int64_t taps = th * tw;
  const int64_t tap = e % taps;
  const int64_t o = (e / taps) % og;
  const int64_t gc = e / (taps * og);  // g*Cg + c
  const int64_t g = gc / cg, c = gc - g * cg;
  const int64_t t = tap / tw, u = tap - t * tw;
  const int64_t p = p0h + sh * (th - 1 - t), q = p0w + sw * (tw - 1 - u);
  return ((g * og + o) * cg + c) * kh * kw + p * kw + q;
}

// The phases' filters made by one launch each for up to kPhasesPerLaunch phases (a launch per
// phase cost ~4 us each, mostly launch latency, for a few hundred KB of filter: PERF.md round
// 109), the phases' filters one after another as DgradAsForwards laid them out
// (DgradPhase::filter_offset).
constexpr int kPhasesPerLaunch = 16;
struct PhaseFilters {
  int64_t cg = 0, og = 0, kh = 1, kw = 1, sh = 1, sw = 1;  // the dgrad's
  int count = 0;
  int64_t base = 0;   // where the launch's first phase's filter starts (filter_offset)
  int64_t total = 0;  // elements of the launch's phases
  struct Phase {
    int64_t begin = 0;  // its first element, counted from base
    int32_t th = 1, tw = 1, p0h = 0, p0w = 0;
  } phase[kPhasesPerLaunch];
};
// The launches for `phases` (DgradAsForwards's of `dgrad`), the empty phases skipped.
std::vector<PhaseFilters> PhaseFilterLaunches(const Shape& dgrad,
                                              const std::vector<DgradPhase>& phases);
// TransposeChannels's: out[c][r] = in[r][c] as one phase's filter of a 1x1, ungrouped.
PhaseFilters ChannelTransposeFilters(int64_t rows, int64_t cols);
// Where element e of launch f (counted from f.base) comes from in w: its phase's
// TransposedFilterSource.
CONV2D_HOST_DEVICE_INLINE int64_t PhaseFilterSource(const PhaseFilters& f, int64_t e) {
  int i = 0;
  while (i + 1 < f.count && f.phase[i + 1].begin <= e) ++i;
  const PhaseFilters::Phase& ph = f.phase[i];
  return TransposedFilterSource(e - ph.begin, f.cg, f.og, f.kh, f.kw, ph.th, ph.tw, ph.p0h,
                                ph.p0w, f.sh, f.sw);
}

// The scatter at stride > 1, one pass over dx in dx's order (each dx pixel written once, whole
// sectors: per-phase passes wrote every sector of dx once per phase, partly, empty phases'
// zeros included): dx[b, c, y, x] = phase (y mod sh, x mod sw)'s output element (b, c, y / sh,
// x / sw) plus the channel's zero term. The non-empty phases' outputs lie one after another in
// the workspace, each [batch*channels][out_rows][out_cols] (a phase's forward may compute more
// rows or columns than it has pixels: PhaseAxis's padding). At most kMaxScatterPhases phases
// (the map is a kernel parameter): DgradAsForwards declines more (a stride product past 64).
constexpr int kMaxScatterPhases = 64;
struct ScatterMap {
  int64_t offset[kMaxScatterPhases] = {};  // floats into the phases' outputs; -1: no tap reaches
  int32_t out_rows[kMaxScatterPhases] = {}, out_cols[kMaxScatterPhases] = {};
  int32_t h = 0, w = 0, sh = 1, sw = 1;
  int32_t phase_cols = 1;  // phases per phase row: min(sw, w), DgradAsForwards's order
  FastDiv div_w, div_sh, div_sw;
  int64_t outputs = 0;  // floats of all the phases' outputs
};
// The map of `phases` (DgradAsForwards's of the strided dgrad `d`), outputs packed in phase order.
ScatterMap MakeScatterMap(const Shape& d, const std::vector<DgradPhase>& phases);
// Where dx pixel (y, x) of plane bc (= b*channels + c) comes from among the phases' outputs; -1
// where its phase is empty.
CONV2D_HOST_DEVICE_INLINE int64_t ScatterSource(const ScatterMap& m, int64_t bc, int y, int x) {
  const int u = m.div_sh.Div(y), v = m.div_sw.Div(x);
  const int ph = (y - u * m.sh) * m.phase_cols + (x - v * m.sw);
  if (m.offset[ph] < 0) return -1;
  return m.offset[ph] + (bc * m.out_rows[ph] + u) * int64_t{m.out_cols[ph]} + v;
}

// out[c][r] = in[r][c] for in [rows][cols] on `stream`: the phases' filter transform of a 1x1
// filter (TransposeFilterKernel), which implicit_gemm_wgmma's weight gradient also uses to undo
// its swapped orientation. Defined where the runner is (the transposed_dgrad target).
absl::Status TransposeChannels(const float* in, float* out, int64_t rows, int64_t cols,
                               cudaStream_t stream);

// The modelled time of the transform and, at stride > 1, the scatter: the filter once, dx written
// and read once more, a launch per phase.
double TransposedDgradOverheadSeconds(const Shape& dgrad, size_t phases);

}  // namespace conv2d

#endif  // CONV2D_CONV_CORE_TRANSPOSED_DGRAD_H_
