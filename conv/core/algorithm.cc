// Algorithm's non-virtual entry points: the geometry and operation checks, and a stride-1 dgrad
// offered to every forward algorithm as the forward it equals (transposed_dgrad.h).
#include "conv/core/algorithm.h"

#include "conv/core/transposed_dgrad.h"

namespace conv2d {

TransposedDgradFactory transposed_dgrad_factory = nullptr;

bool DgradAsForward(const Shape& d, Shape* f) {
  if (d.op != Op::kDgrad || d.strided()) return false;
  const int64_t span_h = d.dilation_h * (d.kernel_h - 1), span_w = d.dilation_w * (d.kernel_w - 1);
  Shape s = d;
  s.op = Op::kFprop;
  s.has_bias = false;
  s.in_channels = d.out_channels;
  s.out_channels = d.in_channels;
  s.height = d.out_h();
  s.width = d.out_w();
  s.pad_top = span_h - d.pad_top;
  s.pad_bottom = span_h - d.pad_bottom;
  s.pad_left = span_w - d.pad_left;
  s.pad_right = span_w - d.pad_right;
  if (s.pad_top < 0 || s.pad_bottom < 0 || s.pad_left < 0 || s.pad_right < 0) return false;
  if (!ValidateShape(s).ok()) return false;
  *f = s;
  return true;
}

double TransposeFilterSeconds(const Shape& d) {
  return 8.0 * static_cast<double>(d.filter_elements()) / 2e12 + 2e-6;
}

absl::StatusOr<Proposal> Algorithm::Propose(const Shape& shape, const DeviceInfo& device) const {
  Shape forward;
  if (!Computes(shape.op) && DgradAsForward(shape, &forward)) {
    absl::StatusOr<Proposal> inner = Propose(forward, device);
    if (!inner.ok()) return inner.status();
    const double seconds = inner->estimated_seconds + TransposeFilterSeconds(shape);
    return MakeProposal(TransposedDgradProposal{forward, *std::move(inner)}, seconds);
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
  absl::StatusOr<std::unique_ptr<Runner>> forward = InitializeFor(t->forward, t->inner, device);
  if (!forward.ok()) return forward.status();
  return transposed_dgrad_factory(shape, *std::move(forward));
}

absl::Status Algorithm::MeetsContract(const Shape& shape) const {
  Shape forward;
  if (!Computes(shape.op) && DgradAsForward(shape, &forward)) return WithinContract(forward);
  return WithinContract(shape);
}

}  // namespace conv2d
