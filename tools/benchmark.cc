// The project's benchmark: every registered algorithm, "auto" and cuDNN fp32 on the KernelBot
// conv2d suite (or the "cnn" suite, or shapes from flags), timed as KernelBot times them, with each
// variant's error against fp64 truth next to its time.
//
//   bazel run //tools:benchmark -- [--suite=kernelbot|cnn] [--shape=B,Cin,Cout,H,W,Kh,Kw[;...]]
//       [--variants=cudnn,auto,...] [--calls=20] [--warmup=2] [--positions=4096] [--seed=1]
//       [--include_oracle] [--json_out=FILE] [Google Benchmark flags, e.g. --benchmark_out=F]
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
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
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
#include "conv/core/registry.h"
#include "conv/shape.h"
#include "conv/testing/shapes.h"
#include "conv/core/status_macros.h"
#include "conv/testing/testbed.h"
#include "reference/random.h"
#include "reference/reference.h"
#include "tools/cudnn_conv.h"
#include "tools/lab/lab.h"

namespace conv2d {
namespace {

constexpr size_t kFlushBytes = size_t{256} << 20;  // KernelBot's L2 flush: 256 MB written
constexpr const char kCudnn[] = "cudnn";
constexpr const char kAuto[] = "auto";
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------
// Flags. Ours are taken out of argv; the rest goes to Google Benchmark.

struct Flags {
  int calls = 20;
  int warmup = 2;
  double cooldown_s = 1.0;
  int64_t positions = 4096;
  uint64_t seed = 1;
  bool include_oracle = false;
  Distribution inputs = Distribution::kNormal;  // KernelBot draws torch.randn
  std::string suite = "kernelbot";
  bool suite_given = false;
  std::vector<Shape> shapes;
  std::vector<std::string> variants;  // empty: all
  std::string json_out;
};

constexpr const char kUsage[] =
    "conv2d benchmark flags (Google Benchmark's own --benchmark_* flags also apply):\n"
    "  --suite=kernelbot|cnn       the shape suite (default kernelbot: the 5 KernelBot cases)\n"
    "  --shape=B,Cin,Cout,H,W,Kh,Kw  a shape; repeatable, or several separated by ';'.\n"
    "                              Replaces the suite unless --suite is also given.\n"
    "  --variants=a,b,c            only these (names: cudnn, auto, and the registered ones)\n"
    "  --include_oracle            also time oracle algorithms (e.g. \"direct\"; slow)\n"
    "  --inputs=normal|uniform     input distribution (default normal, as KernelBot's randn)\n"
    "  --calls=N                   timed calls per variant and case (default 20)\n"
    "  --warmup=N                  untimed calls before them (default 2)\n"
    "  --cooldown=S                idle before each variant as long as the previous one kept\n"
    "                              the GPU busy, at most S seconds (default 1; 0: none)\n"
    "  --positions=N               output positions checked against fp64 (default 4096)\n"
    "  --seed=N                    input seed; case i uses seed+i (default 1)\n"
    "  --json_out=FILE             write every result and the summary as JSON\n";

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

// `bazel run` starts the binary in its runfiles tree; a relative output path means the caller's
// directory.
std::string FromCallerDir(const std::string& path) {
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || wd == nullptr || *wd == '\0') return path;
  return absl::StrCat(wd, "/", path);
}

absl::Status ParseFlags(int* argc, char** argv, Flags* f, bool* help) {
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    absl::string_view arg = argv[i];
    std::pair<std::string, std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    const std::string& key = kv.first;
    const std::string& value = kv.second;
    const bool has_value = arg.find('=') != absl::string_view::npos;
    auto need_int = [&](auto* out) -> absl::Status {
      if (!has_value || !absl::SimpleAtoi(value, out)) {
        return absl::InvalidArgumentError(absl::StrCat(key, " wants an integer: ", arg));
      }
      return absl::OkStatus();
    };
    if (key == "--help" || key == "-h") {
      *help = true;
      argv[kept++] = argv[i];  // Google Benchmark prints its own help too
    } else if (key == "--calls") {
      RETURN_IF_ERROR(need_int(&f->calls));
      if (f->calls < 1) return absl::InvalidArgumentError("--calls must be >= 1");
    } else if (key == "--warmup") {
      RETURN_IF_ERROR(need_int(&f->warmup));
      if (f->warmup < 0) return absl::InvalidArgumentError("--warmup must be >= 0");
    } else if (key == "--cooldown") {
      if (!has_value || !absl::SimpleAtod(value, &f->cooldown_s) || !(f->cooldown_s >= 0) ||
          !std::isfinite(f->cooldown_s)) {
        return absl::InvalidArgumentError(absl::StrCat("--cooldown wants seconds >= 0: ", arg));
      }
    } else if (key == "--positions") {
      RETURN_IF_ERROR(need_int(&f->positions));
      if (f->positions < 1) return absl::InvalidArgumentError("--positions must be >= 1");
    } else if (key == "--seed") {
      RETURN_IF_ERROR(need_int(&f->seed));
    } else if (key == "--include_oracle") {
      if (has_value && value != "true" && value != "false" && value != "1" && value != "0") {
        return absl::InvalidArgumentError(absl::StrCat("--include_oracle wants a bool: ", arg));
      }
      f->include_oracle = !has_value || value == "true" || value == "1";
    } else if (key == "--inputs") {
      if (value != "normal" && value != "uniform") {
        return absl::InvalidArgumentError(absl::StrCat("--inputs is normal or uniform: ", arg));
      }
      f->inputs = value == "normal" ? Distribution::kNormal : Distribution::kUniform;
    } else if (key == "--suite") {
      if (value != "kernelbot" && value != "cnn") {
        return absl::InvalidArgumentError(absl::StrCat("--suite is kernelbot or cnn: ", arg));
      }
      f->suite = value;
      f->suite_given = true;
    } else if (key == "--shape") {
      for (absl::string_view one : absl::StrSplit(value, ';', absl::SkipWhitespace())) {
        ASSIGN_OR_RETURN(Shape s, ParseShape(one));
        f->shapes.push_back(s);
      }
    } else if (key == "--variants") {
      for (absl::string_view v : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
        f->variants.emplace_back(absl::StripAsciiWhitespace(v));
      }
    } else if (key == "--json_out") {
      if (value.empty()) return absl::InvalidArgumentError("--json_out wants a file name");
      f->json_out = FromCallerDir(value);
    } else if (key == "--benchmark_out" && has_value) {
      static std::deque<std::string>* rewritten = new std::deque<std::string>;
      rewritten->push_back(absl::StrCat(key, "=", FromCallerDir(value)));
      argv[kept++] = &rewritten->back()[0];
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  if (f->calls < 20) {
    std::fprintf(stderr, "note: --calls=%d is below the protocol's 20\n", f->calls);
  }
  return absl::OkStatus();
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
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }
  absl::Status Allocate(size_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    return CudaStatus(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

// One variant ready to run on a case: a call that enqueues the convolution on a stream.
struct Prepared {
  std::string label;
  size_t workspace_bytes = 0;
  std::function<absl::Status(cudaStream_t)> call;
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
  GpuBench(Flags flags, std::vector<Shape> shapes) : flags_(std::move(flags)) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      Case c;
      c.shape = shapes[i];
      c.seed = flags_.seed + i;
      cases_.push_back(std::move(c));
    }
  }
  ~GpuBench() {
    problem_.reset();
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    // A blocking stream: it orders after the testbed's synchronous copies and memsets.
    RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&stream_), "cudaStreamCreate"));
    RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&start_), "cudaEventCreate"));
    RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&stop_), "cudaEventCreate"));
    return flush_.Allocate(kFlushBytes);
  }

  // Registers one benchmark per (variant, case), cuDNN first within each case.
  absl::Status Register() {
    std::vector<std::string> known = {kCudnn, kAuto};
    for (const std::string& n : Registry::Global().Names()) known.push_back(n);
    for (const std::string& v : flags_.variants) {
      if (std::find(known.begin(), known.end(), v) == known.end()) {
        return absl::InvalidArgumentError(absl::StrCat("--variants: unknown variant '", v,
                                                       "'; known: ", absl::StrJoin(known, ", ")));
      }
    }
    auto wanted = [&](const std::string& v) {
      return flags_.variants.empty() ||
             std::find(flags_.variants.begin(), flags_.variants.end(), v) != flags_.variants.end();
    };
    auto named = [&](const std::string& v) {
      return std::find(flags_.variants.begin(), flags_.variants.end(), v) != flags_.variants.end();
    };
    std::vector<std::string> skipped_oracles;
    for (int ci = 0; ci < static_cast<int>(cases_.size()); ++ci) {
      const Shape& shape = cases_[ci].shape;
      if (wanted(kCudnn)) Add(kCudnn, ci);
      for (const Algorithm* a : Registry::Global().All()) {
        const std::string name = a->name();
        if (!wanted(name)) continue;
        // Oracles say so by an infinite estimate; they take seconds per call on large cases.
        if (!std::isfinite(a->EstimateSeconds(shape)) && !flags_.include_oracle && !named(name)) {
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
        ->Iterations(flags_.calls)
        ->Unit(benchmark::kMillisecond);
  }

  void Record(const Result& r) { results_[{r.variant, r.case_index}] = r; }

  // Inputs on the device for case `ci` (one case's buffers at a time) and its fp64 reference.
  absl::Status PrepareCase(int ci) {
    Case& c = cases_[ci];
    if (problem_case_ != ci) {
      problem_.reset();
      problem_case_ = -1;
      ASSIGN_OR_RETURN(DeviceProblem p, DeviceProblem::Create(c.shape, c.seed, flags_.inputs));
      problem_ = std::make_unique<DeviceProblem>(std::move(p));
      problem_case_ = ci;
    }
    if (!c.reference_ready) {
      const absl::Time t0 = absl::Now();
      const Shape& s = c.shape;
      if (s.output_elements() <= flags_.positions) {
        c.positions.clear();
        c.y64 = ReferenceConv(s, problem_->host_x().data(), problem_->host_w().data());
      } else {
        c.positions = SamplePositions(s, flags_.positions, c.seed);
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
    p.workspace = std::make_shared<DeviceBuffer>();
    RETURN_IF_ERROR(p.workspace->Allocate(p.workspace_bytes));
    const DeviceProblem* prob = problem_.get();
    void* ws = p.workspace->get();
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

  // The KernelBot-timed call: flush L2, then events around exactly one call.
  absl::StatusOr<double> TimedCall(const Prepared& p) {
    RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(flush_.get(), 0, kFlushBytes, stream_), "flush L2"));
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(start_, stream_), "cudaEventRecord"));
    RETURN_IF_ERROR(p.call(stream_));
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(stop_, stream_), "cudaEventRecord"));
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(stop_), "timed call"));
    float ms = 0;
    RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime"));
    return static_cast<double>(ms);
  }

  absl::Status Measure(benchmark::State& state, const std::string& variant, int ci, Result* r) {
    RETURN_IF_ERROR(PrepareCase(ci));  // the fp64 reference: CPU time, not counted as busy
    Case& c = cases_[ci];
    // A variant timed right after a heavy one ran at lowered clocks (docs/PERF.md, round 52):
    // every variant starts from a GPU that has idled as long as the previous one kept it busy
    // (its wall time: plan, checks, flushes and calls), up to --cooldown seconds.
    const double rest_s = std::min(flags_.cooldown_s, busy_s_);
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
    for (int i = 0; i < flags_.warmup; ++i) {
      ASSIGN_OR_RETURN(double unused, TimedCall(p));
      (void)unused;
    }
    double total_ms = 0;
    int64_t n = 0;
    absl::Status st;
    for (auto _ : state) {
      absl::StatusOr<double> ms = TimedCall(p);
      if (!ms.ok()) {
        st = ms.status();
        break;
      }
      state.SetIterationTime(*ms * 1e-3);
      total_ms += *ms;
      ++n;
    }
    RETURN_IF_ERROR(st);
    ASSIGN_OR_RETURN(Comparison last, Check(p, c));
    r->cmp = Merge(first, last);
    r->pass = r->cmp.ok();
    r->ms = n > 0 ? total_ms / n : kNaN;
    r->tflops = c.shape.flops() / (r->ms * 1e-3) * 1e-12;
    if (variant == kCudnn) c.cudnn_ms = r->ms;
    r->speedup = c.cudnn_ms / r->ms;  // NaN when cuDNN was filtered out or failed
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

  Flags flags_;
  double busy_s_ = 0;  // the wall time of the last variant's measurement
  std::vector<Case> cases_;
  std::vector<std::string> variant_order_;
  std::map<std::pair<std::string, int>, Result> results_;
  std::unique_ptr<DeviceProblem> problem_;
  int problem_case_ = -1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  DeviceBuffer flush_;

};

