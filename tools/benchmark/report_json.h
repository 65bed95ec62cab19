// The benchmark's JSON (--json_out): the settings, one row per case and per (variant, case)
// result, the per-variant summary and, for the nets suite, the per-network totals. tools/fit_auto.py
// and tools/nets_layers.py read it, and docs/data keeps such files, so its layout is fixed: one
// row per line.
#ifndef CONV2D_TOOLS_BENCHMARK_REPORT_JSON_H_
#define CONV2D_TOOLS_BENCHMARK_REPORT_JSON_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/benchmark/results.h"
#include "tools/benchmark/suites.h"

namespace conv2d {
namespace bench {

// After a run on `device`, with the baseline library at `cudnn_version`.
absl::Status WriteJson(const std::string& path, const std::string& device,
                       const std::string& cudnn_version, const Results& results,
                       const Options& options);

// --list's: the cases' rows alone (tools/nets_layers.py reads the nets table from them where the
// source is not at hand).
absl::Status WriteCasesJson(const std::string& path, const std::vector<Case>& cases);

}  // namespace bench
}  // namespace conv2d

#endif  // CONV2D_TOOLS_BENCHMARK_REPORT_JSON_H_
