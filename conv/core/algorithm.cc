// Algorithm's non-virtual entry points: the geometry and operation checks, and a dgrad offered to
// every forward algorithm as the forwards it equals (transposed_dgrad.h).
#include "conv/core/algorithm.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "conv/core/transposed_dgrad.h"

namespace conv2d {

TransposedDgradFactory transposed_dgrad_factory = nullptr;

namespace {

// The stride-1 forward of one phase along one axis: its taps p0 + s*t (t < taps), the padding
// before (taps - 1 - c0) and after that make it cover `rows` outputs from `in` inputs; false
// where the padding before would be negative.
struct Axis {
  int64_t taps = 0, pad_before = 0, pad_after = 0;
};
bool PhaseAxis(int64_t r, int64_t k, int64_t s, int64_t pad, int64_t in, int64_t rows,
               int64_t p0, Axis* a) {
  a->taps = p0 < k ? (k - 1 - p0) / s + 1 : 0;
  if (a->taps == 0) return true;
  const int64_t c0 = (r + pad - p0) / s;  // exact: p0 = (r + pad) mod s
  a->pad_before = a->taps - 1 - c0;
  if (a->pad_before < 0) return false;
  const int64_t need = rows - in - a->pad_before + a->taps - 1;
  a->pad_after = need > 0 ? need : 0;
  return true;
}

}  // namespace

bool DgradAsForwards(const Shape& d, std::vector<DgradPhase>* phases) {
  if (d.op != Op::kDgrad) return false;
  phases->clear();
  Shape base = d;
  base.op = Op::kFprop;
  base.has_bias = false;
  base.in_channels = d.out_channels;
  base.out_channels = d.in_channels;
  base.height = d.out_h();
  base.width = d.out_w();
  base.stride_h = base.stride_w = 1;
  if (!d.strided()) {
    const int64_t span_h = d.dilation_h * (d.kernel_h - 1), span_w = d.dilation_w * (d.kernel_w - 1);
    DgradPhase p;
    p.rows = d.height, p.cols = d.width;
    p.forward = base;
    p.forward.pad_top = span_h - d.pad_top;
    p.forward.pad_bottom = span_h - d.pad_bottom;
    p.forward.pad_left = span_w - d.pad_left;
    p.forward.pad_right = span_w - d.pad_right;
    if (p.forward.pad_top < 0 || p.forward.pad_bottom < 0 || p.forward.pad_left < 0 ||
        p.forward.pad_right < 0 || !ValidateShape(p.forward).ok()) {
      return false;
    }
    phases->push_back(p);
    return true;
  }
  if (d.dilated()) return false;
  if (std::min(d.stride_h, d.height) * std::min(d.stride_w, d.width) > kMaxScatterPhases) {
    return false;  // more phases than the scatter's map holds
  }
  if (d.height * d.width > std::numeric_limits<int32_t>::max()) {
    return false;  // the scatter indexes a dx plane in 32 bits
  }
  int64_t offset = 0;
  for (int64_t rh = 0; rh < d.stride_h && rh < d.height; ++rh) {
    for (int64_t rw = 0; rw < d.stride_w && rw < d.width; ++rw) {
      DgradPhase p;
      p.rh = rh, p.rw = rw;
      p.rows = (d.height - 1 - rh) / d.stride_h + 1;
      p.cols = (d.width - 1 - rw) / d.stride_w + 1;
      p.p0h = (rh + d.pad_top) % d.stride_h;
      p.p0w = (rw + d.pad_left) % d.stride_w;
      Axis h, w;
      if (!PhaseAxis(rh, d.kernel_h, d.stride_h, d.pad_top, base.height, p.rows, p.p0h, &h) ||
          !PhaseAxis(rw, d.kernel_w, d.stride_w, d.pad_left, base.width, p.cols, p.p0w, &w)) {
        return false;
      }
      if (h.taps > 0 && w.taps > 0) {
        p.forward = base;
        p.forward.kernel_h = h.taps, p.forward.kernel_w = w.taps;
        p.forward.pad_top = h.pad_before, p.forward.pad_bottom = h.pad_after;
        p.forward.pad_left = w.pad_before, p.forward.pad_right = w.pad_after;
        if (!ValidateShape(p.forward).ok()) return false;
        p.filter_offset = offset;
        offset += p.forward.filter_elements();
      }
      phases->push_back(p);
    }
  }
  return true;
}

bool DgradAsFold(const Shape& d, DgradPhase* fold) {
  if (d.op != Op::kDgrad) return false;
  const int64_t kMaxPlane = std::numeric_limits<int32_t>::max();
  if (d.height * d.width > kMaxPlane || d.out_h() * d.out_w() > kMaxPlane) return false;
  DgradPhase f;
  f.fold = true;
  f.rows = d.height, f.cols = d.width;
  f.forward = Shape{d.batch, d.out_channels, d.in_channels * d.kernel_h * d.kernel_w, d.out_h(),
                    d.out_w(), 1, 1};
  f.forward.groups = d.groups;
  if (!ValidateShape(f.forward).ok()) return false;
  *fold = f;
  return true;
}

FoldMap MakeFoldMap(const Shape& d) {
  FoldMap m;
  m.h = static_cast<int32_t>(d.height), m.w = static_cast<int32_t>(d.width);
  m.out_h = static_cast<int32_t>(d.out_h()), m.out_w = static_cast<int32_t>(d.out_w());
  m.kh = static_cast<int32_t>(d.kernel_h), m.kw = static_cast<int32_t>(d.kernel_w);
  m.pt = static_cast<int32_t>(d.pad_top), m.pl = static_cast<int32_t>(d.pad_left);
  m.sh = static_cast<int32_t>(d.stride_h), m.sw = static_cast<int32_t>(d.stride_w);
  m.dh = static_cast<int32_t>(d.dilation_h), m.dw = static_cast<int32_t>(d.dilation_w);
  const int32_t gh = std::gcd(m.sh, m.dh), gw = std::gcd(m.sw, m.dw);
  m.step_h = m.sh / gh, m.back_h = m.dh / gh;
  m.step_w = m.sw / gw, m.back_w = m.dw / gw;
  m.div_w = FastDiv(static_cast<uint32_t>(m.w));
  m.div_sh = FastDiv(static_cast<uint32_t>(m.sh));
  m.div_sw = FastDiv(static_cast<uint32_t>(m.sw));
  return m;
}

ScatterMap MakeScatterMap(const Shape& d, const std::vector<DgradPhase>& phases) {
  ScatterMap m;
  m.h = static_cast<int32_t>(d.height), m.w = static_cast<int32_t>(d.width);
  m.sh = static_cast<int32_t>(d.stride_h), m.sw = static_cast<int32_t>(d.stride_w);
  m.phase_cols = static_cast<int32_t>(std::min(d.stride_w, d.width));
  m.div_w = FastDiv(static_cast<uint32_t>(m.w));
  m.div_sh = FastDiv(static_cast<uint32_t>(m.sh));
  m.div_sw = FastDiv(static_cast<uint32_t>(m.sw));
  for (size_t i = 0; i < phases.size() && i < kMaxScatterPhases; ++i) {
    const DgradPhase& p = phases[i];
    if (p.empty()) {
      m.offset[i] = -1;
      continue;
    }
    m.offset[i] = m.outputs;
    m.out_rows[i] = static_cast<int32_t>(p.forward.out_h());
    m.out_cols[i] = static_cast<int32_t>(p.forward.out_w());
    m.outputs += p.forward.output_elements();
  }
  return m;
}

std::vector<PhaseFilters> PhaseFilterLaunches(const Shape& d,
                                              const std::vector<DgradPhase>& phases) {
  std::vector<PhaseFilters> launches;
  for (const DgradPhase& ph : phases) {
    if (ph.empty()) continue;
    if (launches.empty() || launches.back().count == kPhasesPerLaunch) {
      PhaseFilters f;
      f.cg = d.in_per_group(), f.og = d.out_per_group();
      f.kh = d.kernel_h, f.kw = d.kernel_w, f.sh = d.stride_h, f.sw = d.stride_w;
      f.base = ph.filter_offset;
      launches.push_back(f);
    }
    PhaseFilters& f = launches.back();
    PhaseFilters::Phase& p = f.phase[f.count++];
    p.begin = ph.filter_offset - f.base;
    p.th = static_cast<int32_t>(ph.forward.kernel_h);
    p.tw = static_cast<int32_t>(ph.forward.kernel_w);
    p.p0h = static_cast<int32_t>(ph.p0h);
    p.p0w = static_cast<int32_t>(ph.p0w);
    f.total = p.begin + ph.forward.filter_elements();
  }
  return launches;
}

PhaseFilters ChannelTransposeFilters(int64_t rows, int64_t cols) {
  // TransposedFilterSource at 1x1, groups 1: w' [Cin = cols][Cout = rows] from w [rows][cols].
  PhaseFilters f;
  f.cg = cols, f.og = rows, f.count = 1, f.total = rows * cols;
  return f;
}

double TransposedDgradOverheadSeconds(const Shape& d, size_t phases) {
  const double scatter = d.strided() ? 8.0 * static_cast<double>(d.input_elements()) : 0.0;
  return (8.0 * static_cast<double>(d.filter_elements()) + scatter) / 2e12 +
         2e-6 * static_cast<double>(phases);
}

namespace {

// The fold's time beside its forward: the filter read and written, the columns read back by
// the gather, dx written; three launches.
double FoldOverheadSeconds(const Shape& d, const DgradPhase& fold) {
  const double bytes = 8.0 * static_cast<double>(d.filter_elements()) +
                       4.0 * static_cast<double>(fold.forward.output_elements()) +
                       4.0 * static_cast<double>(d.input_elements());
  return bytes / 2e12 + 6e-6;
}

// The fold instead of the phases, for ungrouped, undilated, strided dgrads where every phase
// has taps (kernel >= stride on both axes), as measured (PERF.md round 109, H100, forced forms
// in one call). Where the taps do not overlap (kernel = stride: ConvNeXt's 2x2/2 downsampling)
// the fold's columns are dx's size, so it moves the phases' bytes in one GEMM of Cin x taps
// columns instead of a GEMM per phase of Cin columns each: 0.138 / 0.110 / 0.111 ms against the
// phases' 0.126-0.139 (side by side; 0.152-0.159 one after another) at 56x56, 28x28 and 14x14.
// Where they overlap (3x3/2) the fold's columns are taps / stride^2 times dx, and it wins only
// where one phase's GEMM fills at most half the SMs with 128 x 128 tiles: 0.197 against the
// phases' 0.205 at 14x14 (512 channels, 52 tiles), but 0.198 against 0.176 at 28x28 (98 tiles)
// and 0.279 against 0.206 at 56x56. Where some phases are empty (1x1/2) the phases stay (the fold
// 0.176-0.230 ms against 0.137-0.159). At stride 1 the one forward writes dx itself. The SMs
// are the model device's (the H100's and H200's), so that every device chooses the same form
// (and so the same bits).
bool FoldBeatsPhases(const Shape& d) {
  constexpr int64_t kTile = 128 * 128;
  if (!d.strided() || d.grouped() || d.dilated() || d.kernel_h < d.stride_h ||
      d.kernel_w < d.stride_w) {
    return false;
  }
  if (d.kernel_h == d.stride_h && d.kernel_w == d.stride_w) return true;
  const int64_t phase_outputs = d.batch * d.out_h() * d.out_w() * d.in_channels;
  return phase_outputs <= DeviceInfo::ModelDevice().sm_count / 2 * kTile;
}

// A dgrad as `phases` (DgradAsForwards's, or DgradAsFold's one) of `alg`'s forwards.
absl::StatusOr<Proposal> ProposeForwards(const Algorithm& alg, const Shape& d,
                                         std::vector<DgradPhase> phases,
                                         const DeviceInfo& device) {
  TransposedDgradProposal t;
  const bool fold = phases.size() == 1 && phases[0].fold;
  double seconds = fold ? FoldOverheadSeconds(d, phases[0])
                        : TransposedDgradOverheadSeconds(d, phases.size());
  for (const DgradPhase& p : phases) {
    if (p.empty()) {
      t.inner.emplace_back();
      continue;
    }
    absl::StatusOr<Proposal> inner = alg.Propose(p.forward, device);
    if (!inner.ok()) return inner.status();
    seconds += inner->estimated_seconds;
    t.inner.push_back(*std::move(inner));
  }
  t.phases = std::move(phases);
  return MakeProposal(std::move(t), seconds);
}

}  // namespace

absl::StatusOr<Proposal> Algorithm::Propose(const Shape& shape, const DeviceInfo& device) const {
  std::vector<DgradPhase> phases;
  DgradPhase fold;
  const DgradForm form = dgrad_form();
  const bool phased =
      !Computes(shape.op) && form != DgradForm::kFold && DgradAsForwards(shape, &phases);
  // The fold beside the phases only where a phase's forward would not fill the narrowest tile
  // (32 output channels; ungrouped: the stems). Elsewhere the model ranked it first on layers
  // where it measured slower (PERF.md round 101: ResNet-50's 1x1/2 dgrads 0.18 -> 0.41 ms,
  // EfficientNet's strided depthwise 0.10 -> 0.32 ms), except where FoldBeatsPhases' measured
  // rule takes it instead of them. Without phases it is the only form.
  constexpr int64_t kFoldMaxChannels = 32;
  const bool narrow = !shape.grouped() && shape.in_channels < kFoldMaxChannels;
  const bool foldable = !Computes(shape.op) && form != DgradForm::kPhases &&
                        (!phased || narrow || FoldBeatsPhases(shape)) &&
                        DgradAsFold(shape, &fold) && WithinContract(fold.forward).ok();
  // The fold alone where there are no phases, or by FoldBeatsPhases' rule; beside the phases
  // for the narrow (below).
  if (foldable && !(phased && narrow)) return ProposeForwards(*this, shape, {fold}, device);
  if (phased) {
    // Both forms where both exist, the faster by the model (DgradAsFold's comment).
    absl::StatusOr<Proposal> by_phases = ProposeForwards(*this, shape, std::move(phases), device);
    if (!foldable) return by_phases;
    absl::StatusOr<Proposal> by_fold = ProposeForwards(*this, shape, {fold}, device);
    const bool fold_wins = by_fold.ok() && (!by_phases.ok() || by_fold->estimated_seconds <
                                                                   by_phases->estimated_seconds);
    return fold_wins ? by_fold : by_phases;
  }
  absl::Status st = CheckGeometry(shape);
  if (!st.ok()) return st;
  return ProposeFor(shape, device);
}

absl::StatusOr<std::unique_ptr<Runner>> Algorithm::Initialize(const Shape& shape,
                                                              const Proposal& proposal,
                                                              const DeviceInfo& device) const {
  const TransposedDgradProposal* t = ConfigOf<TransposedDgradProposal>(proposal);
  if (t == nullptr) return InitializeFor(shape, proposal, device);
  if (transposed_dgrad_factory == nullptr) {
    return absl::InternalError("the transposed dgrad (//conv/core:transposed_dgrad) is not linked");
  }
  std::vector<std::unique_ptr<Runner>> forwards;
  for (size_t i = 0; i < t->phases.size(); ++i) {
    if (t->phases[i].empty()) {
      forwards.emplace_back();
      continue;
    }
    absl::StatusOr<std::unique_ptr<Runner>> f =
        InitializeFor(t->phases[i].forward, t->inner[i], device);
    if (!f.ok()) return f.status();
    forwards.push_back(*std::move(f));
  }
  return transposed_dgrad_factory(shape, t->phases, std::move(forwards));
}

absl::Status Algorithm::MeetsContract(const Shape& shape) const {
  std::vector<DgradPhase> phases;
  DgradPhase fold;
  if (Computes(shape.op)) return WithinContract(shape);
  if (DgradAsForwards(shape, &phases)) {
    for (const DgradPhase& p : phases) {
      if (p.empty()) continue;
      absl::Status st = WithinContract(p.forward);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }
  // Only where there are no phases: the fold's 1x1 sums fewer terms than any phase would, so
  // where the phases meet the contract the fold does too (Propose takes it only if it does).
  if (DgradAsFold(shape, &fold)) return WithinContract(fold.forward);
  return WithinContract(shape);
}

}  // namespace conv2d
