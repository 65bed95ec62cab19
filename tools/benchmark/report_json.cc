#include "tools/benchmark/report_json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "reference/reference.h"

namespace conv2d {
namespace bench {
namespace {

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

// One case's row of the JSON's "cases": its shape, every geometry field (defaults included, so
// that each row reads the same way), and in the nets suite the networks that have it.
nlohmann::ordered_json CaseJson(int ci, const Case& c) {
  using Json = nlohmann::ordered_json;
  const Shape& s = c.shape;
  Json row = {{"case", ci + 1},
              {"name", s.ToString()},
              {"batch", s.batch},
              {"in_channels", s.in_channels},
              {"out_channels", s.out_channels},
              {"height", s.height},
              {"width", s.width},
              {"kernel_h", s.kernel_h},
              {"kernel_w", s.kernel_w},
              {"pad_top", s.pad_top},
              {"pad_bottom", s.pad_bottom},
              {"pad_left", s.pad_left},
              {"pad_right", s.pad_right},
              {"stride_h", s.stride_h},
              {"stride_w", s.stride_w},
              {"dilation_h", s.dilation_h},
              {"dilation_w", s.dilation_w},
              {"groups", s.groups},
              {"has_bias", s.has_bias},
              {"out_h", s.out_h()},
              {"out_w", s.out_w()},
              {"seed", c.seed},
              {"gflop", Sig9(s.flops() * 1e-9)}};
  for (const NetUse& u : c.uses) {
    row["uses"].push_back({{"network", u.net}, {"module", u.module}, {"count", u.count}});
  }
  return row;
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return absl::DataLossError(absl::StrCat("writing ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteJson(const std::string& path, const std::string& device,
                       const std::string& cudnn_version, const Results& results,
                       const Options& options) {
  using Json = nlohmann::ordered_json;
  Json j;
  j["device"] = device;
  j["cudnn_version"] = cudnn_version;
  j["calls"] = options.calls;
  j["warmup"] = options.warmup;
  j["cooldown_s"] = Sig9(options.cooldown_s);
  j["positions"] = options.positions;
  j["inputs"] = DistributionName(options.inputs);
  j["seed"] = options.seed;
  j["atol"] = Sig9(kAbsTol);
  j["rtol"] = Sig9(kRelTol);
  j["cases"] = Json::array();
  for (size_t ci = 0; ci < results.cases.size(); ++ci) {
    j["cases"].push_back(CaseJson(static_cast<int>(ci), results.cases[ci]));
  }
  j["results"] = Json::array();
  for (const auto& kv : results.by_variant_case) {
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
  for (const SummaryRow& r : Summarize(results)) {
    j["summary"].push_back({{"variant", r.variant},
                            {"geomean_ms", Sig9(r.geomean_ms)},
                            {"worst_ratio", Sig9(r.worst_ratio)},
                            {"classes_worst_ratio", Sig9(r.classes_worst)},
                            {"cases_passed", r.passed},
                            {"cases_failed", r.failed},
                            {"cases_errors", r.errors},
                            {"pass", r.passed > 0 && r.failed + r.errors == 0}});
  }
  if (results.has_nets()) {
    j["nets"] = Json::array();
    for (const NetTotal& t : NetTotals(results)) {
      j["nets"].push_back({{"network", t.net},
                           {"layers", t.layers},
                           {"convs", t.convs},
                           {"cudnn_ms", Sig9(t.cudnn_ms)},
                           {"auto_ms", Sig9(t.auto_ms)},
                           {"vs_cudnn", Sig9(t.vs_cudnn())},
                           {"auto_na_layers", t.auto_na_layers},
                           {"auto_na_convs", t.auto_na_convs},
                           {"auto_error_layers", t.auto_error_layers},
                           {"auto_error_convs", t.auto_error_convs},
                           {"auto_failed_layers", t.auto_failed_layers},
                           {"worst_vs_cudnn", Sig9(t.worst_vs_cudnn)},
                           {"worst_case", t.worst_case < 0 ? Json(nullptr) : Json(t.worst_case + 1)},
                           {"worst_module", t.worst_module}});
    }
  }
  return WriteText(path, Layout(j));
}

absl::Status WriteCasesJson(const std::string& path, const std::vector<Case>& cases) {
  nlohmann::ordered_json j;
  j["cases"] = nlohmann::ordered_json::array();
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    j["cases"].push_back(CaseJson(static_cast<int>(ci), cases[ci]));
  }
  return WriteText(path, Layout(j));
}

}  // namespace bench
}  // namespace conv2d
