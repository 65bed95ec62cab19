// The benchmark's reports on stdout: the summary after a run (a column per case, or for the nets
// suite a row per layer and the per-network totals), and --list's cases.
#ifndef CONV2D_TOOLS_BENCHMARK_REPORT_TEXT_H_
#define CONV2D_TOOLS_BENCHMARK_REPORT_TEXT_H_

#include <vector>

#include "tools/benchmark/results.h"
#include "tools/benchmark/suites.h"
#include "tools/benchmark/variants.h"

namespace conv2d {
namespace bench {

void PrintSummary(const Results& results, const Options& options);

// --list: each case, auto's choice for it on the model device (DeviceInfo::ModelDevice, so no
// device is needed) or why none takes it, and whether `baseline` takes it; then the networks'
// layer counts.
void PrintCases(const std::vector<Case>& cases, const Variant& baseline);

}  // namespace bench
}  // namespace conv2d

#endif  // CONV2D_TOOLS_BENCHMARK_REPORT_TEXT_H_
