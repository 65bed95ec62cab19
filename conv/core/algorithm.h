// The one lifecycle every variant follows, Triton-loaded kernels included, with one configuration
// carried from the choice to the runner (as CUTLASS carries its Arguments and cuDNN its engine
// config):
//
//   Plan::Create validates the shape once and reads the device's facts once (DeviceInfo);
//   Propose(shape, device)      -> can this algorithm compute it, with which configuration, and
//                                  how long its own cost model says it takes (no GPU work);
//   auto ranks the proposals by estimated_seconds * calibration();
//   Initialize(shape, proposal, device) -> a Runner built from that proposal's configuration
//                                  (never chosen again), with workspace_bytes() and Run(args).
//
// The operation (conv/shape.h's Op) is one more field of the shape: an algorithm says which it
// computes (Computes). A stride-1 dgrad is also the forward of dy with the filter flipped and its
// channel roles swapped (conv/core/transposed_dgrad.h), so every forward algorithm takes such a
// dgrad through Propose and Initialize below, by name, with its own kernels; its accuracy is
// judged on the forward it runs (MeetsContract).
//
// The registry, the plan, the tests, the regression tool and the benchmark all loop over it.
// Free of CUDA headers so that plain C++ can include it.
#ifndef CONV2D_CONV_CORE_ALGORITHM_H_
#define CONV2D_CONV_CORE_ALGORITHM_H_

#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "conv/core/device_info.h"
#include "conv/shape.h"

typedef struct CUstream_st* cudaStream_t;  // the same declaration as cuda_runtime.h

namespace conv2d {

// Device pointers and the stream for one call: the operation's tensors by role (conv/shape.h's
// Tensors; the roles the shape's op does not use are null). Plan::Run has checked them (the op's
// roles given and only those, workspace large enough, no written buffer overlapping another)
// before a Runner sees them.
struct RunArgs : Tensors {
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

// One algorithm prepared for one shape: owns whatever it built once (FFT plans, handles).
// Run may be called many times, from one thread at a time (Plan::Run holds a lock around it).
class Runner {
 public:
  virtual ~Runner() = default;
  virtual size_t workspace_bytes() const = 0;
  // Enqueues the convolution on args.stream. Nothing is cached across calls by pointer: the filter
  // and the input may change between calls.
  virtual absl::Status Run(const RunArgs& args) const = 0;
  // Whether Run handles the bias itself: adds args.bias in its epilogue (fprop) or writes
  // args.db (wgrad). Otherwise Plan::Run does it after Run (conv/core/bias.h): one more pass
  // over y, or db as the fixed-order sum of dy.
  virtual bool adds_bias() const { return false; }
  // Whether Run enqueues only kernels, each through LaunchPdl (conv/arch/pdl.cuh): Plan::Run
  // then records them and enqueues them as one graph launch (conv/arch/launch_graph.h). False
  // for a runner that calls a library (cuBLAS, cuFFT) or launches any other way.
  virtual bool records_launches() const { return false; }
};

// What an algorithm proposes for one shape on one device: its own configuration (tile sizes,
// kernel choice, workspace layout), opaque to everyone else, and its modelled time.
struct Proposal {
  // The algorithm's cost model on the device it was proposed for, before calibration; infinity
  // for reference-only algorithms (oracles), which auto never picks.
  double estimated_seconds = 0;
  // Made by MakeProposal, read by ConfigOf: only the algorithm that made it reads it.
  std::shared_ptr<const void> config;
  const void* config_type = nullptr;
};

template <typename Config>
const void* ConfigTypeTag() {
  static const char tag = 0;
  return &tag;
}

template <typename Config>
Proposal MakeProposal(Config config, double estimated_seconds) {
  Proposal p;
  p.estimated_seconds = estimated_seconds;
  p.config = std::make_shared<const Config>(std::move(config));
  p.config_type = ConfigTypeTag<Config>();
  return p;
}

// The configuration inside `p`, or nullptr when `p` carries another type (a proposal handed to
// an algorithm that did not make it).
template <typename Config>
const Config* ConfigOf(const Proposal& p) {
  if (p.config_type != ConfigTypeTag<Config>()) return nullptr;
  return static_cast<const Config*>(p.config.get());
}

// The parts of the geometry beyond the basic form (Shape::basic) an algorithm computes. An
// algorithm is never proposed a shape that needs a part it does not declare (Algorithm::Propose
// says Unimplemented), so that a kernel written for the basic form cannot be handed a padded,
// strided, dilated or grouped problem and silently compute another one.
struct Geometry {
  bool padding = false;
  bool stride = false;
  bool dilation = false;
  bool groups = false;
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // A stable name: lower case, [a-z0-9_], used by Plan::Create, tools and golden results.
  virtual std::string name() const = 0;
  // Measured time over estimated time on the H200, the geometric mean over the benchmark suites
  // (fitted by tools/fit_auto.py). auto ranks by estimated_seconds * calibration(). Each variant
  // states its own, next to its cost model: a variant without one does not compile.
  virtual double calibration() const = 0;
  // What this algorithm computes beyond the basic form. Default: the basic form only.
  virtual Geometry geometry() const { return Geometry{}; }
  // Which operations (conv/shape.h's Op) it computes. Default: the forward only. An algorithm is
  // never proposed a shape of another operation (Propose says Unimplemented), as for geometry().
  virtual bool Computes(Op op) const { return op == Op::kFprop; }
  // For a dgrad it does not compute itself (transposed_dgrad.h): which form Propose offers. By
  // the model (the phases, and beside them the fold for the narrow stems), or one of them
  // forced: the lab's measurement variants, never ranked by auto.
  enum class DgradForm { kByModel, kPhases, kFold };
  virtual DgradForm dgrad_form() const { return DgradForm::kByModel; }
  // OK with a proposal if this algorithm computes `shape` (already validated by ValidateShape)
  // within the accuracy contract on `device`; otherwise why not (Unimplemented, OutOfRange,
  // ResourceExhausted, or FailedPrecondition when this device cannot run it). Must not touch the
  // GPU: auto ranks without one against DeviceInfo::ModelDevice(). Unimplemented, without asking
  // the algorithm, for a shape outside its geometry() or Computes(). A stride-1 dgrad that the
  // algorithm does not compute itself is proposed as the forward it equals (transposed_dgrad.h).
  absl::StatusOr<Proposal> Propose(const Shape& shape, const DeviceInfo& device) const;
  // Builds what the algorithm needs from a proposal it made for `shape` on `device` (the current
  // device). Called once per plan.
  absl::StatusOr<std::unique_ptr<Runner>> Initialize(const Shape& shape, const Proposal& proposal,
                                                     const DeviceInfo& device) const;
  // WithinContract on what the algorithm runs for `shape`: the forward of a transposed dgrad.
  absl::Status MeetsContract(const Shape& shape) const;
  // OK if this algorithm computes `shape`'s operation and `shape` needs no part of the geometry
  // it lacks, else Unimplemented naming what it lacks.
  absl::Status CheckGeometry(const Shape& shape) const {
    if (!Computes(shape.op)) {
      return absl::UnimplementedError(
          absl::StrCat(name(), " does not compute ", OpName(shape.op)));
    }
    const Geometry g = geometry();
    const char* missing = shape.padded() && !g.padding     ? "padding"
                          : shape.strided() && !g.stride   ? "stride"
                          : shape.dilated() && !g.dilation ? "dilation"
                          : shape.grouped() && !g.groups   ? "groups"
                                                           : nullptr;
    if (missing == nullptr) return absl::OkStatus();
    return absl::UnimplementedError(absl::StrCat(name(), " does not implement ", missing));
  }
  // OK if this algorithm meets the accuracy contract (conv.h) on `shape` for every input, not
  // only randn; else why not. auto picks among the algorithms within it whenever any takes the
  // shape (conv.h says what happens otherwise). Default: within.
  virtual absl::Status WithinContract(const Shape& shape) const {
    (void)shape;
    return absl::OkStatus();
  }

