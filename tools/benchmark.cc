// The project's benchmark: every registered algorithm, "auto" and cuDNN fp32 on the KernelBot
// conv2d suite (or the "cnn" or "nets" suite, or shapes from flags), timed as KernelBot times
// them, with each variant's error against fp64 truth next to its time.
//
//   bazel run //tools:benchmark -- [--suite=kernelbot|cnn|nets] [--shape=SHAPE[;...]]
//       [--variants=cudnn,auto,...] [--calls=20] [--warmup=2] [--cooldown=1] [--positions=4096]
//       [--seed=1] [--inputs=normal|uniform] [--include_oracle] [--json_out=FILE] [--list]
//       [Google Benchmark flags, e.g. --benchmark_out=F]        (--help: every flag)
//
// SHAPE is B,Cin,Cout,H,W,Kh,Kw, optionally followed by any of (in any order, F.conv2d's meaning:
// conv/shape.h)
//   ,pad=P | ,pad=PH:PW | ,pad=T:B:L:R    zero padding: all sides; rows:columns; each side
//   ,stride=S | ,stride=SH:SW
//   ,dilation=D | ,dilation=DH:DW
//   ,groups=G                             w is [Cout, Cin/G, Kh, Kw]
//   ,bias                                 y += bias[o]
// e.g. --shape=32,96,96,56,56,7,7,pad=3,groups=96,bias (ConvNeXt-T's first depthwise layer).
//
// --suite=nets: every distinct Conv2d layer of torchvision's ResNet-50, ConvNeXt-T and
// EfficientNet-B0 at batch 32 on 224x224 images (kNetLayers in tools/benchmark/suites.cc, with
// how many of each a network has; tools/nets_layers.py checks it against torchvision), and two
// large-kernel depthwise layers.
// After the per-layer table it prints, per network, the convolutions' time of one forward pass
// (sum of count x mean ms) for auto and for cuDNN, their ratio, and auto's worst layer. A layer
// auto cannot take yet is listed as n/a and counted in the total at cuDNN's time, marked '*'.
//
// cuDNN (tools/cudnn_conv.h) takes every shape but asymmetric padding (n/a: its legacy API pads
// both sides alike); its bias is a cudnnAddTensor after the convolution, timed with it, as
// Plan::Run's time includes its bias pass. The accuracy check's fp64 reference includes the bias.
//
// Protocol per timed call (KernelBot's): 256 MB memset to flush L2, event, ONE call, event,
// synchronize; the mean over --calls calls after --warmup calls. Inputs are generated once per
// case. cuDNN runs first in each case so that every variant's speedup is against the cuDNN time
// of the same process. Without a CUDA device it times the CPU reference instead, and says so.
//
// This file holds the flags (Abseil's --help lists only those of the file named after the
// binary) and main; the pieces are in tools/benchmark/: command_line (--shape's syntax, the split
// from Google Benchmark's flags), suites (the case lists), variants (cuDNN, the algorithms, auto),
// runner (timing and checks on the GPU), results (what a run produced, summarised), report_text
// and report_json, cpu_fallback.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "benchmark/benchmark.h"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"
#include "conv/shape.h"
#include "reference/random.h"
#include "tools/benchmark/command_line.h"
#include "tools/benchmark/cpu_fallback.h"
#include "tools/benchmark/report_json.h"
#include "tools/benchmark/report_text.h"
#include "tools/benchmark/results.h"
#include "tools/benchmark/runner.h"
#include "tools/benchmark/suites.h"
#include "tools/benchmark/variants.h"
#include "tools/lab/lab.h"

ABSL_FLAG(std::optional<std::string>, suite, std::nullopt,
          "kernelbot|cnn|nets: the shape suite (default kernelbot: the 5 KernelBot cases; nets: "
          "every distinct conv layer of ResNet-50, ConvNeXt-T and EfficientNet-B0 at batch 32, "
          "224x224, and two large-kernel depthwise layers, with per-network totals)");
ABSL_FLAG(conv2d::bench::ShapeList, shape, {},
          "B,Cin,Cout,H,W,Kh,Kw[,pad=P|PH:PW|T:B:L:R][,stride=S|SH:SW][,dilation=D|DH:DW]"
          "[,groups=G][,bias]: a shape (options as F.conv2d's; e.g. "
          "32,96,96,56,56,7,7,pad=3,groups=96,bias); repeatable, or several separated by ';'. "
          "Replaces the suite unless --suite is also given");
ABSL_FLAG(std::string, op, "fprop",
          "fprop|dgrad|wgrad|train: the operation timed on every case (conv/shape.h's Op); train: "
          "all three, and the nets suite's totals per operation and their sum");
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
ABSL_FLAG(bool, list, false,
          "print the cases (with the nets suite's layers and counts), auto's choice for each (or "
          "why none takes it) and whether cuDNN takes it, then exit (with --json_out, write the "
          "cases' JSON rows too); needs no GPU");
