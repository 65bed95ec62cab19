#include "tools/benchmark/report_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "conv/conv.h"

namespace conv2d {
namespace bench {
namespace {

// A result's cell in the summaries: its time ('!' when it failed the bar), n/a, ERROR, or '-'.
std::string Cell(const Result* res) {
  if (res == nullptr) return "-";
  if (!res->error.empty()) return res->not_applicable() ? "n/a" : "ERROR";
  return absl::StrFormat("%.3f%s", res->ms, res->pass ? "" : "!");
}

std::string Num(double v, const char* fmt) {
  return std::isnan(v) ? std::string("-") : absl::StrFormat(fmt, v);
}

std::string PassCell(const SummaryRow& r) {
  const int tried = r.passed + r.failed + r.errors;
  return tried == 0 ? "-"
         : r.passed == tried
             ? absl::StrCat("yes (", tried, ")")
             : absl::StrCat("NO (", r.failed, " failed, ", r.errors, " errors)");
}

// auto's reason for not taking a shape, short enough to print: Plan's "no algorithm implements
// <shape>: a: a does not implement padding; b: ..." without the shape's name and with the
// algorithms that give one reason named together ("does not implement padding: a, b"), so that
// layers refused alike share one reason. Any other text is returned as it is (the JSON keeps the
// full one either way).
std::string ShortReason(absl::string_view why) {
  absl::ConsumePrefix(&why, "n/a: ");
  constexpr absl::string_view kPrefix = "no algorithm implements ";
  if (!absl::StartsWith(why, kPrefix)) return std::string(why);
  const size_t list = why.find(": ", kPrefix.size());
  if (list == absl::string_view::npos) return std::string(why);
  std::vector<std::pair<std::string, std::vector<std::string>>> grouped;  // reason, algorithms
  for (absl::string_view item : absl::StrSplit(why.substr(list + 2), "; ")) {
    const std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits(": ", 1));
    absl::string_view reason = kv.second;
    absl::ConsumePrefix(&reason, absl::StrCat(kv.first, " "));  // "a does not ..." -> "does not"
    auto it = std::find_if(grouped.begin(), grouped.end(),
                           [&](const auto& g) { return g.first == reason; });
    if (it == grouped.end()) it = grouped.insert(grouped.end(), {std::string(reason), {}});
    it->second.emplace_back(kv.first);
  }
  return absl::StrCat("no algorithm implements the shape: ",
                      absl::StrJoin(grouped, "; ", [](std::string* out, const auto& g) {
                        absl::StrAppend(out, g.first, " (", absl::StrJoin(g.second, ", "), ")");
                      }));
}

// "resnet50 layer1.0.conv3 x4", and any other network's use after a '+'.
std::string UsesText(const std::vector<NetUse>& uses) {
  if (uses.empty()) return "-";
  return absl::StrJoin(uses, " + ", [](std::string* out, const NetUse& u) {
    absl::StrAppend(out, u.net, " ", u.module, " x", u.count);
  });
}

// The nets suite's per-layer table (one row per case, one column per variant) and the
// per-variant tally, in place of the per-case columns, which would run past 80 cases wide.
void PrintNetsTable(const Results& results, const std::vector<SummaryRow>& rows) {
  const std::vector<Case>& cases = results.cases;
  // Columns sized to their widest entry: the table is wide (a column per variant) but aligned.
  size_t layer_w = 5, shape_w = 5;
  for (const Case& c : cases) {
    layer_w = std::max(layer_w, UsesText(c.uses).size());
    shape_w = std::max(shape_w, c.shape.ToString().size());
  }
  std::string line = absl::StrFormat("%4s %-*s %-*s %8s", "#", static_cast<int>(layer_w), "layer",
                                     static_cast<int>(shape_w), "shape", "GFLOP");
  for (const SummaryRow& r : rows) {
    absl::StrAppend(&line, absl::StrFormat(" %*s", static_cast<int>(std::max<size_t>(9, r.variant.size())),
                                           r.variant));
  }
  absl::StrAppend(&line, absl::StrFormat(" %8s  %s", "vs_cudnn", "auto's choice"));
  std::printf("%s\n", line.c_str());
  // auto's reasons for n/a, each once, numbered: the full text is long (every algorithm's reason).
  std::vector<std::string> reasons;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    line = absl::StrFormat("%4s %-*s %-*s %8.3f", absl::StrCat("#", ci + 1),
                           static_cast<int>(layer_w), UsesText(c.uses), static_cast<int>(shape_w),
                           c.shape.ToString(), c.shape.flops() * 1e-9);
    const Result* auto_result = nullptr;
    for (const SummaryRow& r : rows) {
      const Result* res = r.per_case[ci];
      if (r.variant == kAuto) auto_result = res;
      absl::StrAppend(&line, absl::StrFormat(" %*s", static_cast<int>(std::max<size_t>(9, r.variant.size())),
                                             Cell(res)));
    }
    std::string choice = "-";
    double vs = kNaN;
    if (auto_result != nullptr && auto_result->error.empty()) {
      choice = auto_result->label;
      vs = auto_result->speedup;
    } else if (auto_result != nullptr && auto_result->not_applicable()) {
      const std::string reason = ShortReason(auto_result->error);
      auto it = std::find(reasons.begin(), reasons.end(), reason);
      if (it == reasons.end()) it = reasons.insert(reasons.end(), reason);
      choice = absl::StrCat("n/a [", it - reasons.begin() + 1, "]");
    } else if (auto_result != nullptr) {
      choice = "ERROR (see the benchmark line)";
    }
    absl::StrAppend(&line, absl::StrFormat(" %8s  %s", Num(vs, "%.2fx"), choice));
    std::printf("%s\n", line.c_str());
  }
  for (size_t i = 0; i < reasons.size(); ++i) {
    std::printf("  [%zu] auto n/a: %s\n", i + 1, reasons[i].c_str());
  }
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Result* cudnn = results.Find(kCudnn, ci);
    if (cudnn != nullptr && cudnn->not_applicable()) {
      std::printf("  #%zu cudnn %s\n", ci + 1, cudnn->error.c_str());
    }
  }
  std::printf("('!' after a time: that case failed the fp64 bar; n/a: the variant cannot take the "
              "shape; ERROR: see the benchmark line; vs_cudnn: cuDNN ms / auto ms)\n");
  // The per-variant tally of the cases above.
  size_t width = 8;
  for (const SummaryRow& r : rows) width = std::max(width, r.variant.size());
  std::printf("%-*s %9s %11s %8s  %s\n", static_cast<int>(width), "variant", "timed",
              "worst_ratio", "classes", "pass");
  for (const SummaryRow& r : rows) {
    const int timed = r.passed + r.failed;
    std::printf("%-*s %9s %11s %8s  %s\n", static_cast<int>(width), r.variant.c_str(),
                absl::StrCat(timed, "/", cases.size()).c_str(), Num(r.worst_ratio, "%.3f").c_str(),
                Num(r.classes_worst, "%.3g").c_str(), PassCell(r).c_str());
  }
}

