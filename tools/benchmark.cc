// The project's benchmark: every registered algorithm, "auto" and cuDNN fp32 on the KernelBot
// conv2d suite (or the "cnn" suite, or shapes from flags), timed as KernelBot times them, with each
// variant's error against fp64 truth next to its time.
//
//   bazel run //tools:benchmark -- [--suite=kernelbot|cnn] [--shape=B,Cin,Cout,H,W,Kh,Kw[;...]]
//       [--variants=cudnn,auto,...] [--calls=20] [--warmup=2] [--cooldown=1] [--positions=4096]
//       [--seed=1] [--inputs=normal|uniform] [--include_oracle] [--json_out=FILE]
//       [Google Benchmark flags, e.g. --benchmark_out=F]        (--help: every flag)
//
// Protocol per timed call (KernelBot's): 256 MB memset to flush L2, event, ONE call, event,
// synchronize; the mean over --calls calls after --warmup calls. Inputs are generated once per
// case. cuDNN runs first in each case so that every variant's speedup is against the cuDNN time
// of the same process. Without a CUDA device it times the CPU reference instead, and says so.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "conv/conv.h"
#include "conv/core/cuda_status.h"
#include "conv/core/device_buffer.h"
#include "conv/core/registry.h"
#include "conv/core/status_macros.h"
#include "conv/core/timing.h"
#include "conv/shape.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "reference/input_classes.h"
#include "nlohmann/json.hpp"
#include "reference/random.h"
#include "reference/reference.h"
#include "tools/cudnn_conv.h"
#include "tools/lab/lab.h"

namespace conv2d {
namespace {

// --shape's value: shapes separated by ';', each B,Cin,Cout,H,W,Kh,Kw.
struct ShapeList {
  std::vector<Shape> shapes;
};

absl::StatusOr<Shape> ParseShape(absl::string_view text) {
  std::vector<std::string> parts = absl::StrSplit(text, ',', absl::SkipWhitespace());
  int64_t v[7];
  if (parts.size() != 7) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shape wants B,Cin,Cout,H,W,Kh,Kw, got '", text, "'"));
  }
  for (int i = 0; i < 7; ++i) {
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(parts[i]), &v[i])) {
      return absl::InvalidArgumentError(absl::StrCat("--shape: '", parts[i], "' is no integer"));
    }
  }
  Shape s{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
  RETURN_IF_ERROR(ValidateShape(s));
  return s;
}

// Abseil's flag parser finds these by argument-dependent lookup: in the namespace of the type.
bool AbslParseFlag(absl::string_view text, ShapeList* list, std::string* error) {
  list->shapes.clear();
  for (absl::string_view one : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    absl::StatusOr<Shape> s = ParseShape(one);
    if (!s.ok()) {
      *error = std::string(s.status().message());
      return false;
    }
    list->shapes.push_back(*s);
  }
  return true;
}

std::string AbslUnparseFlag(const ShapeList& list) {
  return absl::StrJoin(list.shapes, ";", [](std::string* out, const Shape& s) {
    absl::StrAppend(out, absl::StrJoin({s.batch, s.in_channels, s.out_channels, s.height, s.width,
                                        s.kernel_h, s.kernel_w},
                                       ","));
  });
}

}  // namespace

bool AbslParseFlag(absl::string_view text, Distribution* d, std::string* error) {
  if (text != "normal" && text != "uniform") {
    *error = "normal or uniform";
    return false;
  }
  *d = text == "normal" ? Distribution::kNormal : Distribution::kUniform;
  return true;
}

std::string AbslUnparseFlag(Distribution d) { return DistributionName(d); }

}  // namespace conv2d

ABSL_FLAG(std::optional<std::string>, suite, std::nullopt,
          "kernelbot|cnn: the shape suite (default kernelbot: the 5 KernelBot cases)");
ABSL_FLAG(conv2d::ShapeList, shape, {},
          "B,Cin,Cout,H,W,Kh,Kw: a shape; repeatable, or several separated by ';'. Replaces the "
          "suite unless --suite is also given");
ABSL_FLAG(std::vector<std::string>, variants, {},
          "a,b,c: only these (names: cudnn, auto, and the registered ones)");
ABSL_FLAG(bool, include_oracle, false, "also time oracle algorithms (e.g. \"direct\"; slow)");
ABSL_FLAG(conv2d::Distribution, inputs, conv2d::Distribution::kNormal,
          "normal|uniform: the input distribution (normal: as KernelBot's randn)");
ABSL_FLAG(int, calls, 20, "timed calls per variant and case");
ABSL_FLAG(int, warmup, 2, "untimed calls before them");
ABSL_FLAG(double, cooldown, 1.0,
          "seconds: idle before each variant as long as the previous one kept the GPU busy, at "
          "most this long (0: none)");
