// dgrad at stride 1 as a forward: dx = conv(dy, w') with w'[g*Cg + c, o, p, q] =
// w[g*Cog + o, c, Kh-1-p, Kw-1-q] (the filter flipped, its in- and out-channel roles swapped within
// each group) and the padding (K-1)*dilation - pad on each side, the dilation and groups as they
// are (shared/BACKWARD.md's identity). So every forward algorithm computes such a dgrad with its
// own kernels, after one pass over the filter (weight-sized: cheap next to the convolution):
// Algorithm::Propose and Initialize (algorithm.cc) offer it for any algorithm that does not compute
// dgrad itself, by the algorithm's own name. The forward's accuracy argument and determinism
// carry over: it is the same computation on other tensors.
#ifndef CONV2D_CONV_CORE_TRANSPOSED_DGRAD_H_
#define CONV2D_CONV_CORE_TRANSPOSED_DGRAD_H_

#include <memory>

#include "conv/arch/host_device.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

// The forward that equals `dgrad` (a dgrad shape), into *forward; false where there is none:
// a stride other than 1, or a padding larger than (K-1)*dilation on some side (the forward would
// need a negative padding).
bool DgradAsForward(const Shape& dgrad, Shape* forward);

// What Propose carries for such a dgrad: the forward and the algorithm's proposal for it.
struct TransposedDgradProposal {
  Shape forward;
  Proposal inner;
};

// The runner: the filter transform into the front of the workspace, then `forward` (a runner of
// the forward shape) on dy and the transformed filter, writing dx. Set by transposed_dgrad.cu
// when it is linked (every binary that links the plan); null otherwise.
using TransposedDgradFactory = std::unique_ptr<Runner> (*)(const Shape& dgrad,
                                                           std::unique_ptr<Runner> forward);
extern TransposedDgradFactory transposed_dgrad_factory;

// The flat index into w ([Cout, Cg, Kh, Kw]) of element e of w' ([Cin, Cog, Kh, Kw]): the one
// index map of the transform, for the kernel and the CPU test.
CONV2D_HOST_DEVICE_INLINE int64_t TransposedFilterSource(int64_t e, int64_t cg, int64_t og,
                                                         int64_t kh, int64_t kw) {
  const int64_t taps = kh * kw;
  const int64_t tap = e % taps;
  const int64_t o = (e / taps) % og;
  const int64_t gc = e / (taps * og);  // g*Cg + c
  const int64_t g = gc / cg, c = gc - g * cg;
  const int64_t p = tap / kw, q = tap - p * kw;
  return ((g * og + o) * cg + c) * taps + (kh - 1 - p) * kw + (kw - 1 - q);
}

// The modelled time of the filter transform (read and write the filter once, and a launch).
double TransposeFilterSeconds(const Shape& dgrad);

}  // namespace conv2d

#endif  // CONV2D_CONV_CORE_TRANSPOSED_DGRAD_H_
