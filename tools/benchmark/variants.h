// What the benchmark times on a case: the cuDNN baseline (tools/cudnn_conv.h), each registered
// algorithm, and auto, behind one interface, so that the runner knows none of them by name.
#ifndef CONV2D_TOOLS_BENCHMARK_VARIANTS_H_
#define CONV2D_TOOLS_BENCHMARK_VARIANTS_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "conv/core/device_buffer.h"
#include "conv/core/timing.h"
#include "conv/shape.h"
#include "conv/testing/testbed.h"

namespace conv2d {
namespace bench {

// One variant ready to run on a case: a call that enqueues the convolution on a stream.
struct Prepared {
  std::string label;  // what runs: auto's choice, cuDNN's version and algorithm
  size_t workspace_bytes = 0;
  TimedCall call;
  // Owners of what `call` refers to: the plan or cuDNN handle, and the workspace.
  std::shared_ptr<const void> conv;
  std::shared_ptr<DeviceBuffer> workspace;
};

// What a variant does with a case.
struct Verdict {
  enum Kind {
    kTime,
    kNotApplicable,  // it cannot take the shape: a row "n/a: why", which is no error
    kSkip,           // an oracle, seconds a call: neither timed nor listed
  };
  Kind kind = kTime;
  absl::Status why;  // kNotApplicable's reason
};

class Variant {
 public:
  virtual ~Variant() = default;
  const std::string& name() const { return name_; }

  // Needs no device. `time_oracles`: --include_oracle, or the variant named in --variants.
  virtual Verdict Consider(const Shape& shape, bool time_oracles) const = 0;
  // Its plan (or handle) for `shape` and a workspace, bound to `problem`'s buffers, which must
  // outlive the call.
  virtual absl::StatusOr<Prepared> Prepare(const Shape& shape,
                                           const DeviceProblem& problem) const = 0;
  // The algorithm's own model's time before calibration; NaN where there is none.
  virtual double EstimateMs(const Shape& shape) const;
  // The baseline: every other variant's speedup is its time over this one's.
  virtual bool is_baseline() const { return false; }
  // Whether the testbed's input classes (CheckClass, which runs a Plan by name) can run it.
  virtual bool runs_input_classes() const { return true; }

 protected:
  explicit Variant(std::string name) : name_(std::move(name)) {}

 private:
  const std::string name_;
};

// Every variant in the order a case runs them: the baseline first, so that every speedup is
// against its time in the same process, then the registered algorithms, then auto.
std::vector<std::unique_ptr<const Variant>> AllVariants();

// The names --variants takes, in the order its error message lists them.
std::vector<std::string> KnownVariantNames();

// The baseline alone: cuDNN fp32, its fastest algorithm by its own search.
std::unique_ptr<const Variant> MakeBaseline();
// The baseline library's version as loaded, e.g. "9.14.0".
std::string BaselineVersion();

}  // namespace bench
}  // namespace conv2d

#endif  // CONV2D_TOOLS_BENCHMARK_VARIANTS_H_