ABSL_FLAG(int64_t, positions, 4096, "output positions checked against fp64");
ABSL_FLAG(uint64_t, seed, 1, "input seed; case i uses seed+i");
ABSL_FLAG(std::string, json_out, "", "FILE: write every result and the summary as JSON");
ABSL_FLAG(bool, classes, true,
          "also run each variant (not cuDNN) once per case on every input class beyond randn "
          "(reference/input_classes.h: outliers, a large mean, huge, tiny, sparse, non-finite) and "
          "check every output against the GPU fp64 reference: the `classes` column");

namespace conv2d {
namespace {

constexpr const char kCudnn[] = "cudnn";
constexpr const char kAuto[] = "auto";
const double kNaN = std::numeric_limits<double>::quiet_NaN();

constexpr const char kUsage[] =
    "The conv2d benchmark: every registered algorithm, auto and cuDNN on the KernelBot suite (or\n"
    "the cnn suite, or --shape), timed as KernelBot times them, with each error against fp64.\n"
    "  benchmark [flags] [Google Benchmark's --benchmark_* flags, e.g. --benchmark_out=FILE]";

// `bazel run` starts the binary in its runfiles tree; a relative output path means the caller's
// directory.
std::string FromCallerDir(const std::string& path) {
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || wd == nullptr || *wd == '\0') return path;
  return absl::StrCat(wd, "/", path);
}

// The command line, split: Google Benchmark's own --benchmark_* flags (--benchmark_out made
// relative to the caller's directory) for benchmark::Initialize, the rest for Abseil. Every
// --shape is merged into one, since an Abseil flag keeps only its last value.
struct SplitArgs {
  std::deque<std::string> storage;  // what the rewritten arguments point into
  std::vector<char*> absl_args, benchmark_args;
};

void SplitCommandLine(int argc, char** argv, SplitArgs* out) {
  auto keep = [out](std::vector<char*>* args, std::string arg) {
    out->storage.push_back(std::move(arg));
    args->push_back(&out->storage.back()[0]);
  };
  out->absl_args.push_back(argv[0]);
  out->benchmark_args.push_back(argv[0]);
  std::vector<std::string> shapes;
  size_t shape_at = 0;
  auto add_shape = [&](absl::string_view value) {
    if (shapes.empty()) {
      shape_at = out->absl_args.size();
      out->absl_args.push_back(nullptr);  // filled in below
    }
    shapes.emplace_back(value);
  };
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "-h") {
      keep(&out->absl_args, "--help");
    } else if (absl::ConsumePrefix(&arg, "--benchmark_out=")) {
      keep(&out->benchmark_args, absl::StrCat("--benchmark_out=", FromCallerDir(std::string(arg))));
    } else if (absl::StartsWith(arg, "--benchmark_")) {
      out->benchmark_args.push_back(argv[i]);
    } else if (absl::ConsumePrefix(&arg, "--shape=")) {
      add_shape(arg);
    } else if (arg == "--shape" && i + 1 < argc) {
      add_shape(argv[++i]);
    } else {
      out->absl_args.push_back(argv[i]);
    }
  }
  if (!shapes.empty()) {
    out->storage.push_back(absl::StrCat("--shape=", absl::StrJoin(shapes, ";")));
    out->absl_args[shape_at] = &out->storage.back()[0];
  }
}

// What Abseil's parser cannot check for itself.
absl::Status CheckFlags() {
  const std::optional<std::string> suite = absl::GetFlag(FLAGS_suite);
  if (suite.has_value() && *suite != "kernelbot" && *suite != "cnn") {
    return absl::InvalidArgumentError(absl::StrCat("--suite is kernelbot or cnn: ", *suite));
  }
  if (absl::GetFlag(FLAGS_calls) < 1) return absl::InvalidArgumentError("--calls must be >= 1");
  if (absl::GetFlag(FLAGS_warmup) < 0) return absl::InvalidArgumentError("--warmup must be >= 0");
  const double cooldown = absl::GetFlag(FLAGS_cooldown);
  if (!(cooldown >= 0) || !std::isfinite(cooldown)) {
    return absl::InvalidArgumentError(absl::StrCat("--cooldown wants seconds >= 0: ", cooldown));
  }
  if (absl::GetFlag(FLAGS_positions) < 1) {
    return absl::InvalidArgumentError("--positions must be >= 1");
  }
  if (absl::GetFlag(FLAGS_calls) < 20) {
    std::fprintf(stderr, "note: --calls=%d is below the protocol's 20\n",
                 absl::GetFlag(FLAGS_calls));
  }
  return absl::OkStatus();
}

