// Golden files: the fp64 reference output for a seeded problem.
//
// A file records the shape and the seed (inputs are regenerated from reference/random.h), the
// tolerance, and the reference values, either for every output element or at sampled flat
// output indices. Layout: text header lines, then "data\n", then little-endian binary:
//
//   conv2d-golden 1
//   shape <batch> <in_channels> <out_channels> <height> <width> <kernel_h> <kernel_w>
//   geometry <pad_top> <pad_bottom> <pad_left> <pad_right> <stride_h> <stride_w>
//            <dilation_h> <dilation_w> <groups> <bias 0|1>
//                                  (conv/shape.h; written only for a shape that is not basic or
//                                   has a bias, so that files of the basic form stay as they
//                                   were; absent means the defaults)
//   operation dgrad | wgrad        (conv/shape.h's Op; absent means the forward, fprop; the
//                                   values are then those the operation writes: dx, or dw
//                                   followed by db)
//   seed <seed>
//   inputs uniform | normal        (reference/random.h; absent means uniform)
//   class <name>                   (reference/input_classes.h's MakeInputs, which draws normal;
//                                   absent means the distribution as drawn, no class)
//   tolerance <atol> <rtol>
//   positions all | <count>        (sampled: <count> int64 flat output indices come first)
//   values f32 | f64               (full outputs are stored as fp32 to keep testdata small;
//   data                            rounding y64 to fp32 moves it by < 6e-8 relative)
#ifndef CONV2D_TOOLS_GOLDEN_H_
#define CONV2D_TOOLS_GOLDEN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "conv/shape.h"
#include "reference/input_classes.h"
#include "reference/random.h"

namespace conv2d {

struct Golden {
  Shape shape;
  uint64_t seed = 0;
  Distribution inputs = Distribution::kUniform;
  // kRandn: x and w as drawn from `inputs`; else MakeInputs(shape, seed, input_class).
  InputClass input_class = InputClass::kRandn;
  double atol = 1e-3;
  double rtol = 1e-3;
  std::vector<int64_t> positions;  // empty: every output element
  std::vector<double> values;      // y64 at positions, or the whole output
  bool store_f64 = false;
};

std::string GoldenFileName(const Golden& g);  // "<shape>_s<seed>[_<class>].golden"

// A golden problem's inputs, regenerated: those its operation reads (the others empty), as
// Golden says; the forward's bias (only when the shape has_bias) from tensor kBiasTensor of the
// seed, drawn from `inputs` (zero for the input classes, as the testbed's MakeClassProblem);
// dy from kGradTensor.
struct GoldenTensors {
  std::vector<float> x, w, bias, dy;
  const float* bias_or_null() const { return bias.empty() ? nullptr : bias.data(); }
  Tensors inputs() const;  // the reference's view
};
GoldenTensors GoldenInputs(const Golden& g);
absl::Status WriteGolden(const Golden& g, const std::string& path);
absl::StatusOr<Golden> ReadGolden(const std::string& path);

}  // namespace conv2d

#endif  // CONV2D_TOOLS_GOLDEN_H_
