// The regression tool: runs variants on every golden file and checks them against fp64 truth.
//
//   regress [--testdata=DIR] [--variants=all|reference|NAME,NAME] [--filter=SUBSTRING]
//           [--skip_oracle_above=MACS]
//
// --skip_oracle_above skips reference-only GPU variants (the fp64 "direct" oracle) on golden files
// of more multiply-adds than MACS; used under compute-sanitizer, where the oracle is slow.
//
// A variant that does not take a file's shape (a part of the geometry it does not compute, a kernel
// size it has no kernel for: Unimplemented from Propose / Plan::Create) gets a SKIP line with the
// reason, as does one outside its accuracy domain on a class file; both are counted.
//
// With a GPU, "all" (the default) is every registered variant. With no GPU the default is CPU
// mode: the golden files are checked against the CPU reference recomputed from their seeds, which
// proves the files, the generator and the reference agree. Exits non-zero on any failure.
#include <cuda_runtime_api.h>
#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "conv/conv.h"
#include "conv/core/registry.h"
#include "conv/testing/testbed.h"
#include "tools/lab/lab.h"
#include "reference/random.h"
#include "reference/reference.h"
#include "tools/golden.h"

ABSL_FLAG(std::string, testdata, "testdata", "DIR: where the .golden files are");
ABSL_FLAG(std::string, variants, "",
          "all|reference|NAME,NAME: what runs (default: all with a GPU, reference without)");
ABSL_FLAG(std::string, filter, "", "SUBSTRING: only the golden files whose name has it");
ABSL_FLAG(double, skip_oracle_above, -1,
          "MACS: skip reference-only GPU variants on golden files of more multiply-adds (< 0: "
          "none)");

namespace conv2d {
namespace {

std::vector<std::string> GoldenFiles(const std::string& dir, const std::string& filter) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 7 && name.substr(name.size() - 7) == ".golden" &&
          name.find(filter) != std::string::npos) {
        files.push_back(dir + "/" + name);
      }
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The variant's output on the golden problem (bias included when the shape has one). A GPU
// variant's Plan::Create error comes back as is, so that a refusal (Unimplemented: a part of the
// geometry it does not compute) is told apart from a failure.
absl::StatusOr<std::vector<float>> RunVariant(const Golden& g, const std::string& variant) {
  GoldenTensors in = GoldenInputs(g);
  if (variant == "reference") {
    std::vector<double> y = g.positions.empty() ? Reference(g.shape, in.inputs())
                                                : ReferenceAt(g.shape, in.inputs(), g.positions);
    return std::vector<float>(y.begin(), y.end());
  }
  absl::StatusOr<DeviceProblem> problem =
      DeviceProblem::FromHost(g.shape, std::move(in.x), std::move(in.w), std::move(in.bias),
                              std::move(in.dy));
  if (!problem.ok()) return problem.status();
  return RunOnce(*problem, variant, g.positions);
}

}  // namespace
}  // namespace conv2d

