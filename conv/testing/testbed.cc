#include "conv/testing/testbed.h"

#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "conv/conv.h"
#include "conv/core/bias.h"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"
#include "reference/random.h"
#include "reference/reference.h"
#include "reference/reference_gpu.h"

namespace conv2d {

std::string Comparison::ToString() const {
  return absl::StrFormat(
      "checked=%d failures=%d nonfinite=%d max_abs=%.3e rms=%.3e worst_ratio=%.4f", checked,
      failures, nonfinite, max_abs_error, rms_error, worst_ratio);
}

Comparison Compare(const std::vector<float>& y, const std::vector<double>& y64,
                   const std::vector<int64_t>& positions, double atol, double rtol) {
  Comparison c;
  double sum_sq = 0;
  for (size_t k = 0; k < y64.size(); ++k) {
    const double got = y[k], want = y64[k];
    const double err = std::abs(got - want);
    double ratio;
    if (!std::isfinite(want)) {
      // The non-finite contract: an output whose window holds a non-finite input is non-finite
      // (NaN or either infinity), every other one finite.
      ratio = std::isfinite(got) ? std::numeric_limits<double>::infinity() : 0.0;
      ++c.nonfinite;
    } else {
      ratio = std::isfinite(got) ? err / (atol + rtol * std::abs(want))
                                 : std::numeric_limits<double>::infinity();
    }
    ++c.checked;
    if (!(ratio <= 1.0)) {
      if (c.failures++ == 0) c.first_failure = positions.empty() ? k : positions[k];
    }
    if (std::isfinite(got) && std::isfinite(want)) {
      c.max_abs_error = std::max(c.max_abs_error, err);
      sum_sq += err * err;
    }
    c.worst_ratio = std::max(c.worst_ratio, ratio);
  }
  c.rms_error = c.checked ? std::sqrt(sum_sq / c.checked) : 0;
  return c;
}

absl::StatusOr<DeviceProblem> DeviceProblem::Create(const Shape& shape, uint64_t seed,
                                                    Distribution dist) {
  RETURN_IF_ERROR(ValidateShape(shape));
  const bool fprop = shape.op == Op::kFprop, dgrad = shape.op == Op::kDgrad;
  auto draw = [&](bool read, uint32_t tensor, int64_t n) {
    return read ? RandomTensor(seed, tensor, n, dist) : std::vector<float>();
  };
  return FromHost(shape, draw(!dgrad, kInputTensor, shape.input_elements()),
                  draw(fprop || dgrad, kFilterTensor, shape.filter_elements()),
                  draw(fprop, kBiasTensor, shape.bias_elements()),
                  draw(!fprop, kGradTensor, shape.output_elements()));
}

absl::StatusOr<DeviceProblem> DeviceProblem::FromHost(const Shape& shape, std::vector<float> x,
                                                      std::vector<float> w,
                                                      std::vector<float> bias,
                                                      std::vector<float> dy) {
  RETURN_IF_ERROR(ValidateShape(shape));
  const bool fprop = shape.op == Op::kFprop, dgrad = shape.op == Op::kDgrad;
  auto size_is = [](const std::vector<float>& v, bool read, int64_t n) {
    return v.size() == (read ? static_cast<size_t>(n) : 0);
  };
  if (!size_is(x, !dgrad, shape.input_elements()) ||
      !size_is(w, fprop || dgrad, shape.filter_elements()) ||
      !size_is(bias, fprop, shape.bias_elements()) ||
      !size_is(dy, !fprop, shape.output_elements())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceProblem::FromHost: the tensors given are not those ", OpName(shape.op),
        " reads, of ", shape.ToString(), "'s sizes"));
  }
  DeviceProblem p;
  p.shape_ = shape;
  p.x_ = std::move(x);
  p.w_ = std::move(w);
  p.bias_ = std::move(bias);
  p.dy_ = std::move(dy);
  // Each buffer is uploaded from its host tensor where the operation reads it.
  auto make = [](DeviceBuffer* d, int64_t n, const std::vector<float>& host,
                 const char* what) -> absl::Status {
    ASSIGN_OR_RETURN(*d, DeviceBuffer::Allocate(n * sizeof(float), what));
    if (host.empty()) return absl::OkStatus();
    return CudaStatus(cudaMemcpy(d->p, host.data(), host.size() * sizeof(float),
                                 cudaMemcpyHostToDevice),
                      what);
  };
  RETURN_IF_ERROR(make(&p.x_dev_, shape.input_elements(), p.x_, "x"));
  RETURN_IF_ERROR(make(&p.w_dev_, shape.filter_elements(), p.w_, "w"));
  RETURN_IF_ERROR(make(&p.bias_dev_, shape.bias_elements(), p.bias_, "bias"));
  RETURN_IF_ERROR(make(&p.y_dev_, shape.output_elements(), p.dy_, "y"));
  return p;
}

Tensors DeviceProblem::host_inputs() const {
  // bias_ is empty without a bias (Create and FromHost see to it): the views point into members.
  return HostInputs(x_, w_, bias_, dy_);
}