// Per network: the forward pass's totals, for auto and for cuDNN.
void PrintNetTotals(const Results& results) {
  std::printf("\nPer network, the convolutions of one forward pass (batch %lld, 224x224 input; the "
              "large-kernel set at its own sizes): the sum over its layers of count x mean ms; "
              "vs_cudnn = cuDNN ms / auto ms\n",
              static_cast<long long>(kNetsBatch));
  std::printf("%-16s %6s %5s %10s %11s %8s  %s\n", "network", "layers", "convs", "cudnn_ms",
              "auto_ms", "vs_cudnn", "auto's worst layer (vs_cudnn)");
  for (const NetTotal& t : NetTotals(results)) {
    const bool stand_in = t.auto_na_layers + t.auto_error_layers > 0;
    const std::string worst =
        t.worst_case < 0 ? "-"
                         : absl::StrFormat("%.2fx #%d %s", t.worst_vs_cudnn, t.worst_case + 1,
                                           t.worst_module);
    std::printf("%-16s %6d %5d %10s %11s %8s  %s\n", t.net.c_str(), t.layers, t.convs,
                Num(t.cudnn_ms, "%.3f").c_str(),
                absl::StrCat(stand_in ? "*" : "", Num(t.auto_ms, "%.3f")).c_str(),
                Num(t.vs_cudnn(), "%.2fx").c_str(), worst.c_str());
    if (t.auto_na_layers > 0) {
      std::printf("  * auto n/a on %d layer(s) (%d conv(s)): counted at cuDNN's time\n",
                  t.auto_na_layers, t.auto_na_convs);
    }
    if (t.auto_error_layers > 0) {
      std::printf("  * auto not timed (ERROR, or not run) on %d layer(s) (%d conv(s)): counted at "
                  "cuDNN's time\n",
                  t.auto_error_layers, t.auto_error_convs);
    }
    if (t.auto_failed_layers > 0) {
      std::printf("  ! auto failed the fp64 bar on %d layer(s) (timed, counted)\n",
                  t.auto_failed_layers);
    }
  }
  std::printf("(cudnn_ms '-': a layer has no cuDNN time; auto_ms '-': a layer has neither auto's "
              "nor cuDNN's)\n");
}

}  // namespace