// --variants as given, blanks dropped.
std::vector<std::string> VariantsFlag() {
  std::vector<std::string> out;
  for (const std::string& v : absl::GetFlag(FLAGS_variants)) {
    absl::string_view name = absl::StripAsciiWhitespace(v);
    if (!name.empty()) out.emplace_back(name);
  }
  return out;
}

std::vector<Shape> SuiteShapes(const std::string& suite) {
  // cnn: common CNN layers, from tiny to large channel counts; else KernelBot's five (its repeated
  // case included).
  return suite == "cnn" ? CnnShapes() : KernelBotBenchmarkShapes();
}

// ---------------------------------------------------------------------------------------------
// The GPU benchmark.

struct Case {
  Shape shape;
  uint64_t seed = 0;
  bool reference_ready = false;
  std::vector<int64_t> positions;  // empty: every output element
  std::vector<double> y64;
  double cudnn_ms = kNaN;
};

struct Result {
  std::string variant;
  int case_index = 0;
  std::string label;  // what ran: auto's choice, cuDNN's algorithm
  std::string error;  // non-empty: no time
  double ms = kNaN;
  double tflops = kNaN;
  double speedup = kNaN;  // cuDNN ms / ms
  double workspace_mb = kNaN;
  double estimate_ms = kNaN;  // the algorithm's own model, before calibration (tools/fit_auto.py)
  Comparison cmp;
  bool pass = false;
  // --classes: the worst ratio over every output of every class beyond randn (NaN: not run; inf
  // where an output's finiteness differs from fp64's), and each class's.
  double classes_worst = kNaN;
  std::vector<std::pair<std::string, double>> per_class;
};

// One variant ready to run on a case: a call that enqueues the convolution on a stream.
struct Prepared {
  std::string label;
  size_t workspace_bytes = 0;
  TimedCall call;
  // Owners of what `call` refers to.
  std::shared_ptr<const Plan> plan;
  std::shared_ptr<const CudnnConv> cudnn;
  std::shared_ptr<DeviceBuffer> workspace;
};

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