Tensors DeviceProblem::tensors() const {
  return BindRoles(shape_, x_dev_.as<float>(), w_dev_.as<float>(), bias_dev_.as<float>(),
                   y_dev_.as<float>());
}

namespace {
// The written buffers of a problem, in written_elements() order, with their element counts.
std::vector<std::pair<float*, int64_t>> Written(const Shape& s, const Tensors& t) {
  switch (s.op) {
    case Op::kDgrad:
      return {{t.dx, s.input_elements()}};
    case Op::kWgrad:
      return {{t.dw, s.filter_elements()}, {t.db, s.bias_elements()}};
    case Op::kFprop:
      break;
  }
  return {{t.y, s.output_elements()}};
}
}  // namespace

absl::Status DeviceProblem::PoisonOutput() const {
  // 0xFF bytes are a quiet NaN in fp32.
  for (const auto& [p, n] : Written(shape_, tensors())) {
    if (n > 0) RETURN_IF_ERROR(CudaStatus(cudaMemset(p, 0xFF, n * sizeof(float)), "poison"));
  }
  return CudaStatus(cudaDeviceSynchronize(), "poison");
}

absl::StatusOr<std::vector<float>> DeviceProblem::ReadOutput(
    const std::vector<int64_t>& positions) const {
  std::vector<float> all;
  all.reserve(shape_.written_elements());
  for (const auto& [p, n] : Written(shape_, tensors())) {
    const size_t at = all.size();
    all.resize(at + n);
    if (n > 0) {
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpy(all.data() + at, p, n * sizeof(float), cudaMemcpyDeviceToHost), "read"));
    }
  }
  if (positions.empty()) return all;
  std::vector<float> out;
  out.reserve(positions.size());
  for (int64_t p : positions) out.push_back(all[p]);
  return out;
}

Comparison CompareClass(const std::string& variant, InputClass c, std::vector<float> y,
                        std::vector<double> y64) {
  if (variant == "winograd" && c == InputClass::kNonFinite) {
    for (size_t i = 0; i < y64.size() && i < y.size(); ++i) {
      if (std::isfinite(y64[i]) && !std::isfinite(y[i])) y64[i] = y[i];
    }
  }
  const double scale = InputClassScale(c), scale2 = scale * scale;
  for (float& v : y) v = static_cast<float>(v / scale2);
  for (double& v : y64) v /= scale2;
  return Compare(y, y64, {}, kAbsTol, kRelTol);
}

absl::StatusOr<std::vector<double>> GpuReference(const DeviceProblem& problem) {
  const Shape& s = problem.shape();
  ASSIGN_OR_RETURN(DeviceBuffer d, DeviceBuffer::Allocate(s.written_elements() * sizeof(double),
                                                          "cudaMalloc y64"));
  RETURN_IF_ERROR(ReferenceGpu(s, problem.tensors(), d.as<double>(), nullptr));
  std::vector<double> y64(s.written_elements());
  RETURN_IF_ERROR(CudaStatus(cudaMemcpy(y64.data(), d.p, y64.size() * sizeof(double),
                                        cudaMemcpyDeviceToHost),
                             "ReferenceConvGpu"));
  return y64;
}

absl::StatusOr<ClassProblem> MakeClassProblem(const Shape& shape, uint64_t seed, InputClass c) {
  Inputs in = MakeInputs(shape, seed, c);
  // The classes are classes of the tensors the operation reads; a zero bias (when a forward
  // shape has one) leaves each class's output, and so the bar's scaling by the class's scale,
  // as it is, while the bias pass still runs on it (NaN + 0 stays NaN, inf + 0 inf).
  std::vector<float> bias(shape.op == Op::kFprop ? shape.bias_elements() : 0, 0.0f);
  ASSIGN_OR_RETURN(DeviceProblem p,
                   DeviceProblem::FromHost(shape, std::move(in.x), std::move(in.w),
                                           std::move(bias), std::move(in.dy)));
  ASSIGN_OR_RETURN(std::vector<double> y64, GpuReference(p));
  return ClassProblem{c, std::move(p), std::move(y64)};
}

absl::StatusOr<Comparison> CheckClass(const ClassProblem& p, const std::string& variant) {
  ASSIGN_OR_RETURN(std::vector<float> y, RunOnce(p.problem, variant, {}));
  return CompareClass(variant, p.input_class, std::move(y), p.y64);
}

Expected ReferenceFor(const DeviceProblem& problem, int64_t max_positions, uint64_t seed) {
  Expected e;
  const Shape& s = problem.shape();
  if (s.written_elements() <= max_positions) {
    e.y64 = Reference(s, problem.host_inputs());
  } else {
    e.positions = SamplePositions(s, max_positions, seed);
    e.y64 = ReferenceAt(s, problem.host_inputs(), e.positions);
  }
  return e;
}

