// What a benchmark run produces and every report reads: the settings it ran with, one Result per
// (variant, case), and what the summaries derive from them (per-variant rows, per-network totals).
// Plain data, no device: the runner fills it, report_text and report_json print it.
#ifndef CONV2D_TOOLS_BENCHMARK_RESULTS_H_
#define CONV2D_TOOLS_BENCHMARK_RESULTS_H_

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "conv/testing/testbed.h"
#include "reference/random.h"
#include "tools/benchmark/suites.h"

namespace conv2d {
namespace bench {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The variants the summaries single out by name: every speedup is against cuDNN's time, and the
// nets totals compare auto's with it.
inline constexpr char kCudnn[] = "cudnn";
inline constexpr char kAuto[] = "auto";

// The flags the runner and the reports act on (tools/benchmark.cc fills it).
struct Options {
  std::vector<std::string> variants;  // empty: all
  bool include_oracle = false;
  bool classes = true;
  Distribution inputs = Distribution::kNormal;
  uint64_t seed = 1;
  int64_t positions = 4096;
  int calls = 20, warmup = 2;
  double cooldown_s = 1.0;
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

  // "n/a: why": the variant cannot take the case, which is no error.
  bool not_applicable() const { return error.rfind("n/a", 0) == 0; }
};

struct Results {
  std::vector<Case> cases;
  std::vector<std::string> variant_order;  // as first registered
  std::map<std::pair<std::string, int>, Result> by_variant_case;

  // Null when `variant` has no result for case `ci`.
  const Result* Find(const std::string& variant, size_t ci) const;
  bool has_nets() const;
  // Whether any case is a dgrad or wgrad (the nets totals then add "<net> train").
  bool has_backward() const;
};

struct SummaryRow {
  std::string variant;
  std::vector<const Result*> per_case;  // null: not run
  double geomean_ms = kNaN;             // only when every case has a time
  double worst_ratio = kNaN;
  double classes_worst = kNaN;  // over the cases that ran --classes
  int passed = 0, failed = 0, errors = 0;  // n/a cases count in none of them
};

// One row per variant: those in variant_order first, then any that only have n/a results.
std::vector<SummaryRow> Summarize(const Results& results);

// One network's (or set's) convolutions in one forward pass: the sum over its layers of count x
// the layer's mean time.
struct NetTotal {
  std::string net;
  int layers = 0, convs = 0;
  double cudnn_ms = 0;  // NaN when a layer has no cuDNN time
  double auto_ms = 0;   // NaN when a layer has neither auto's time nor cuDNN's to stand in
  // Layers auto has no time for, counted at cuDNN's time instead: n/a (no algorithm takes the
  // layer yet) and errors; and layers timed whose output failed the fp64 bar.
  int auto_na_layers = 0, auto_na_convs = 0;
  int auto_error_layers = 0, auto_error_convs = 0;
  int auto_failed_layers = 0;
  // The layer where auto does worst against cuDNN: the least cuDNN ms / auto ms.
  double worst_vs_cudnn = kNaN;
  int worst_case = -1;
  std::string worst_module;
  double vs_cudnn() const { return cudnn_ms / auto_ms; }
};

// Per network of the cases' uses, in order of first use.
std::vector<NetTotal> NetTotals(const Results& results);

}  // namespace bench
}  // namespace conv2d

#endif  // CONV2D_TOOLS_BENCHMARK_RESULTS_H_
