#include "tools/benchmark/runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"
#include "reference/input_classes.h"
#include "reference/reference.h"

namespace conv2d {
namespace bench {
namespace {

Comparison Merge(const Comparison& a, const Comparison& b) {
  Comparison m = a;
  m.checked += b.checked;
  m.failures += b.failures;
  if (m.first_failure < 0) m.first_failure = b.first_failure;
  m.max_abs_error = std::max(a.max_abs_error, b.max_abs_error);
  m.rms_error = std::max(a.rms_error, b.rms_error);
  m.worst_ratio = std::max(a.worst_ratio, b.worst_ratio);
  return m;
}

}  // namespace

Runner::Runner(std::vector<Case> cases, Options options)
    : options_(std::move(options)), variants_(AllVariants()), states_(cases.size()) {
  results_.cases = std::move(cases);
}

Runner::~Runner() {
  problem_.reset();
  timer_.reset();
  if (stream_) cudaStreamDestroy(stream_);
}

absl::Status Runner::Init() {
  // A blocking stream: it orders after the testbed's synchronous copies and memsets.
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&stream_), "cudaStreamCreate"));
  ASSIGN_OR_RETURN(KernelBotTimer timer, KernelBotTimer::Create());
  timer_.emplace(std::move(timer));
  return absl::OkStatus();
}

absl::Status Runner::Register() {
  const std::vector<std::string>& asked = options_.variants;
  const std::vector<std::string> known = KnownVariantNames();
  for (const std::string& v : asked) {
    if (std::find(known.begin(), known.end(), v) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--variants: unknown variant '", v,
                                                     "'; known: ", absl::StrJoin(known, ", ")));
    }
  }
  auto named = [&](const std::string& v) {
    return std::find(asked.begin(), asked.end(), v) != asked.end();
  };
  std::vector<std::string> skipped_oracles;
  for (int ci = 0; ci < static_cast<int>(results_.cases.size()); ++ci) {
    const Shape& shape = results_.cases[ci].shape;
    for (const std::unique_ptr<const Variant>& v : variants_) {
      if (!asked.empty() && !named(v->name())) continue;
      const Verdict verdict = v->Consider(shape, options_.include_oracle || named(v->name()));
      switch (verdict.kind) {
        case Verdict::kTime:
          Add(*v, ci);
          break;
        case Verdict::kNotApplicable:
          RecordNotApplicable(v->name(), ci, verdict.why);
          break;
        case Verdict::kSkip:
          if (std::find(skipped_oracles.begin(), skipped_oracles.end(), v->name()) ==
              skipped_oracles.end()) {
            skipped_oracles.push_back(v->name());
          }
          break;
      }
    }
  }
  if (!skipped_oracles.empty()) {
    std::fprintf(stderr, "not timing oracle(s) %s (add --include_oracle)\n",
                 absl::StrJoin(skipped_oracles, ", ").c_str());
  }
  return absl::OkStatus();
}

void Runner::Add(const Variant& v, int ci) {
  std::vector<std::string>& order = results_.variant_order;
  if (std::find(order.begin(), order.end(), v.name()) == order.end()) order.push_back(v.name());
  const std::string name =
      absl::StrCat(v.name(), "/", ci + 1, ":", results_.cases[ci].shape.ToString());
  const Variant* variant = &v;
  benchmark::RegisterBenchmark(name.c_str(),
                               [this, variant, ci](benchmark::State& state) {
                                 Bench(state, *variant, ci);
                               })
      ->UseManualTime()
      ->Iterations(options_.calls)
      ->Unit(benchmark::kMillisecond);
}

// `variant` cannot take case `ci`, for the reason `why`: a result with no time, "n/a: why".
void Runner::RecordNotApplicable(const std::string& variant, int ci, const absl::Status& why) {
  Result r;
  r.variant = variant;
  r.case_index = ci;
  r.error = absl::StrCat("n/a: ", why.message());
  Record(r);
}

// The input classes of case `ci` (built when the case changes; one case's at a time).
absl::Status Runner::PrepareClasses(int ci) {
  if (classes_case_ == ci) return absl::OkStatus();
  classes_.clear();
  classes_case_ = -1;
  const Case& c = results_.cases[ci];
  const absl::Time t0 = absl::Now();
  for (InputClass ic : AllInputClasses()) {
    if (ic == InputClass::kRandn) continue;  // the main check's
    ASSIGN_OR_RETURN(ClassProblem p, MakeClassProblem(c.shape, c.seed, ic));
    classes_.push_back(std::move(p));
  }
  classes_case_ = ci;
  std::fprintf(stderr, "[case %d/%zu] input classes and their GPU fp64 references (%.1f s)\n",
               ci + 1, results_.cases.size(), absl::ToDoubleSeconds(absl::Now() - t0));
  return absl::OkStatus();
}

// Every class of case `ci` through `variant`, every output compared at the class's scale.
absl::Status Runner::CheckClasses(const std::string& variant, int ci, Result* r) {
  RETURN_IF_ERROR(PrepareClasses(ci));
  r->classes_worst = 0;
  for (const ClassProblem& cp : classes_) {
    ASSIGN_OR_RETURN(const Comparison cmp, CheckClass(cp, variant));
    // A failure whose ratio does not show it (an unwritten output) counts as inf.
    const double worst = !cmp.ok() && !(cmp.worst_ratio > 1.0) ? INFINITY : cmp.worst_ratio;
    r->per_class.emplace_back(InputClassName(cp.input_class), worst);
    if (!(worst <= r->classes_worst)) r->classes_worst = worst;
  }
  return absl::OkStatus();
}