absl::StatusOr<Comparison> RunAndCompare(const Runner& runner, const DeviceProblem& problem,
                                         const Expected& expected, void* workspace,
                                         size_t workspace_bytes, cudaStream_t stream) {
  RETURN_IF_ERROR(problem.PoisonOutput());
  RunArgs a;
  static_cast<Tensors&>(a) = problem.tensors();
  a.workspace = workspace;
  a.workspace_bytes = workspace_bytes;
  a.stream = stream;
  RETURN_IF_ERROR(RunWithBias(runner, problem.shape(), a));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "run"));
  ASSIGN_OR_RETURN(std::vector<float> y, problem.ReadOutput(expected.positions));
  return Compare(y, expected.y64, expected.positions, kAbsTol, kRelTol);
}

absl::Status CheckInputsChangeBetweenCalls(const std::string& algorithm, const Shape& s) {
  constexpr int64_t kPositions = 1 << 16;
  ASSIGN_OR_RETURN(Plan plan, Plan::Create(s, algorithm));
  ASSIGN_OR_RETURN(DeviceProblem a, DeviceProblem::Create(s, 101));
  ASSIGN_OR_RETURN(DeviceProblem b, DeviceProblem::Create(s, 202));
  const Expected ea = ReferenceFor(a, kPositions, 101), eb = ReferenceFor(b, kPositions, 202);
  ASSIGN_OR_RETURN(DeviceBuffer ws, DeviceBuffer::Allocate(plan.workspace_bytes() + 64));
  void* unaligned = static_cast<char*>(ws.p) + 4;
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&stream), "cudaStreamCreate"));
  absl::Status status = absl::OkStatus();
  int call = 0;
  for (const auto& [p, e] : {std::pair<const DeviceProblem*, const Expected*>{&a, &ea},
                             {&b, &eb}, {&a, &ea}}) {
    ++call;
    status = p->PoisonOutput();
    if (status.ok()) {
      status = plan.Run(p->tensors(), unaligned, plan.workspace_bytes(), stream);
    }
    if (status.ok()) status = CudaStatus(cudaStreamSynchronize(stream), "sync");
    if (!status.ok()) break;
    absl::StatusOr<std::vector<float>> y = p->ReadOutput(e->positions);
    if (!y.ok()) {
      status = y.status();
      break;
    }
    const Comparison c = Compare(*y, e->y64, e->positions, kAbsTol, kRelTol);
    if (!c.ok()) {
      status = absl::InternalError(
          absl::StrCat(algorithm, ", call ", call, " of 3: ", c.ToString()));
      break;
    }
  }
  cudaStreamDestroy(stream);
  return status;
}

absl::Status CheckEarlierPlanStillRuns(const std::string& algorithm, const Shape& first,
                                       const Shape& second) {
  constexpr int64_t kPositions = 1 << 16;
  ASSIGN_OR_RETURN(Plan plan, Plan::Create(first, algorithm));
  ASSIGN_OR_RETURN(Plan later, Plan::Create(second, algorithm));
  ASSIGN_OR_RETURN(DeviceProblem p, DeviceProblem::Create(first, 303));
  const Expected e = ReferenceFor(p, kPositions, 303);
  ASSIGN_OR_RETURN(std::vector<float> y, RunPlanOnce(plan, p, e.positions));
  const Comparison c = Compare(y, e.y64, e.positions, kAbsTol, kRelTol);
  if (!c.ok()) {
    return absl::InternalError(absl::StrCat(algorithm, " on ", first.ToString(), " after a plan for ",
                                            second.ToString(), ": ", c.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> RunOnce(const DeviceProblem& problem,
                                           const std::string& algorithm,
                                           const std::vector<int64_t>& positions) {
  ASSIGN_OR_RETURN(Plan plan, Plan::Create(problem.shape(), algorithm));
  return RunPlanOnce(plan, problem, positions);
}

absl::StatusOr<std::vector<float>> RunPlanOnce(const Plan& plan, const DeviceProblem& problem,
                                               const std::vector<int64_t>& positions) {
  ASSIGN_OR_RETURN(DeviceBuffer ws,
                   DeviceBuffer::Allocate(plan.workspace_bytes(), "cudaMalloc workspace"));
  RETURN_IF_ERROR(problem.PoisonOutput());
  RETURN_IF_ERROR(plan.Run(problem.tensors(), ws.p, plan.workspace_bytes(), nullptr));
  RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), plan.algorithm().c_str()));
  return problem.ReadOutput(positions);
}

absl::StatusOr<Comparison> CheckAgainstReference(const Shape& shape, const std::string& algorithm,
                                                 uint64_t seed, int64_t max_positions,
                                                 Distribution dist) {
  ASSIGN_OR_RETURN(DeviceProblem problem, DeviceProblem::Create(shape, seed, dist));
  const Expected e = ReferenceFor(problem, max_positions, seed);
  ASSIGN_OR_RETURN(std::vector<float> y, RunOnce(problem, algorithm, e.positions));
  return Compare(y, e.y64, e.positions, kAbsTol, kRelTol);
}

}  // namespace conv2d