class GpuBench {
 public:
  explicit GpuBench(std::vector<Shape> shapes) : variants_(VariantsFlag()) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      Case c;
      c.shape = shapes[i];
      c.seed = absl::GetFlag(FLAGS_seed) + i;
      cases_.push_back(std::move(c));
    }
  }
  ~GpuBench() {
    problem_.reset();
    timer_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    // A blocking stream: it orders after the testbed's synchronous copies and memsets.
    RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&stream_), "cudaStreamCreate"));
    ASSIGN_OR_RETURN(KernelBotTimer timer, KernelBotTimer::Create());
    timer_.emplace(std::move(timer));
    return absl::OkStatus();
  }

  // Registers one benchmark per (variant, case), cuDNN first within each case.
  absl::Status Register() {
    std::vector<std::string> known = {kCudnn, kAuto};
    for (const std::string& n : Registry::Global().Names()) known.push_back(n);
    for (const std::string& v : variants_) {
      if (std::find(known.begin(), known.end(), v) == known.end()) {
        return absl::InvalidArgumentError(absl::StrCat("--variants: unknown variant '", v,
                                                       "'; known: ", absl::StrJoin(known, ", ")));
      }
    }
    auto wanted = [&](const std::string& v) {
      return variants_.empty() ||
             std::find(variants_.begin(), variants_.end(), v) != variants_.end();
    };
    auto named = [&](const std::string& v) {
      return std::find(variants_.begin(), variants_.end(), v) != variants_.end();
    };
    std::vector<std::string> skipped_oracles;
    for (int ci = 0; ci < static_cast<int>(cases_.size()); ++ci) {
      const Shape& shape = cases_[ci].shape;
      if (wanted(kCudnn)) Add(kCudnn, ci);
      for (const Algorithm* a : Registry::Global().All()) {
        const std::string name = a->name();
        if (!wanted(name)) continue;
        // Oracles say so by an infinite estimate; they take seconds per call on large cases.
        if (!std::isfinite(a->EstimateSeconds(shape)) && !absl::GetFlag(FLAGS_include_oracle) && !named(name)) {
          if (std::find(skipped_oracles.begin(), skipped_oracles.end(), name) ==
              skipped_oracles.end()) {
            skipped_oracles.push_back(name);
          }
          continue;
        }
        absl::Status can = a->CanImplement(shape);
        if (!can.ok()) {
          Result r;
          r.variant = name;
          r.case_index = ci;
          r.error = absl::StrCat("n/a: ", can.message());
          Record(r);
          continue;
        }
        Add(name, ci);
      }
      if (wanted(kAuto)) Add(kAuto, ci);
    }
    if (!skipped_oracles.empty()) {
      std::fprintf(stderr, "not timing oracle(s) %s (add --include_oracle)\n",
                   absl::StrJoin(skipped_oracles, ", ").c_str());
    }
    return absl::OkStatus();
  }

  void PrintSummary() const;
  absl::Status WriteJson(const std::string& path, const std::string& device) const;

 private:
  void Add(const std::string& variant, int ci) {
    if (std::find(variant_order_.begin(), variant_order_.end(), variant) == variant_order_.end()) {
      variant_order_.push_back(variant);
    }
    const std::string name =
        absl::StrCat(variant, "/", ci + 1, ":", cases_[ci].shape.ToString());
    benchmark::RegisterBenchmark(name.c_str(),
                                 [this, variant, ci](benchmark::State& state) {
                                   Bench(state, variant, ci);
                                 })
        ->UseManualTime()
        ->Iterations(absl::GetFlag(FLAGS_calls))
        ->Unit(benchmark::kMillisecond);
  }

  void Record(const Result& r) { results_[{r.variant, r.case_index}] = r; }

  // The input classes of case `ci` (built when the case changes; one case's at a time).
  absl::Status PrepareClasses(int ci) {
    if (classes_case_ == ci) return absl::OkStatus();
    classes_.clear();
    classes_case_ = -1;
    const Case& c = cases_[ci];
    const absl::Time t0 = absl::Now();
    for (InputClass ic : AllInputClasses()) {
      if (ic == InputClass::kRandn) continue;  // the main check's
      ASSIGN_OR_RETURN(ClassProblem p, MakeClassProblem(c.shape, c.seed, ic));
      classes_.push_back(std::move(p));
    }
    classes_case_ = ci;
    std::fprintf(stderr, "[case %d/%zu] input classes and their GPU fp64 references (%.1f s)\n",
                 ci + 1, cases_.size(), absl::ToDoubleSeconds(absl::Now() - t0));
    return absl::OkStatus();
  }

  // Every class of case `ci` through `variant`, every output compared at the class's scale.
  absl::Status CheckClasses(const std::string& variant, int ci, Result* r) {
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
  absl::Status PrepareCase(int ci) {
    Case& c = cases_[ci];
    if (problem_case_ != ci) {
      problem_.reset();
      problem_case_ = -1;
      ASSIGN_OR_RETURN(DeviceProblem p, DeviceProblem::Create(c.shape, c.seed, absl::GetFlag(FLAGS_inputs)));
      problem_ = std::make_unique<DeviceProblem>(std::move(p));
      problem_case_ = ci;
    }
    if (!c.reference_ready) {
      const absl::Time t0 = absl::Now();
      const Shape& s = c.shape;
      const int64_t positions = absl::GetFlag(FLAGS_positions);
      if (s.output_elements() <= positions) {
        c.positions.clear();
        c.y64 = ReferenceConv(s, problem_->host_x().data(), problem_->host_w().data());
      } else {
        c.positions = SamplePositions(s, positions, c.seed);
        c.y64 = ReferenceConvAt(s, problem_->host_x().data(), problem_->host_w().data(),
                                c.positions);
      }
      c.reference_ready = true;
      std::fprintf(stderr, "[case %d/%zu] %s  %.2f GFLOP  seed %llu  fp64 reference at %zu "
                   "positions (%.1f s)\n",
                   ci + 1, cases_.size(), s.ToString().c_str(), s.flops() * 1e-9,
                   static_cast<unsigned long long>(c.seed), c.y64.size(),
                   absl::ToDoubleSeconds(absl::Now() - t0));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Prepared> PrepareVariant(const std::string& variant, const Shape& shape) {
    Prepared p;
    if (variant == kCudnn) {
      ASSIGN_OR_RETURN(std::unique_ptr<CudnnConv> c, CudnnConv::Create(shape));
      p.cudnn = std::move(c);
      p.label = absl::StrCat("cudnn ", CudnnVersion(), " ", p.cudnn->algorithm(), " fp32 FMA");
      p.workspace_bytes = p.cudnn->workspace_bytes();
    } else {
      ASSIGN_OR_RETURN(Plan plan, Plan::Create(shape, variant));
      p.plan = std::make_shared<const Plan>(std::move(plan));
      p.label = variant == kAuto ? absl::StrCat("auto -> ", p.plan->algorithm()) : variant;
      p.workspace_bytes = p.plan->workspace_bytes();
    }
    ASSIGN_OR_RETURN(DeviceBuffer workspace,
                     DeviceBuffer::Allocate(p.workspace_bytes, "cudaMalloc workspace"));
    p.workspace = std::make_shared<DeviceBuffer>(std::move(workspace));
    const DeviceProblem* prob = problem_.get();
    void* ws = p.workspace->p;
    const size_t ws_bytes = p.workspace_bytes;
    if (p.cudnn) {
      const CudnnConv* c = p.cudnn.get();
      p.call = [=](cudaStream_t s) { return c->Run(prob->x(), prob->w(), prob->y(), ws, ws_bytes, s); };
    } else {
      const Plan* plan = p.plan.get();
      p.call = [=](cudaStream_t s) {
        return plan->Run(prob->x(), prob->w(), prob->y(), ws, ws_bytes, s);
      };
    }
    return p;
  }

  // One run on a NaN-poisoned output, compared with the fp64 reference.
  absl::StatusOr<Comparison> Check(const Prepared& p, const Case& c) {
    RETURN_IF_ERROR(problem_->PoisonOutput());
    RETURN_IF_ERROR(p.call(stream_));
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "checked run"));
    ASSIGN_OR_RETURN(std::vector<float> y, problem_->ReadOutput(c.positions));
    return Compare(y, c.y64, c.positions, kAbsTol, kRelTol);
  }

  absl::Status Measure(benchmark::State& state, const std::string& variant, int ci, Result* r) {
    RETURN_IF_ERROR(PrepareCase(ci));  // the fp64 reference: CPU time, not counted as busy
    Case& c = cases_[ci];
    // A variant timed right after a heavy one ran at lowered clocks (docs/PERF.md, round 52):
    // every variant starts from a GPU that has idled as long as the previous one kept it busy
    // (its wall time: plan, checks, flushes and calls), up to --cooldown seconds.
    const double rest_s = std::min(absl::GetFlag(FLAGS_cooldown), busy_s_);
    if (rest_s > 0) absl::SleepFor(absl::Seconds(rest_s));
    const absl::Time start = absl::Now();
    absl::Cleanup record_busy = [this, start] { busy_s_ = absl::ToDoubleSeconds(absl::Now() - start); };
    ASSIGN_OR_RETURN(Prepared p, PrepareVariant(variant, c.shape));
    r->label = p.label;
    r->workspace_mb = p.workspace_bytes / 1048576.0;
    if (const Algorithm* a = Registry::Global().Find(variant)) {
      r->estimate_ms = a->EstimateSeconds(c.shape) * 1e3;
    }
    state.SetLabel(p.label);

    // Checked cold (first call of a fresh plan) and again after the timed calls.
    ASSIGN_OR_RETURN(Comparison first, Check(p, c));
    ASSIGN_OR_RETURN(CallTimes times, timer_->Time(p.call, stream_, absl::GetFlag(FLAGS_calls),
                                                   absl::GetFlag(FLAGS_warmup)));
    size_t i = 0;  // Google Benchmark runs exactly --calls iterations (Iterations above)
    for (auto _ : state) state.SetIterationTime(times.ms[i++ % times.ms.size()] * 1e-3);
    ASSIGN_OR_RETURN(Comparison last, Check(p, c));
    r->cmp = Merge(first, last);
    r->pass = r->cmp.ok();
    r->ms = times.mean_ms();
    r->tflops = c.shape.flops() / (r->ms * 1e-3) * 1e-12;
    if (variant == kCudnn) c.cudnn_ms = r->ms;
    r->speedup = c.cudnn_ms / r->ms;  // NaN when cuDNN was filtered out or failed
    if (absl::GetFlag(FLAGS_classes) && variant != kCudnn) {
      RETURN_IF_ERROR(CheckClasses(variant, ci, r));
    }
    return absl::OkStatus();
  }

  void Bench(benchmark::State& state, const std::string& variant, int ci) {
    Result r;
    r.variant = variant;
    r.case_index = ci;
    absl::Status st = Measure(state, variant, ci, &r);
    if (!st.ok()) {
      r.error = st.ToString();
      state.SkipWithError(r.error.c_str());
      std::fprintf(stderr, "[case %d/%zu] %s: %s\n", ci + 1, cases_.size(), variant.c_str(),
                   r.error.c_str());
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

  const std::vector<std::string> variants_;  // --variants; empty: all
  double busy_s_ = 0;  // the wall time of the last variant's measurement
  std::vector<Case> cases_;
  std::vector<std::string> variant_order_;
  std::map<std::pair<std::string, int>, Result> results_;
  std::unique_ptr<DeviceProblem> problem_;
  int problem_case_ = -1;
  std::vector<ClassProblem> classes_;
  int classes_case_ = -1;
  cudaStream_t stream_ = nullptr;
  std::optional<KernelBotTimer> timer_;
};

struct SummaryRow {
  std::string variant;
  std::vector<const Result*> per_case;  // null: not run
  double geomean_ms = kNaN;             // only when every case has a time
  double worst_ratio = kNaN;
  double classes_worst = kNaN;  // over the cases that ran --classes
  int passed = 0, failed = 0, errors = 0;  // n/a cases count in none of them
};

std::vector<SummaryRow> Summarize(const std::vector<std::string>& order, size_t ncases,
                                  const std::map<std::pair<std::string, int>, Result>& results) {
  std::vector<SummaryRow> rows;
  std::vector<std::string> variants = order;
  for (const auto& kv : results) {  // variants that never ran (n/a everywhere) still get a row
    if (std::find(variants.begin(), variants.end(), kv.first.first) == variants.end()) {
      variants.push_back(kv.first.first);
    }
  }
  for (const std::string& v : variants) {
    SummaryRow row;
    row.variant = v;
    double log_sum = 0;
    int timed = 0;
    for (size_t ci = 0; ci < ncases; ++ci) {
      auto it = results.find({v, static_cast<int>(ci)});
      const Result* r = it == results.end() ? nullptr : &it->second;
      row.per_case.push_back(r);
      if (r == nullptr) continue;
      if (!r->error.empty()) {
        if (r->error.rfind("n/a", 0) != 0) ++row.errors;
        continue;
      }
      ++(r->pass ? row.passed : row.failed);
      row.worst_ratio = std::isnan(row.worst_ratio) ? r->cmp.worst_ratio
                                                    : std::max(row.worst_ratio, r->cmp.worst_ratio);
      if (!r->per_class.empty() &&
          (std::isnan(row.classes_worst) || !(r->classes_worst <= row.classes_worst))) {
        row.classes_worst = r->classes_worst;
      }
      log_sum += std::log(r->ms);
      ++timed;
    }
    if (timed == static_cast<int>(ncases) && ncases > 0) row.geomean_ms = std::exp(log_sum / timed);
    rows.push_back(std::move(row));
  }
  return rows;
}

void GpuBench::PrintSummary() const {
  std::vector<SummaryRow> rows = Summarize(variant_order_, cases_.size(), results_);
  double cudnn_geo = kNaN;
  for (const SummaryRow& r : rows) {
    if (r.variant == kCudnn) cudnn_geo = r.geomean_ms;
  }
  std::printf("\nSummary: mean ms per case (%d calls after %d warm-up, L2 flushed before each; "
              "error vs fp64 at <= %lld positions, bar |y-y64| <= 1e-3 + 1e-3|y64|)\n",
              absl::GetFlag(FLAGS_calls), absl::GetFlag(FLAGS_warmup),
              static_cast<long long>(absl::GetFlag(FLAGS_positions)));
  for (size_t ci = 0; ci < cases_.size(); ++ci) {
    std::printf("  #%zu %-28s %8.2f GFLOP\n", ci + 1, cases_[ci].shape.ToString().c_str(),
                cases_[ci].shape.flops() * 1e-9);
  }
  size_t width = 8;
  for (const SummaryRow& r : rows) width = std::max(width, r.variant.size());
  std::string line = absl::StrFormat("%-*s", static_cast<int>(width), "variant");
  for (size_t ci = 0; ci < cases_.size(); ++ci) {
    absl::StrAppend(&line, absl::StrFormat(" %9s", absl::StrCat("#", ci + 1)));
  }
  absl::StrAppend(&line, absl::StrFormat(" %9s %8s %11s %8s  %s", "geomean", "vs_cudnn",
                                         "worst_ratio", "classes", "pass"));
  std::printf("%s\n", line.c_str());
  for (const SummaryRow& r : rows) {
    line = absl::StrFormat("%-*s", static_cast<int>(width), r.variant);
    for (const Result* res : r.per_case) {
      std::string cell = "-";
      if (res != nullptr && !res->error.empty()) {
        cell = res->error.rfind("n/a", 0) == 0 ? "n/a" : "ERROR";
      } else if (res != nullptr) {
        cell = absl::StrFormat("%.3f%s", res->ms, res->pass ? "" : "!");
      }
      absl::StrAppend(&line, absl::StrFormat(" %9s", cell));
    }
    auto num = [](double v, const char* fmt) {
      return std::isnan(v) ? std::string("-") : absl::StrFormat(fmt, v);
    };
    const int tried = r.passed + r.failed + r.errors;
    std::string pass = tried == 0 ? "-"
                       : r.passed == tried
                           ? absl::StrCat("yes (", tried, ")")
                           : absl::StrCat("NO (", r.failed, " failed, ", r.errors, " errors)");
    absl::StrAppend(&line, absl::StrFormat(" %9s %8s %11s %8s  %s", num(r.geomean_ms, "%.3f"),
                                           num(cudnn_geo / r.geomean_ms, "%.2fx"),
                                           num(r.worst_ratio, "%.3f"),
                                           num(r.classes_worst, "%.3g"), pass));
    std::printf("%s\n", line.c_str());
  }
  std::printf("('!' after a time: that case failed the fp64 bar; n/a: the variant cannot take the "
              "shape; ERROR: see the benchmark line; geomean only when every case ran; classes: "
              "the worst ratio over every output of the input classes beyond randn, --classes, "
              "which pass does not count: see conv.h for each algorithm's domain)\n");
  // Per case and class, for the variants that ran them.
  for (const SummaryRow& r : rows) {
    for (const Result* res : r.per_case) {
      if (res == nullptr || res->per_class.empty()) continue;
      std::string cells;
      for (const auto& [name, worst] : res->per_class) {
        absl::StrAppend(&cells, absl::StrFormat(" %s %.3g", name, worst));
      }
      std::printf("classes %s #%d:%s\n", r.variant.c_str(), res->case_index + 1, cells.c_str());
    }
  }
  std::fflush(stdout);
}

// The benchmark's figures to 9 significant digits (as many as a float time has), not the 17 a
// double prints with: the JSON files kept in docs/data stay readable.
double Sig9(double v) {
  return std::isfinite(v) ? std::strtod(absl::StrFormat("%.9g", v).c_str(), nullptr) : v;
}

// One member per line at the top, one row per line in the arrays, so that the files kept in
// docs/data diff row by row. Non-finite numbers are written as null; bytes that are not UTF-8
// (none are expected) are replaced rather than thrown over.
std::string Layout(const nlohmann::ordered_json& doc) {
  auto dump = [](const nlohmann::ordered_json& v) {
    return v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  };
  std::vector<std::string> members;
  for (const auto& [key, value] : doc.items()) {
    std::string m = absl::StrCat("  ", dump(key), ": ");
    if (value.is_array()) {
      std::vector<std::string> rows;
      for (const auto& row : value) rows.push_back(absl::StrCat("    ", dump(row)));
      absl::StrAppend(&m, "[\n", absl::StrJoin(rows, ",\n"), rows.empty() ? "" : "\n", "  ]");
    } else {
      absl::StrAppend(&m, dump(value));
    }
    members.push_back(std::move(m));
  }
  return absl::StrCat("{\n", absl::StrJoin(members, ",\n"), "\n}\n");
}

absl::Status GpuBench::WriteJson(const std::string& path, const std::string& device) const {
  using Json = nlohmann::ordered_json;
  Json j;
  j["device"] = device;
  j["cudnn_version"] = CudnnVersion();
  j["calls"] = absl::GetFlag(FLAGS_calls);
  j["warmup"] = absl::GetFlag(FLAGS_warmup);
  j["cooldown_s"] = Sig9(absl::GetFlag(FLAGS_cooldown));
  j["positions"] = absl::GetFlag(FLAGS_positions);
  j["inputs"] = DistributionName(absl::GetFlag(FLAGS_inputs));
  j["seed"] = absl::GetFlag(FLAGS_seed);
  j["atol"] = Sig9(kAbsTol);
  j["rtol"] = Sig9(kRelTol);
  j["cases"] = Json::array();
  for (size_t ci = 0; ci < cases_.size(); ++ci) {
    const Shape& s = cases_[ci].shape;
    j["cases"].push_back({{"case", ci + 1},
                          {"name", s.ToString()},
                          {"batch", s.batch},
                          {"in_channels", s.in_channels},
                          {"out_channels", s.out_channels},
                          {"height", s.height},
                          {"width", s.width},
                          {"kernel_h", s.kernel_h},
                          {"kernel_w", s.kernel_w},
                          {"seed", cases_[ci].seed},
                          {"gflop", Sig9(s.flops() * 1e-9)}});
  }
  j["results"] = Json::array();
  for (const auto& kv : results_) {
    const Result& r = kv.second;
    Json row = {{"variant", r.variant}, {"case", r.case_index + 1}, {"label", r.label}};
    if (!r.error.empty()) {
      row["error"] = r.error;
    } else {
      row["ms"] = Sig9(r.ms);
      row["tflops"] = Sig9(r.tflops);
      row["vs_cudnn"] = Sig9(r.speedup);
      row["workspace_mb"] = Sig9(r.workspace_mb);
      row["estimate_ms"] = Sig9(r.estimate_ms);
      row["checked"] = r.cmp.checked;
      row["failures"] = r.cmp.failures;
      row["max_abs_error"] = Sig9(r.cmp.max_abs_error);
      row["rms_error"] = Sig9(r.cmp.rms_error);
      row["worst_ratio"] = Sig9(r.cmp.worst_ratio);
      row["pass"] = r.pass;
      if (!r.per_class.empty()) {
        row["classes_worst_ratio"] = Sig9(r.classes_worst);
        for (const auto& [name, worst] : r.per_class) row["classes"][name] = Sig9(worst);
      }
    }
    j["results"].push_back(std::move(row));
  }
  j["summary"] = Json::array();
  for (const SummaryRow& r : Summarize(variant_order_, cases_.size(), results_)) {
    j["summary"].push_back({{"variant", r.variant},
                            {"geomean_ms", Sig9(r.geomean_ms)},
                            {"worst_ratio", Sig9(r.worst_ratio)},
                            {"classes_worst_ratio", Sig9(r.classes_worst)},
                            {"cases_passed", r.passed},
                            {"cases_failed", r.failed},
                            {"cases_errors", r.errors},
                            {"pass", r.passed > 0 && r.failed + r.errors == 0}});
  }
  const std::string text = Layout(j);
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return absl::DataLossError(absl::StrCat("writing ", path));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// No device: time the CPU reference so that the binary still shows it works.

void BM_ReferenceCpu(benchmark::State& state, Shape shape) {
  const std::vector<float> x = RandomTensor(1, kInputTensor, shape.input_elements());
  const std::vector<float> w = RandomTensor(1, kFilterTensor, shape.filter_elements());
  for (auto _ : state) {
    std::vector<double> y = ReferenceConv(shape, x.data(), w.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(shape.flops() * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

int RunCpu(int argc, char** argv) {
  const Shape shape = Shape::KernelBot(32, 4, 16, 2);
  benchmark::RegisterBenchmark(absl::StrCat("reference_cpu/", shape.ToString()).c_str(),
                               BM_ReferenceCpu, shape)
      ->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

int Main(int argc, char** argv) {
  // The lab's baselines are timed beside the library's algorithms.
  if (absl::Status lab = RegisterLabAlgorithms(); !lab.ok()) {
    std::fprintf(stderr, "%s\n", lab.ToString().c_str());
    return 2;
  }
  SplitArgs args;
  SplitCommandLine(argc, argv, &args);
  absl::SetProgramUsageMessage(kUsage);
  const std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.absl_args.size()), args.absl_args.data());
  absl::Status st = positional.size() > 1
                        ? absl::InvalidArgumentError(
                              absl::StrCat("unexpected argument '", positional[1], "'"))
                        : CheckFlags();
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n(--help lists the flags)\n", st.ToString().c_str());
    return 2;
  }
  const std::string json_out = FromCallerDir(absl::GetFlag(FLAGS_json_out));
  argc = static_cast<int>(args.benchmark_args.size());
  argv = args.benchmark_args.data();

  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    cudaGetLastError();
    std::printf("!!! no CUDA device (%s): timing the CPU reference on a small shape instead !!!\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    std::fflush(stdout);
    if (!json_out.empty()) std::fprintf(stderr, "--json_out is ignored without a device\n");
    return RunCpu(argc, argv);
  }

  std::vector<Shape> shapes;
  const std::vector<Shape> given = absl::GetFlag(FLAGS_shape).shapes;
  const std::optional<std::string> suite = absl::GetFlag(FLAGS_suite);
  if (given.empty() || suite.has_value()) shapes = SuiteShapes(suite.value_or("kernelbot"));
  shapes.insert(shapes.end(), given.begin(), given.end());

  cudaDeviceProp prop;
  st = CudaStatus(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  const std::string device = absl::StrFormat("%s (sm_%d%d, %d SMs)", prop.name, prop.major,
                                             prop.minor, prop.multiProcessorCount);
  benchmark::AddCustomContext("device", device);
  benchmark::AddCustomContext("cudnn", CudnnVersion());
  benchmark::AddCustomContext("protocol",
                              absl::StrCat("KernelBot: 256 MB L2 flush, events around one call, ",
                                           absl::GetFlag(FLAGS_calls), " calls after ",
                                           absl::GetFlag(FLAGS_warmup), " warm-up"));
  std::fprintf(stderr, "device %s, cuDNN %s, %zu case(s), variants: cudnn, %s, auto\n",
               device.c_str(), CudnnVersion().c_str(), shapes.size(),
               absl::StrJoin(Registry::Global().Names(), ", ").c_str());

  GpuBench bench(shapes);
  st = bench.Init();
  if (st.ok()) st = bench.Register();
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  bench.PrintSummary();
  if (!json_out.empty()) {
    st = bench.WriteJson(json_out, device);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "wrote %s\n", json_out.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace conv2d

int main(int argc, char** argv) { return conv2d::Main(argc, argv); }