// Inputs on the device for case `ci` (one case's buffers at a time) and its fp64 reference.
absl::Status Runner::PrepareCase(int ci) {
  const Case& c = results_.cases[ci];
  if (problem_case_ != ci) {
    problem_.reset();
    problem_case_ = -1;
    ASSIGN_OR_RETURN(DeviceProblem p, DeviceProblem::Create(c.shape, c.seed, options_.inputs));
    problem_ = std::make_unique<DeviceProblem>(std::move(p));
    problem_case_ = ci;
  }
  CaseState& state = states_[ci];
  if (!state.expected.has_value()) {
    const absl::Time t0 = absl::Now();
    state.expected = ReferenceFor(*problem_, options_.positions, c.seed);
    std::fprintf(stderr, "[case %d/%zu] %s  %.2f GFLOP  seed %llu  fp64 reference at %zu "
                 "positions (%.1f s)\n",
                 ci + 1, results_.cases.size(), c.shape.ToString().c_str(),
                 c.shape.flops() * 1e-9, static_cast<unsigned long long>(c.seed),
                 state.expected->y64.size(), absl::ToDoubleSeconds(absl::Now() - t0));
  }
  return absl::OkStatus();
}

// One run on a NaN-poisoned output, compared with the fp64 reference.
absl::StatusOr<Comparison> Runner::Check(const Prepared& p, const Expected& expected) {
  RETURN_IF_ERROR(problem_->PoisonOutput());
  RETURN_IF_ERROR(p.call(stream_));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "checked run"));
  ASSIGN_OR_RETURN(std::vector<float> y, problem_->ReadOutput(expected.positions));
  return Compare(y, expected.y64, expected.positions, kAbsTol, kRelTol);
}

absl::Status Runner::Measure(benchmark::State& state, const Variant& v, int ci, Result* r) {
  RETURN_IF_ERROR(PrepareCase(ci));  // the fp64 reference: CPU time, not counted as busy
  const Shape& shape = results_.cases[ci].shape;
  CaseState& c = states_[ci];
  // A variant timed right after a heavy one ran at lowered clocks (docs/PERF.md, round 52):
  // every variant starts from a GPU that has idled as long as the previous one kept it busy
  // (its wall time: plan, checks, flushes and calls), up to --cooldown seconds.
  const double rest_s = std::min(options_.cooldown_s, busy_s_);
  if (rest_s > 0) absl::SleepFor(absl::Seconds(rest_s));
  const absl::Time start = absl::Now();
  absl::Cleanup record_busy = [this, start] { busy_s_ = absl::ToDoubleSeconds(absl::Now() - start); };
  ASSIGN_OR_RETURN(Prepared p, v.Prepare(shape, *problem_));
  r->label = p.label;
  r->workspace_mb = p.workspace_bytes / 1048576.0;
  r->estimate_ms = v.EstimateMs(shape);
  state.SetLabel(p.label);

  // Checked cold (first call of a fresh plan) and again after the timed calls.
  ASSIGN_OR_RETURN(Comparison first, Check(p, *c.expected));
  ASSIGN_OR_RETURN(CallTimes times,
                   timer_->Time(p.call, stream_, options_.calls, options_.warmup));
  size_t i = 0;  // Google Benchmark runs exactly --calls iterations (Iterations above)
  for (auto _ : state) state.SetIterationTime(times.ms[i++ % times.ms.size()] * 1e-3);
  ASSIGN_OR_RETURN(Comparison last, Check(p, *c.expected));
  r->cmp = Merge(first, last);
  r->pass = r->cmp.ok();
  r->ms = times.mean_ms();
  r->tflops = shape.flops() / (r->ms * 1e-3) * 1e-12;
  if (v.is_baseline()) c.baseline_ms = r->ms;
  r->speedup = c.baseline_ms / r->ms;  // NaN when cuDNN was filtered out or failed
  if (options_.classes && v.runs_input_classes()) {
    RETURN_IF_ERROR(CheckClasses(v.name(), ci, r));
  }
  return absl::OkStatus();
}

void Runner::Bench(benchmark::State& state, const Variant& v, int ci) {
  Result r;
  r.variant = v.name();
  r.case_index = ci;
  absl::Status st = Measure(state, v, ci, &r);
  if (!st.ok()) {
    r.error = st.ToString();
    state.SkipWithError(r.error.c_str());
    std::fprintf(stderr, "[case %d/%zu] %s: %s\n", ci + 1, results_.cases.size(),
                 v.name().c_str(), r.error.c_str());
    // A sticky CUDA error would fail everything after; report it rather than hide it.
    cudaError_t sticky = cudaGetLastError();
    if (sticky != cudaSuccess) {
      std::fprintf(stderr, "  CUDA error state: %s\n", cudaGetErrorString(sticky));
    }
  } else {
    state.counters["ms"] = r.ms;
    state.counters["tflops"] = r.tflops;
    if (std::isfinite(r.speedup)) state.counters["vs_cudnn"] = r.speedup;
    state.counters["ws_MB"] = r.workspace_mb;
    state.counters["max_err"] = r.cmp.max_abs_error;
    state.counters["worst_ratio"] = r.cmp.worst_ratio;
    state.counters["checked"] = static_cast<double>(r.cmp.checked);
    state.counters["pass"] = r.pass ? 1 : 0;
  }
  Record(r);
}

}  // namespace bench
}  // namespace conv2d
