// The shared testbed: run a variant on the GPU on seeded random inputs with a poisoned output,
// and compare against the fp64 reference. Used by the variant tests, the regression tool and the
// benchmark's accuracy column.
#ifndef CONV2D_CONV_TESTING_TESTBED_H_
#define CONV2D_CONV_TESTING_TESTBED_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "conv/conv.h"
#include "conv/core/algorithm.h"
#include "conv/core/device_buffer.h"
#include "conv/shape.h"
#include "reference/input_classes.h"
#include "reference/random.h"

namespace conv2d {

struct Comparison {
  int64_t checked = 0;
  int64_t failures = 0;      // elements outside the tolerance, NaN and unwritten included
  int64_t first_failure = -1;  // flat output index of the first failure
  double max_abs_error = 0;
  double rms_error = 0;
  int64_t nonfinite = 0;     // non-finite expected values (the output must be non-finite too)
  double worst_ratio = 0;    // max |y - y64| / (atol + rtol*|y64|); inf where finiteness differs
  bool ok() const { return checked > 0 && failures == 0; }
  std::string ToString() const;
};

// Compares y (at `positions`, or every element if positions is empty) against y64: within the
// bar where y64 is finite, non-finite where it is not.
Comparison Compare(const std::vector<float>& y, const std::vector<double>& y64,
                   const std::vector<int64_t>& positions, double atol, double rtol);

// fp32 device buffers for one problem of any operation: four buffers shaped as x, w, the bias and
// y (conv/shape.h's BindRoles says which role each plays in shape.op: in dgrad the y-shaped one
// holds dy and the x-shaped one receives dx; in wgrad the y-shaped one holds dy, the w-shaped one
// receives dw and the bias-shaped one db), the tensors the operation reads filled from the seeded
// generator (x kInputTensor, w kFilterTensor, bias kBiasTensor, dy kGradTensor).
class DeviceProblem {
 public:
  static absl::StatusOr<DeviceProblem> Create(const Shape& shape, uint64_t seed,
                                              Distribution dist = Distribution::kUniform);
  // The same from given host tensors: those shape.op reads, each of its size (`bias`:
  // shape.bias_elements() values in the forward, none otherwise; the others empty).
  static absl::StatusOr<DeviceProblem> FromHost(const Shape& shape, std::vector<float> x,
                                                std::vector<float> w,
                                                std::vector<float> bias = {},
                                                std::vector<float> dy = {});
  DeviceProblem(DeviceProblem&&) noexcept = default;
  DeviceProblem& operator=(DeviceProblem&&) = delete;

  const Shape& shape() const { return shape_; }
  const std::vector<float>& host_x() const { return x_; }
  const std::vector<float>& host_w() const { return w_; }
  const std::vector<float>& host_dy() const { return dy_; }
  // Null without a bias.
  const float* host_bias() const { return shape_.has_bias ? bias_.data() : nullptr; }
  // The host tensors the operation reads, by role (the reference's inputs).
  Tensors host_inputs() const;
  // The operation's roles bound to the device buffers (Plan::Run's argument).
  Tensors tensors() const;
  // The device buffers by their forward names (in the forward: the operation's tensors).
  const float* x() const { return x_dev_.as<float>(); }
  const float* w() const { return w_dev_.as<float>(); }
  const float* bias() const { return shape_.has_bias ? bias_dev_.as<float>() : nullptr; }
  float* y() const { return y_dev_.as<float>(); }

  // Fills what the operation writes with NaN so that unwritten elements fail any comparison.
  absl::Status PoisonOutput() const;
  // What the operation wrote (Shape::written_elements' order: y; dx; dw then db) at `positions`
  // (every element if empty).
  absl::StatusOr<std::vector<float>> ReadOutput(const std::vector<int64_t>& positions) const;

