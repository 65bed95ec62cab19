// The CPU reference: Eigen, accumulating in double. Truth for every variant.
#ifndef CONV2D_REFERENCE_REFERENCE_H_
#define CONV2D_REFERENCE_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "conv/shape.h"

namespace conv2d {

// The whole output, [batch, out_channels, out_h, out_w], in double, for every part of the
// geometry (conv/shape.h). `bias` ([out_channels]) is read only when the shape has_bias, and must
// then be given.
std::vector<double> ReferenceConv(const Shape& shape, const float* x, const float* w,
                                  const float* bias = nullptr);

// The output at the given flat output indices (into [batch, out_channels, out_h, out_w]), for
// shapes too large to compute whole.
std::vector<double> ReferenceConvAt(const Shape& shape, const float* x, const float* w,
                                    const std::vector<int64_t>& positions,
                                    const float* bias = nullptr);

// The backward and the forward alike: every element that `shape.op` writes (Shape's
// written_elements(): y; dx; dw followed by db when has_bias), in double, from the roles of `in`
// that the operation reads (fprop x, w, bias; dgrad dy, w; wgrad x, dy). Sums in double in a
// fixed order: products of floats are exact in double.
std::vector<double> Reference(const Shape& shape, const Tensors& in);
// The roles of host tensors as Reference reads them: each non-empty vector's data, null for an
// empty one (the roles the operation does not read).
Tensors HostInputs(const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>& bias, const std::vector<float>& dy);
// The same at the given flat indices into the written elements.
std::vector<double> ReferenceAt(const Shape& shape, const Tensors& in,
                                const std::vector<int64_t>& positions);

// `count` distinct flat indices into the written elements (shape.op's), sorted, drawn with
// `seed`; always includes the first and the last element and the corners of each plane of the
// written tensor (each output channel's, or each filter's), and every db, so that edge handling
// is checked. Returns every index when count >= the number of written elements.
std::vector<int64_t> SamplePositions(const Shape& shape, int64_t count, uint64_t seed);

// The accuracy contract: |y - y64| <= kAbsTol + kRelTol * |y64|.
constexpr double kAbsTol = 1e-3;
constexpr double kRelTol = 1e-3;

}  // namespace conv2d

#endif  // CONV2D_REFERENCE_REFERENCE_H_