ABSL_FLAG(bool, classes, true,
          "also run each variant (not cuDNN) once per case on every input class beyond randn "
          "(reference/input_classes.h: outliers, a large mean, huge, tiny, sparse, non-finite) and "
          "check every output against the GPU fp64 reference: the `classes` column");

namespace conv2d {
namespace bench {
namespace {

constexpr const char kUsage[] =
    "The conv2d benchmark: every registered algorithm, auto and cuDNN on the KernelBot suite (or\n"
    "the cnn or nets suite, or --shape), timed as KernelBot times them, with each error against\n"
    "fp64.\n"
    "  benchmark [flags] [Google Benchmark's --benchmark_* flags, e.g. --benchmark_out=FILE]";

// What Abseil's parser cannot check for itself.
absl::Status CheckFlags() {
  const std::optional<std::string> suite = absl::GetFlag(FLAGS_suite);
  if (suite.has_value()) RETURN_IF_ERROR(SuiteCases(*suite).status());
  RETURN_IF_ERROR(OpsFromFlag(absl::GetFlag(FLAGS_op)).status());
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

Options OptionsFromFlags() {
  Options o;
  for (const std::string& v : absl::GetFlag(FLAGS_variants)) {  // blanks dropped
    absl::string_view name = absl::StripAsciiWhitespace(v);
    if (!name.empty()) o.variants.emplace_back(name);
  }
  o.include_oracle = absl::GetFlag(FLAGS_include_oracle);
  o.inputs = absl::GetFlag(FLAGS_inputs);
  o.calls = absl::GetFlag(FLAGS_calls);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.cooldown_s = absl::GetFlag(FLAGS_cooldown);
  o.positions = absl::GetFlag(FLAGS_positions);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.classes = absl::GetFlag(FLAGS_classes);
  return o;
}

// --shape's cases follow the suite's when --suite is given too, else replace them.
absl::StatusOr<std::vector<Case>> CasesFromFlags() {
  std::vector<Case> cases;
  const std::vector<Shape> given = absl::GetFlag(FLAGS_shape).shapes;
  const std::optional<std::string> suite = absl::GetFlag(FLAGS_suite);
  if (given.empty() || suite.has_value()) {
    ASSIGN_OR_RETURN(cases, SuiteCases(suite.value_or(SuiteNames().front())));
  }
  for (const Shape& s : given) cases.push_back(Case{s, {}});
  ASSIGN_OR_RETURN(std::vector<Op> ops, OpsFromFlag(absl::GetFlag(FLAGS_op)));
  cases = ForOps(cases, ops);
  AssignSeeds(absl::GetFlag(FLAGS_seed), &cases);
  return cases;
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
  absl::StatusOr<std::vector<Case>> cases = CasesFromFlags();
  if (!cases.ok()) {  // CheckFlags has seen the suite's name: not expected
    std::fprintf(stderr, "%s\n", cases.status().ToString().c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_list)) {
    PrintCases(*cases, *MakeBaseline());
    if (json_out.empty()) return 0;
    if (absl::Status written = WriteCasesJson(json_out, *cases); !written.ok()) {
      std::fprintf(stderr, "%s\n", written.ToString().c_str());
      return 1;
    }
    return 0;
  }
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
    return RunCpuReference(argc, argv);
  }

  cudaDeviceProp prop;
  st = CudaStatus(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  const std::string device = absl::StrFormat("%s (sm_%d%d, %d SMs)", prop.name, prop.major,
                                             prop.minor, prop.multiProcessorCount);
  benchmark::AddCustomContext("device", device);
  const std::string cudnn_version = BaselineVersion();
  const Options options = OptionsFromFlags();
  benchmark::AddCustomContext("cudnn", cudnn_version);
  benchmark::AddCustomContext("protocol",
                              absl::StrCat("KernelBot: 256 MB L2 flush, events around one call, ",
                                           options.calls, " calls after ", options.warmup,
                                           " warm-up"));
  std::vector<std::string> variants;
  for (const auto& v : AllVariants()) variants.push_back(v->name());
  std::fprintf(stderr, "device %s, cuDNN %s, %zu case(s), variants: %s\n", device.c_str(),
               cudnn_version.c_str(), cases->size(), absl::StrJoin(variants, ", ").c_str());

  Runner bench(*std::move(cases), options);
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
  PrintSummary(bench.results(), options);
  if (!json_out.empty()) {
    st = WriteJson(json_out, device, cudnn_version, bench.results(), options);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "wrote %s\n", json_out.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace conv2d

int main(int argc, char** argv) { return conv2d::bench::Main(argc, argv); }