void PrintSummary(const Results& results, const Options& options) {
  const std::vector<Case>& cases = results.cases;
  std::vector<SummaryRow> rows = Summarize(results);
  double cudnn_geo = kNaN;
  for (const SummaryRow& r : rows) {
    if (r.variant == kCudnn) cudnn_geo = r.geomean_ms;
  }
  std::printf("\nSummary: mean ms per case (%d calls after %d warm-up, L2 flushed before each; "
              "error vs fp64 at <= %lld positions, bar |y-y64| <= 1e-3 + 1e-3|y64|)\n",
              options.calls, options.warmup, static_cast<long long>(options.positions));
  if (results.has_nets()) {
    PrintNetsTable(results, rows);
  } else {
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      std::printf("  #%zu %-28s %8.2f GFLOP\n", ci + 1, cases[ci].shape.ToString().c_str(),
                  cases[ci].shape.flops() * 1e-9);
    }
    size_t width = 8;
    for (const SummaryRow& r : rows) width = std::max(width, r.variant.size());
    std::string line = absl::StrFormat("%-*s", static_cast<int>(width), "variant");
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      absl::StrAppend(&line, absl::StrFormat(" %9s", absl::StrCat("#", ci + 1)));
    }
    absl::StrAppend(&line, absl::StrFormat(" %9s %8s %11s %8s  %s", "geomean", "vs_cudnn",
                                           "worst_ratio", "classes", "pass"));
    std::printf("%s\n", line.c_str());
    for (const SummaryRow& r : rows) {
      line = absl::StrFormat("%-*s", static_cast<int>(width), r.variant);
      for (const Result* res : r.per_case) absl::StrAppend(&line, absl::StrFormat(" %9s", Cell(res)));
      absl::StrAppend(&line, absl::StrFormat(" %9s %8s %11s %8s  %s", Num(r.geomean_ms, "%.3f"),
                                             Num(cudnn_geo / r.geomean_ms, "%.2fx"),
                                             Num(r.worst_ratio, "%.3f"),
                                             Num(r.classes_worst, "%.3g"), PassCell(r)));
      std::printf("%s\n", line.c_str());
    }
    std::printf("('!' after a time: that case failed the fp64 bar; n/a: the variant cannot take the "
                "shape; ERROR: see the benchmark line; geomean only when every case ran; classes: "
                "the worst ratio over every output of the input classes beyond randn, --classes, "
                "which pass does not count: see conv.h for each algorithm's domain)\n");
  }
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
  if (results.has_nets()) PrintNetTotals(results);
  std::fflush(stdout);
}

void PrintCases(const std::vector<Case>& cases, const Variant& baseline) {
  std::map<std::string, std::pair<int, int>> per_net;  // layers, convs
  std::vector<std::string> order;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    absl::StatusOr<std::string> choice = ChooseAlgorithm(c.shape);
    const Verdict base = baseline.Consider(c.shape, /*time_oracles=*/true);
    std::printf("#%-3zu %-40s %-44s %9.3f GFLOP  auto: %s  %s: %s\n", ci + 1,
                UsesText(c.uses).c_str(), c.shape.ToString().c_str(), c.shape.flops() * 1e-9,
                choice.ok() ? choice->c_str()
                            : absl::StrCat("n/a (", ShortReason(choice.status().message()), ")")
                                  .c_str(),
                baseline.name().c_str(),
                base.kind == Verdict::kTime ? "yes"
                                            : absl::StrCat("n/a (", base.why.message(), ")").c_str());
    for (const NetUse& u : c.uses) {
      if (!per_net.count(u.net)) order.push_back(u.net);
      ++per_net[u.net].first;
      per_net[u.net].second += u.count;
    }
  }
  for (const std::string& net : order) {
    std::printf("%s: %d distinct layers, %d conv layers\n", net.c_str(), per_net[net].first,
                per_net[net].second);
  }
}

}  // namespace bench
}  // namespace conv2d
