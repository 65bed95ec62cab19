// The GPU side of the benchmark: every (variant, case) registered with Google Benchmark, each run
// timed under KernelBot's protocol (conv/core/timing.h) and checked against fp64 before and after,
// optionally on every input class too, into Results for the reports.
#ifndef CONV2D_TOOLS_BENCHMARK_RUNNER_H_
#define CONV2D_TOOLS_BENCHMARK_RUNNER_H_

#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "benchmark/benchmark.h"
#include "conv/core/timing.h"
#include "conv/shape.h"
#include "conv/testing/testbed.h"
#include "tools/benchmark/results.h"
#include "tools/benchmark/suites.h"
#include "tools/benchmark/variants.h"

namespace conv2d {
namespace bench {

class Runner {
 public:
  Runner(std::vector<Case> cases, Options options);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // The stream and the timer; needs a device.
  absl::Status Init();
  // Registers one benchmark per (variant, case) that the variant times, cuDNN first within each
  // case, and records the cases it cannot take as n/a. The benchmarks run in
  // benchmark::RunSpecifiedBenchmarks, and fill results().
  absl::Status Register();

  const Results& results() const { return results_; }

 private:
  // What a case keeps between its variants.
  struct CaseState {
    std::optional<Expected> expected;  // the fp64 reference, made once
    double baseline_ms = kNaN;
  };

  void Add(const Variant& v, int ci);
  void Record(const Result& r) { results_.by_variant_case[{r.variant, r.case_index}] = r; }
  void RecordNotApplicable(const std::string& variant, int ci, const absl::Status& why);
  absl::Status PrepareCase(int ci);
  absl::Status PrepareClasses(int ci);
  absl::Status CheckClasses(const std::string& variant, int ci, Result* r);
  absl::StatusOr<Comparison> Check(const Prepared& p, const Expected& expected);
  absl::Status Measure(benchmark::State& state, const Variant& v, int ci, Result* r);
  void Bench(benchmark::State& state, const Variant& v, int ci);

  const Options options_;
  const std::vector<std::unique_ptr<const Variant>> variants_;
  Results results_;
  std::vector<CaseState> states_;  // one per case
  double busy_s_ = 0;  // the wall time of the last variant's measurement
  std::unique_ptr<DeviceProblem> problem_;
  int problem_case_ = -1;
  std::vector<ClassProblem> classes_;
  int classes_case_ = -1;
  cudaStream_t stream_ = nullptr;
  std::optional<KernelBotTimer> timer_;
};

}  // namespace bench
}  // namespace conv2d

#endif  // CONV2D_TOOLS_BENCHMARK_RUNNER_H_