 private:
  DeviceProblem() = default;
  Shape shape_;
  std::vector<float> x_, w_, bias_, dy_;
  DeviceBuffer x_dev_, w_dev_, bias_dev_, y_dev_;
};

// `variant`'s output on data of class c against y64 (element for element): both divided by
// scale^2 (the class's scale: huge and tiny data's error scales with the data while the bar's
// 1e-3 is absolute), and for winograd on non-finite data a non-finite output where fp64 is finite
// is allowed (its transforms mix a whole input tile into each output of the tile: conv.h's
// non-finite contract); every finite output stays within the bar. The contract test, the
// benchmark's classes column, tools/input_classes and the regression tool judge classes by it.
Comparison CompareClass(const std::string& variant, InputClass c, std::vector<float> y,
                        std::vector<double> y64);

// The fp64 reference of every written element, computed on the GPU (reference/reference_gpu.h).
absl::StatusOr<std::vector<double>> GpuReference(const DeviceProblem& problem);

// One input class of a shape on the device (MakeInputs(shape, seed, c)) with the GPU fp64
// reference of every output; CheckClass runs `variant` once on it and judges every output by
// CompareClass. The contract test, the benchmark's classes column and tools/input_classes.
struct ClassProblem {
  InputClass input_class;
  DeviceProblem problem;
  std::vector<double> y64;
};
absl::StatusOr<ClassProblem> MakeClassProblem(const Shape& shape, uint64_t seed, InputClass c);
absl::StatusOr<Comparison> CheckClass(const ClassProblem& p, const std::string& variant);

// The fp64 reference for a problem: every element when the output has at most `max_positions`
// elements, else `max_positions` positions sampled with `seed`.
struct Expected {
  std::vector<int64_t> positions;  // empty: every element
  std::vector<double> y64;
};
Expected ReferenceFor(const DeviceProblem& problem, int64_t max_positions, uint64_t seed);

// Runs a Runner directly (a variant with non-default options) once on `problem`, its output
// poisoned first, and compares with `expected`.
absl::StatusOr<Comparison> RunAndCompare(const Runner& runner, const DeviceProblem& problem,
                                         const Expected& expected, void* workspace,
                                         size_t workspace_bytes, cudaStream_t stream);

// One plan of `algorithm`, one workspace at an unaligned address, a non-default stream, run on
// problem A, then B, then A again (different seeds): each result must match its own reference,
// so nothing from an earlier call (a filter, an input) may be reused. OK when all three do.
// `shape` is one no variant special-cases (odd sizes, Kh != Kw); variants that take only some
// kernels pass one of theirs.
absl::Status CheckInputsChangeBetweenCalls(const std::string& algorithm,
                                           const Shape& shape = Shape{2, 5, 7, 37, 29, 6, 5});

// A plan of `algorithm` for `first`, then one for `second`, then the first run: it must still
// match its reference. What a plan sets per kernel when it is made (a shared-memory limit) must
// not break the plans made before it; `second` is a shape that sets less (a smaller tile).
absl::Status CheckEarlierPlanStillRuns(const std::string& algorithm, const Shape& first,
                                       const Shape& second);

// Runs `algorithm` once on `problem` (output poisoned first, workspace allocated and freed here)
// and returns the output at `positions` (every element if empty).
absl::StatusOr<std::vector<float>> RunOnce(const DeviceProblem& problem,
                                           const std::string& algorithm,
                                           const std::vector<int64_t>& positions);
// The same with a plan the caller made.
absl::StatusOr<std::vector<float>> RunPlanOnce(const Plan& plan, const DeviceProblem& problem,
                                               const std::vector<int64_t>& positions);

// Everything at once: inputs from `seed`, the reference at up to `max_positions` sampled positions
// (every element if the output is smaller), the variant's output compared against it.
absl::StatusOr<Comparison> CheckAgainstReference(const Shape& shape, const std::string& algorithm,
                                                 uint64_t seed, int64_t max_positions,
                                                 Distribution dist = Distribution::kUniform);

}  // namespace conv2d

#endif  // CONV2D_CONV_TESTING_TESTBED_H_
