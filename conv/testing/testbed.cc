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
  return FromHost(shape, RandomTensor(seed, kInputTensor, shape.input_elements(), dist),
                  RandomTensor(seed, kFilterTensor, shape.filter_elements(), dist),
                  RandomTensor(seed, kBiasTensor, shape.bias_elements(), dist));
}

absl::StatusOr<DeviceProblem> DeviceProblem::FromHost(const Shape& shape, std::vector<float> x,
                                                      std::vector<float> w,
                                                      std::vector<float> bias) {
  RETURN_IF_ERROR(ValidateShape(shape));
  if (x.size() != static_cast<size_t>(shape.input_elements()) ||
      w.size() != static_cast<size_t>(shape.filter_elements()) ||
      bias.size() != static_cast<size_t>(shape.bias_elements())) {
    return absl::InvalidArgumentError(
        "DeviceProblem::FromHost: x, w or bias is not of the shape's size");
  }
  DeviceProblem p;
  p.shape_ = shape;
  p.x_ = std::move(x);
  p.w_ = std::move(w);
  p.bias_ = std::move(bias);
  ASSIGN_OR_RETURN(p.dx_, DeviceBuffer::Allocate(p.x_.size() * sizeof(float), "cudaMalloc x"));
  ASSIGN_OR_RETURN(p.dw_, DeviceBuffer::Allocate(p.w_.size() * sizeof(float), "cudaMalloc w"));
  if (shape.has_bias) {
    ASSIGN_OR_RETURN(p.dbias_,
                     DeviceBuffer::Allocate(p.bias_.size() * sizeof(float), "cudaMalloc bias"));
    RETURN_IF_ERROR(CudaStatus(cudaMemcpy(p.dbias_.p, p.bias_.data(),
                                          p.bias_.size() * sizeof(float), cudaMemcpyHostToDevice),
                               "copy bias"));
  }
  ASSIGN_OR_RETURN(p.dy_,
                   DeviceBuffer::Allocate(shape.output_elements() * sizeof(float), "cudaMalloc y"));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(p.dx_.p, p.x_.data(), p.x_.size() * sizeof(float), cudaMemcpyHostToDevice),
      "copy x"));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(p.dw_.p, p.w_.data(), p.w_.size() * sizeof(float), cudaMemcpyHostToDevice),
      "copy w"));
  return p;
}

absl::Status DeviceProblem::PoisonOutput() const {
  // 0xFF bytes are a quiet NaN in fp32.
  RETURN_IF_ERROR(CudaStatus(cudaMemset(dy_.p, 0xFF, shape_.output_elements() * sizeof(float)),
                             "poison y"));
  return CudaStatus(cudaDeviceSynchronize(), "poison y");
}

absl::StatusOr<std::vector<float>> DeviceProblem::ReadOutput(
    const std::vector<int64_t>& positions) const {
  std::vector<float> all(shape_.output_elements());
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(all.data(), dy_.p, all.size() * sizeof(float), cudaMemcpyDeviceToHost), "read y"));
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
  ASSIGN_OR_RETURN(DeviceBuffer d, DeviceBuffer::Allocate(s.output_elements() * sizeof(double),
                                                          "cudaMalloc y64"));
  RETURN_IF_ERROR(ReferenceConvGpu(s, problem.x(), problem.w(), problem.bias(), d.as<double>(),
                                   nullptr));
  std::vector<double> y64(s.output_elements());
  RETURN_IF_ERROR(CudaStatus(cudaMemcpy(y64.data(), d.p, y64.size() * sizeof(double),
                                        cudaMemcpyDeviceToHost),
                             "ReferenceConvGpu"));
  return y64;
}

absl::StatusOr<ClassProblem> MakeClassProblem(const Shape& shape, uint64_t seed, InputClass c) {
  Inputs in = MakeInputs(shape, seed, c);
  // The classes are classes of x and w; a zero bias (when the shape has one) leaves each class's
  // output, and so the bar's scaling by the class's scale, as it is, while the bias pass still
  // runs on it (NaN + 0 stays NaN, inf + 0 inf).
  std::vector<float> bias(shape.bias_elements(), 0.0f);
  ASSIGN_OR_RETURN(DeviceProblem p, DeviceProblem::FromHost(shape, std::move(in.x), std::move(in.w),
                                                            std::move(bias)));
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
  if (s.output_elements() <= max_positions) {
    e.y64 = ReferenceConv(s, problem.host_x().data(), problem.host_w().data(), problem.host_bias());
  } else {
    e.positions = SamplePositions(s, max_positions, seed);
    e.y64 = ReferenceConvAt(s, problem.host_x().data(), problem.host_w().data(), e.positions,
                            problem.host_bias());
  }
  return e;
}

absl::StatusOr<Comparison> RunAndCompare(const Runner& runner, const DeviceProblem& problem,
                                         const Expected& expected, void* workspace,
                                         size_t workspace_bytes, cudaStream_t stream) {
  RETURN_IF_ERROR(problem.PoisonOutput());
  RunArgs a;
  a.x = problem.x();
  a.w = problem.w();
  a.bias = problem.bias();
  a.y = problem.y();
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
      status = plan.Run(p->x(), p->w(), p->bias(), p->y(), unaligned, plan.workspace_bytes(),
                        stream);
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
  RETURN_IF_ERROR(
      plan.Run(problem.x(), problem.w(), problem.bias(), problem.y(), ws.p,
               plan.workspace_bytes(), nullptr));
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