  // Shorthands over Propose for the model device, for tests and tools.
  absl::Status CanImplement(const Shape& shape) const {
    return Propose(shape, DeviceInfo::ModelDevice()).status();
  }
  double EstimateSeconds(const Shape& shape) const {
    absl::StatusOr<Proposal> p = Propose(shape, DeviceInfo::ModelDevice());
    return p.ok() ? p->estimated_seconds : std::numeric_limits<double>::infinity();
  }

 protected:
  // Propose for a shape within geometry() and Computes().
  virtual absl::StatusOr<Proposal> ProposeFor(const Shape& shape,
                                              const DeviceInfo& device) const = 0;
  // Initialize from a proposal this algorithm's ProposeFor made for `shape`.
  virtual absl::StatusOr<std::unique_ptr<Runner>> InitializeFor(const Shape& shape,
                                                                const Proposal& proposal,
                                                                const DeviceInfo& device) const = 0;
};

// Direct summation in fp32 (the implicit GEMMs, direct_tiled, triton_igemm, direct): its error
// is that of fp32 summation, up to Cin*Kh*Kw * 2^-24 * sum |x||w| per output, which meets the
// bar on every input class only for reductions up to this length (measured on the H200 over
// every output: large means with zero-sum filters at 4608 terms, worst 0.41 of the bar; at
// 16384, 2.4; docs/PERF.md, "Accuracy beyond randn").
// For the backward the same holds of the terms each written element sums (Shape::terms).
constexpr int64_t kMaxContractReduction = 4608;
inline absl::Status DirectSummationWithinContract(const Shape& shape) {
  const int64_t n = shape.terms();
  if (n <= kMaxContractReduction) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat("fp32 direct summation of ", n, " terms (",
                                            OpName(shape.op), ") ",
                                            "exceeds the bar on large-mean data beyond ",
                                            kMaxContractReduction));
}

// How the registry makes an algorithm: one factory per algorithm (conv/algorithms/builtin.cc).
using AlgorithmFactory = std::unique_ptr<Algorithm> (*)();

// For an algorithm whose proposal carries a `Config`: Propose and Initialize in its own types.
template <typename Config>
class AlgorithmWithConfig : public Algorithm {
 protected:
  absl::StatusOr<std::unique_ptr<Runner>> InitializeFor(const Shape& shape,
                                                        const Proposal& proposal,
                                                        const DeviceInfo& device) const final {
    const Config* config = ConfigOf<Config>(proposal);
    if (config == nullptr) return ForeignProposal(name());
    return Build(shape, *config, device);
  }

  absl::StatusOr<Proposal> ProposeFor(const Shape& shape, const DeviceInfo& device) const final {
    double seconds = 0;
    absl::StatusOr<Config> config = Choose(shape, device, &seconds);
    if (!config.ok()) return config.status();
    return MakeProposal(*std::move(config), seconds);
  }
  // The configuration for `shape` on `device` and its modelled time in *seconds.
  virtual absl::StatusOr<Config> Choose(const Shape& shape, const DeviceInfo& device,
                                        double* seconds) const = 0;
  virtual absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& shape, const Config& config,
                                                        const DeviceInfo& device) const = 0;

 private:
  static absl::Status ForeignProposal(const std::string& name) {
    return absl::InvalidArgumentError(name + ": the proposal was made by another algorithm");
  }
};

}  // namespace conv2d

#endif  // CONV2D_CONV_CORE_ALGORITHM_H_
