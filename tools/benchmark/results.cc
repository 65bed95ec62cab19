#include "tools/benchmark/results.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace conv2d {
namespace bench {

const Result* Results::Find(const std::string& variant, size_t ci) const {
  auto it = by_variant_case.find({variant, static_cast<int>(ci)});
  return it == by_variant_case.end() ? nullptr : &it->second;
}

bool Results::has_nets() const {
  return std::any_of(cases.begin(), cases.end(), [](const Case& c) { return !c.uses.empty(); });
}

bool Results::has_backward() const {
  return std::any_of(cases.begin(), cases.end(),
                     [](const Case& c) { return c.shape.op != Op::kFprop; });
}

std::vector<SummaryRow> Summarize(const Results& results) {
  const size_t ncases = results.cases.size();
  std::vector<SummaryRow> rows;
  std::vector<std::string> variants = results.variant_order;
  for (const auto& kv : results.by_variant_case) {  // variants that never ran (n/a everywhere) still get a row
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
      const Result* r = results.Find(v, ci);
      row.per_case.push_back(r);
      if (r == nullptr) continue;
      if (!r->error.empty()) {
        if (!r->not_applicable()) ++row.errors;
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

std::vector<NetTotal> NetTotals(const Results& results) {
  std::vector<NetTotal> totals;
  for (size_t ci = 0; ci < results.cases.size(); ++ci) {
    const Result* cudnn = results.Find(kCudnn, ci);
    const Result* au = results.Find(kAuto, ci);
    const bool cudnn_timed = cudnn != nullptr && cudnn->error.empty();
    const bool auto_timed = au != nullptr && au->error.empty();
    const Op op = results.cases[ci].shape.op;
    for (const NetUse& u : results.cases[ci].uses) {
      // The forward's rows are named by the network alone, as before the backward; each other
      // operation has its own. When the run has the backward, "<net> backward" sums dgrad and
      // wgrad and "<net> train" all three, as a training step computes them: without the input
      // layer's dgrad (NetUse::input), which "<net> dgrad" still lists.
      std::vector<std::string> keys = {op == Op::kFprop ? u.net : absl::StrCat(u.net, " ", OpName(op))};
      if (results.has_backward() && !(op == Op::kDgrad && u.input)) {
        if (op != Op::kFprop) keys.push_back(absl::StrCat(u.net, " backward"));
        keys.push_back(absl::StrCat(u.net, " train"));
      }
      for (const std::string& key : keys) {
      auto t = std::find_if(totals.begin(), totals.end(),
                            [&](const NetTotal& n) { return n.net == key; });
      if (t == totals.end()) t = totals.insert(totals.end(), NetTotal{key});
      ++t->layers;
      t->convs += u.count;
      t->cudnn_ms += cudnn_timed ? u.count * cudnn->ms : kNaN;
      if (auto_timed) {
        t->auto_ms += u.count * au->ms;
        if (!au->pass) ++t->auto_failed_layers;
        const double vs = cudnn_timed ? cudnn->ms / au->ms : kNaN;
        if (!std::isnan(vs) && (std::isnan(t->worst_vs_cudnn) || vs < t->worst_vs_cudnn)) {
          t->worst_vs_cudnn = vs;
          t->worst_case = static_cast<int>(ci);
          t->worst_module = u.module;
        }
      } else {
        // No time of auto's (n/a, an error, or filtered out by --variants): cuDNN's stands in, so
        // that the total still covers the whole forward pass; the row says how much is so.
        t->auto_ms += cudnn_timed ? u.count * cudnn->ms : kNaN;
        const bool na = au != nullptr && au->not_applicable();
        ++(na ? t->auto_na_layers : t->auto_error_layers);
        (na ? t->auto_na_convs : t->auto_error_convs) += u.count;
      }
      }
    }
  }
  return totals;
}

}  // namespace bench
}  // namespace conv2d