struct SummaryRow {
  std::string variant;
  std::vector<const Result*> per_case;  // null: not run
  double geomean_ms = kNaN;             // only when every case has a time
  double worst_ratio = kNaN;
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
              flags_.calls, flags_.warmup, static_cast<long long>(flags_.positions));
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
  absl::StrAppend(&line, absl::StrFormat(" %9s %8s %11s  %s", "geomean", "vs_cudnn",
                                         "worst_ratio", "pass"));
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
    absl::StrAppend(&line, absl::StrFormat(" %9s %8s %11s  %s", num(r.geomean_ms, "%.3f"),
                                           num(cudnn_geo / r.geomean_ms, "%.2fx"),
                                           num(r.worst_ratio, "%.3f"), pass));
    std::printf("%s\n", line.c_str());
  }
  std::printf("('!' after a time: that case failed the fp64 bar; n/a: the variant cannot take the "
              "shape; ERROR: see the benchmark line; geomean only when every case ran)\n");
  std::fflush(stdout);
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(ch));
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.9g", v) : std::string("null");
}

absl::Status GpuBench::WriteJson(const std::string& path, const std::string& device) const {
  std::string j = "{\n";
  absl::StrAppend(&j, "  \"device\": ", JsonString(device), ",\n");
  absl::StrAppend(&j, "  \"cudnn_version\": ", JsonString(CudnnVersion()), ",\n");
  absl::StrAppend(&j, "  \"calls\": ", flags_.calls, ",\n  \"warmup\": ", flags_.warmup,
                  ",\n  \"cooldown_s\": ", JsonNumber(flags_.cooldown_s),
                  ",\n  \"positions\": ", flags_.positions, ",\n  \"inputs\": \"", DistributionName(flags_.inputs), "\",\n  \"seed\": ", flags_.seed,
                  ",\n  \"atol\": ", JsonNumber(kAbsTol), ",\n  \"rtol\": ", JsonNumber(kRelTol),
                  ",\n");
  j += "  \"cases\": [\n";
  for (size_t ci = 0; ci < cases_.size(); ++ci) {
    const Shape& s = cases_[ci].shape;
    absl::StrAppend(&j, "    {\"case\": ", ci + 1, ", \"name\": ", JsonString(s.ToString()),
                    ", \"batch\": ", s.batch, ", \"in_channels\": ", s.in_channels,
                    ", \"out_channels\": ", s.out_channels, ", \"height\": ", s.height,
                    ", \"width\": ", s.width, ", \"kernel_h\": ", s.kernel_h,
                    ", \"kernel_w\": ", s.kernel_w, ", \"seed\": ", cases_[ci].seed,
                    ", \"gflop\": ", JsonNumber(s.flops() * 1e-9), "}",
                    ci + 1 < cases_.size() ? ",\n" : "\n");
  }
  j += "  ],\n  \"results\": [\n";
  size_t k = 0;
  for (const auto& kv : results_) {
    const Result& r = kv.second;
    absl::StrAppend(&j, "    {\"variant\": ", JsonString(r.variant), ", \"case\": ",
                    r.case_index + 1, ", \"label\": ", JsonString(r.label));
    if (!r.error.empty()) {
      absl::StrAppend(&j, ", \"error\": ", JsonString(r.error));
    } else {
      absl::StrAppend(&j, ", \"ms\": ", JsonNumber(r.ms), ", \"tflops\": ", JsonNumber(r.tflops),
                      ", \"vs_cudnn\": ", JsonNumber(r.speedup),
                      ", \"workspace_mb\": ", JsonNumber(r.workspace_mb),
                      ", \"estimate_ms\": ", JsonNumber(r.estimate_ms),
                      ", \"checked\": ", r.cmp.checked, ", \"failures\": ", r.cmp.failures,
                      ", \"max_abs_error\": ", JsonNumber(r.cmp.max_abs_error),
                      ", \"rms_error\": ", JsonNumber(r.cmp.rms_error),
                      ", \"worst_ratio\": ", JsonNumber(r.cmp.worst_ratio),
                      ", \"pass\": ", r.pass ? "true" : "false");
    }
    absl::StrAppend(&j, "}", ++k < results_.size() ? ",\n" : "\n");
  }
  j += "  ],\n  \"summary\": [\n";
  std::vector<SummaryRow> rows = Summarize(variant_order_, cases_.size(), results_);
  for (size_t i = 0; i < rows.size(); ++i) {
    const SummaryRow& r = rows[i];
    absl::StrAppend(&j, "    {\"variant\": ", JsonString(r.variant),
                    ", \"geomean_ms\": ", JsonNumber(r.geomean_ms),
                    ", \"worst_ratio\": ", JsonNumber(r.worst_ratio), ", \"cases_passed\": ", r.passed,
                    ", \"cases_failed\": ", r.failed, ", \"cases_errors\": ", r.errors,
                    ", \"pass\": ", r.passed > 0 && r.failed + r.errors == 0 ? "true" : "false",
                    "}",
                    i + 1 < rows.size() ? ",\n" : "\n");
  }
  j += "  ]\n}\n";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  const bool ok = std::fwrite(j.data(), 1, j.size(), f) == j.size();
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
  Flags flags;
  bool help = false;
  absl::Status st = ParseFlags(&argc, argv, &flags, &help);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n\n%s", st.ToString().c_str(), kUsage);
    return 2;
  }
  if (help) std::fprintf(stdout, "%s\n", kUsage);

  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    cudaGetLastError();
    std::printf("!!! no CUDA device (%s): timing the CPU reference on a small shape instead !!!\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    std::fflush(stdout);
    if (!flags.json_out.empty()) std::fprintf(stderr, "--json_out is ignored without a device\n");
    return RunCpu(argc, argv);
  }

  std::vector<Shape> shapes;
  if (flags.shapes.empty() || flags.suite_given) shapes = SuiteShapes(flags.suite);
  shapes.insert(shapes.end(), flags.shapes.begin(), flags.shapes.end());

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
                                           flags.calls, " calls after ", flags.warmup, " warm-up"));
  std::fprintf(stderr, "device %s, cuDNN %s, %zu case(s), variants: cudnn, %s, auto\n",
               device.c_str(), CudnnVersion().c_str(), shapes.size(),
               absl::StrJoin(Registry::Global().Names(), ", ").c_str());

  GpuBench bench(flags, shapes);
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
  if (!flags.json_out.empty()) {
    st = bench.WriteJson(flags.json_out, device);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "wrote %s\n", flags.json_out.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace conv2d

int main(int argc, char** argv) { return conv2d::Main(argc, argv); }
