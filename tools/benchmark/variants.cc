#include "tools/benchmark/variants.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "conv/conv.h"
#include "conv/core/algorithm.h"
#include "conv/core/registry.h"
#include "conv/core/status_macros.h"
#include "tools/benchmark/results.h"
#include "tools/cudnn_conv.h"

namespace conv2d {
namespace bench {
namespace {

Verdict NotApplicable(absl::Status why) { return {Verdict::kNotApplicable, std::move(why)}; }

// `conv` (a Plan or a CudnnConv: the same Run signature), a workspace of its size and the call
// that runs it on `problem`.
template <typename Conv>
absl::StatusOr<Prepared> Bind(std::shared_ptr<const Conv> conv, std::string label,
                              const DeviceProblem& problem) {
  Prepared p;
  p.label = std::move(label);
  p.workspace_bytes = conv->workspace_bytes();
  ASSIGN_OR_RETURN(DeviceBuffer workspace,
                   DeviceBuffer::Allocate(p.workspace_bytes, "cudaMalloc workspace"));
  p.workspace = std::make_shared<DeviceBuffer>(std::move(workspace));
  const DeviceProblem* prob = &problem;
  const Conv* c = conv.get();
  void* ws = p.workspace->p;
  const size_t ws_bytes = p.workspace_bytes;
  p.call = [=](cudaStream_t s) {
    return c->Run(prob->tensors(), ws, ws_bytes, s);
  };
  p.conv = std::move(conv);
  return p;
}

class CudnnBaseline : public Variant {
 public:
  CudnnBaseline() : Variant(kCudnn) {}
  // Asymmetric padding: not applicable to cuDNN's legacy API, said as such, not an error.
  Verdict Consider(const Shape& shape, bool) const override {
    if (absl::Status can = CudnnConv::Supports(shape); !can.ok()) return NotApplicable(can);
    return {};
  }
  absl::StatusOr<Prepared> Prepare(const Shape& shape,
                                   const DeviceProblem& problem) const override {
    ASSIGN_OR_RETURN(std::unique_ptr<CudnnConv> c, CudnnConv::Create(shape));
    std::string label = absl::StrCat("cudnn ", CudnnVersion(), " ", c->algorithm(), " fp32 FMA");
    return Bind<CudnnConv>(std::move(c), std::move(label), problem);
  }
  bool is_baseline() const override { return true; }
  bool runs_input_classes() const override { return false; }
};

// Plan::Create(shape, name()): auto or one algorithm.
class PlanVariant : public Variant {
 public:
  using Variant::Variant;
  absl::StatusOr<Prepared> Prepare(const Shape& shape,
                                   const DeviceProblem& problem) const override {
    ASSIGN_OR_RETURN(Plan plan, Plan::Create(shape, name()));
    auto owned = std::make_shared<const Plan>(std::move(plan));
    std::string label = Label(*owned);
    return Bind<Plan>(std::move(owned), std::move(label), problem);
  }

 private:
  virtual std::string Label(const Plan& plan) const { return name(); }
};

class AlgorithmVariant : public PlanVariant {
 public:
  explicit AlgorithmVariant(const Algorithm* a) : PlanVariant(a->name()), a_(a) {}
  Verdict Consider(const Shape& shape, bool time_oracles) const override {
    // A part of the geometry the algorithm does not compute: n/a, said before the oracle test
    // below, which an algorithm that refuses the shape passes too (its estimate is infinite).
    // Basic shapes pass this check, so the kernelbot and cnn suites' rows are as they were. A
    // dgrad the algorithm does not compute itself is its transposed forward's (Propose's
    // transposed_dgrad), which CanImplement below judges.
    const bool transposed = shape.op == Op::kDgrad && !a_->Computes(Op::kDgrad);
    if (absl::Status geometry = a_->CheckGeometry(shape); !transposed && !geometry.ok()) {
      return NotApplicable(geometry);
    }
    // Oracles say so by an infinite estimate; they take seconds per call on large cases.
    if (!std::isfinite(a_->EstimateSeconds(shape)) && !time_oracles) return {Verdict::kSkip};
    if (absl::Status can = a_->CanImplement(shape); !can.ok()) return NotApplicable(can);
    return {};
  }
  double EstimateMs(const Shape& shape) const override { return a_->EstimateSeconds(shape) * 1e3; }

 private:
  const Algorithm* const a_;
};

class AutoVariant : public PlanVariant {
 public:
  AutoVariant() : PlanVariant(kAuto) {}
  // Layers no algorithm takes yet (a geometry part no kernel computes) are n/a for auto, listed
  // rather than timed; any other reason to fail is left to Plan::Create to report.
  Verdict Consider(const Shape& shape, bool) const override {
    absl::StatusOr<std::string> choice = ChooseAlgorithm(shape);
    if (!choice.ok() && choice.status().code() == absl::StatusCode::kUnimplemented) {
      return NotApplicable(choice.status());
    }
    return {};
  }

 private:
  std::string Label(const Plan& plan) const override {
    return absl::StrCat("auto -> ", plan.algorithm());
  }
};

}  // namespace

double Variant::EstimateMs(const Shape&) const { return kNaN; }

std::vector<std::unique_ptr<const Variant>> AllVariants() {
  std::vector<std::unique_ptr<const Variant>> all;
  all.push_back(MakeBaseline());
  for (const Algorithm* a : Registry::Global().All()) {
    all.push_back(std::make_unique<AlgorithmVariant>(a));
  }
  all.push_back(std::make_unique<AutoVariant>());
  return all;
}

std::vector<std::string> KnownVariantNames() {
  std::vector<std::string> known = {kCudnn, kAuto};
  for (const std::string& n : Registry::Global().Names()) known.push_back(n);
  return known;
}

std::unique_ptr<const Variant> MakeBaseline() { return std::make_unique<CudnnBaseline>(); }

std::string BaselineVersion() { return CudnnVersion(); }

}  // namespace bench
}  // namespace conv2d