int main(int argc, char** argv) {
  using namespace conv2d;
  // The lab's baselines are checked against the golden files like the library's algorithms.
  if (absl::Status lab = RegisterLabAlgorithms(); !lab.ok()) {
    std::fprintf(stderr, "%s\n", lab.ToString().c_str());
    return 2;
  }
  absl::SetProgramUsageMessage(
      "Checks variants against the golden files. regress [--testdata=DIR] "
      "[--variants=all|reference|NAME,...] [--filter=SUBSTRING] [--skip_oracle_above=MACS]");
  if (absl::ParseCommandLine(argc, argv).size() > 1) {
    std::fprintf(stderr, "regress takes flags only (--help lists them)\n");
    return 2;
  }
  const std::string testdata = absl::GetFlag(FLAGS_testdata);
  const std::string filter = absl::GetFlag(FLAGS_filter);
  const double skip_oracle_above = absl::GetFlag(FLAGS_skip_oracle_above);
  std::string variants_flag = absl::GetFlag(FLAGS_variants);
  int devices = 0;
  const bool have_gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  if (variants_flag.empty()) variants_flag = have_gpu ? "all" : "reference";
  std::vector<std::string> variants;
  if (variants_flag == "all") {
    variants = Algorithms();
  } else {
    variants = absl::StrSplit(variants_flag, ',', absl::SkipEmpty());
  }
  if (!have_gpu) {
    std::printf("NOTE: no CUDA device on this machine: CPU mode. Only the 'reference' variant can "
                "run here; GPU variants are checked by the GPU bundle on a GPU host.\n");
  }
  const auto files = GoldenFiles(testdata, filter);
  if (files.empty()) {
    std::fprintf(stderr, "no .golden files in %s (filter '%s')\n", testdata.c_str(),
                 filter.c_str());
    return 1;
  }
  int passed = 0, failed = 0, skipped = 0;
  for (const std::string& file : files) {
    absl::StatusOr<Golden> g = ReadGolden(file);
    if (!g.ok()) {
      std::printf("FAIL %-14s %s: %s\n", "(read)", file.c_str(), g.status().ToString().c_str());
      ++failed;
      continue;
    }
    const std::string name = file.substr(file.rfind('/') + 1);
    for (const std::string& v : variants) {
      const Algorithm* algo = Registry::Global().Find(v);
      // Skips (and says why) when `s` is not OK.
      auto skip = [&](const absl::Status& s, const char* why) {
        if (s.ok()) return false;
        std::printf("SKIP %-14s %-42s (%s: %s)\n", v.c_str(), name.c_str(), why,
                    std::string(s.message()).c_str());
        ++skipped;
        return true;
      };
      if (algo != nullptr && skip(algo->CanImplement(g->shape), "does not take this shape")) {
        continue;
      }
      // Beyond randn, only where the variant promises the bar (conv.h; auto's picks are there).
      if (g->input_class != InputClass::kRandn && algo != nullptr &&
          skip(algo->MeetsContract(g->shape), "outside its accuracy domain")) {
        continue;
      }
      if (skip_oracle_above >= 0 && algo != nullptr &&
          !std::isfinite(algo->EstimateSeconds(g->shape)) &&
          g->shape.flops() / 2 > skip_oracle_above) {
        std::printf("SKIP %-14s %-42s (oracle, above --skip_oracle_above)\n", v.c_str(),
                    name.c_str());
        ++skipped;
        continue;
      }
      absl::StatusOr<std::vector<float>> y = RunVariant(*g, v);
      // Plan::Create's refusal on this device (as CanImplement's above, on the model device):
      // the geometry, or the shape, is not one the variant computes.
      if (!y.ok() && y.status().code() == absl::StatusCode::kUnimplemented &&
          skip(y.status(), "unimplemented on this device")) {
        continue;
      }
      if (!y.ok()) {
        std::printf("FAIL %-14s %-42s %s\n", v.c_str(), name.c_str(),
                    y.status().ToString().c_str());
        ++failed;
        continue;
      }
      const Comparison c = g->input_class == InputClass::kRandn
                               ? Compare(*y, g->values, g->positions, g->atol, g->rtol)
                               : CompareClass(v, g->input_class, *std::move(y), g->values);
      std::printf("%s %-14s %-42s n=%-8lld max_abs=%.3e rms=%.3e worst_ratio=%.4f\n",
                  c.ok() ? "PASS" : "FAIL", v.c_str(), name.c_str(),
                  static_cast<long long>(c.checked), c.max_abs_error, c.rms_error,
                  c.worst_ratio);
      if (!c.ok()) {
        std::printf("     first failure at flat output index %lld (%lld failures)\n",
                    static_cast<long long>(c.first_failure), static_cast<long long>(c.failures));
      }
      (c.ok() ? passed : failed)++;
    }
    std::fflush(stdout);
  }
  std::printf("regress: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
