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
// EfficientNet-B0 at batch 32 on 224x224 images (kNetLayers below, with how many of each a network
// has; tools/nets_layers.py checks it against torchvision), and two large-kernel depthwise layers.
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
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
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
#include "conv/core/device_buffer.h"
#include "conv/core/registry.h"
#include "conv/core/status_macros.h"
#include "conv/core/timing.h"
#include "conv/shape.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "reference/input_classes.h"
#include "nlohmann/json.hpp"
#include "reference/random.h"
#include "reference/reference.h"
#include "tools/cudnn_conv.h"
#include "tools/lab/lab.h"

namespace conv2d {
namespace {

// --shape's value: shapes separated by ';', each B,Cin,Cout,H,W,Kh,Kw[,option...] (the file's
// header comment lists the options).
struct ShapeList {
  std::vector<Shape> shapes;
};

constexpr const char kShapeSyntax[] =
    "B,Cin,Cout,H,W,Kh,Kw[,pad=P|PH:PW|T:B:L:R][,stride=S|SH:SW][,dilation=D|DH:DW][,groups=G]"
    "[,bias]";

// An option's value: integers separated by ':', as many as one of `counts` allows.
absl::StatusOr<std::vector<int64_t>> ParseInts(absl::string_view option, absl::string_view value,
                                               std::initializer_list<size_t> counts) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(value, ':')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shape: ", option, "=", value, ": '", part, "' is no integer"));
    }
    out.push_back(v);
  }
  if (std::find(counts.begin(), counts.end(), out.size()) == counts.end()) {
    return absl::InvalidArgumentError(absl::StrCat("--shape: ", option, "=", value, " takes ",
                                                   absl::StrJoin(counts, " or "),
                                                   " values separated by ':'"));
  }
  return out;
}

absl::StatusOr<Shape> ParseShape(absl::string_view text) {
  std::vector<std::string> parts = absl::StrSplit(text, ',', absl::SkipWhitespace());
  int64_t v[7];
  if (parts.size() < 7) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shape wants ", kShapeSyntax, ", got '", text, "'"));
  }
  for (int i = 0; i < 7; ++i) {
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(parts[i]), &v[i])) {
      return absl::InvalidArgumentError(absl::StrCat("--shape: '", parts[i], "' is no integer"));
    }
  }
  Shape s{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
  std::vector<std::string> seen;  // an option given twice is a typo, not an override
  for (size_t i = 7; i < parts.size(); ++i) {
    const absl::string_view part = absl::StripAsciiWhitespace(parts[i]);
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    const std::string key(absl::StripAsciiWhitespace(kv.first));
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--shape: ", key, " given twice in '", text,
                                                     "'"));
    }
    seen.push_back(key);
    if (key == "bias" && !absl::StrContains(part, '=')) {
      s.has_bias = true;
    } else if (key == "pad") {
      ASSIGN_OR_RETURN(std::vector<int64_t> p, ParseInts(key, kv.second, {1, 2, 4}));
      if (p.size() == 1) p = {p[0], p[0], p[0], p[0]};
      if (p.size() == 2) p = {p[0], p[0], p[1], p[1]};  // rows:columns, as F.conv2d's (ph, pw)
      s.pad_top = p[0];
      s.pad_bottom = p[1];
      s.pad_left = p[2];
      s.pad_right = p[3];
    } else if (key == "stride" || key == "dilation") {
      ASSIGN_OR_RETURN(std::vector<int64_t> p, ParseInts(key, kv.second, {1, 2}));
      (key == "stride" ? s.stride_h : s.dilation_h) = p[0];
      (key == "stride" ? s.stride_w : s.dilation_w) = p.back();
    } else if (key == "groups") {
      ASSIGN_OR_RETURN(std::vector<int64_t> p, ParseInts(key, kv.second, {1}));
      s.groups = p[0];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--shape: unknown option '", part,
                                                     "'; the form is ", kShapeSyntax));
    }
  }
  RETURN_IF_ERROR(ValidateShape(s));
  return s;
}

// The inverse of ParseShape: the basic form as before, then only the options off their defaults.
std::string UnparseShape(const Shape& s) {
  std::string out = absl::StrJoin(
      {s.batch, s.in_channels, s.out_channels, s.height, s.width, s.kernel_h, s.kernel_w}, ",");
  if (s.padded()) {
    absl::StrAppend(&out, ",pad=", s.pad_top, ":", s.pad_bottom, ":", s.pad_left, ":",
                    s.pad_right);
  }
  if (s.strided()) absl::StrAppend(&out, ",stride=", s.stride_h, ":", s.stride_w);
  if (s.dilated()) absl::StrAppend(&out, ",dilation=", s.dilation_h, ":", s.dilation_w);
  if (s.grouped()) absl::StrAppend(&out, ",groups=", s.groups);
  if (s.has_bias) absl::StrAppend(&out, ",bias");
  return out;
}

// Abseil's flag parser finds these by argument-dependent lookup: in the namespace of the type.
bool AbslParseFlag(absl::string_view text, ShapeList* list, std::string* error) {
  list->shapes.clear();
  for (absl::string_view one : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    absl::StatusOr<Shape> s = ParseShape(one);
    if (!s.ok()) {
      *error = std::string(s.status().message());
      return false;
    }
    list->shapes.push_back(*s);
  }
  return true;
}

std::string AbslUnparseFlag(const ShapeList& list) {
  return absl::StrJoin(list.shapes, ";", [](std::string* out, const Shape& s) {
    absl::StrAppend(out, UnparseShape(s));
  });
}

}  // namespace

bool AbslParseFlag(absl::string_view text, Distribution* d, std::string* error) {
  if (text != "normal" && text != "uniform") {
    *error = "normal or uniform";
    return false;
  }
  *d = text == "normal" ? Distribution::kNormal : Distribution::kUniform;
  return true;
}

std::string AbslUnparseFlag(Distribution d) { return DistributionName(d); }

}  // namespace conv2d

ABSL_FLAG(std::optional<std::string>, suite, std::nullopt,
          "kernelbot|cnn|nets: the shape suite (default kernelbot: the 5 KernelBot cases; nets: "
          "every distinct conv layer of ResNet-50, ConvNeXt-T and EfficientNet-B0 at batch 32, "
          "224x224, and two large-kernel depthwise layers, with per-network totals)");
ABSL_FLAG(conv2d::ShapeList, shape, {},
          "B,Cin,Cout,H,W,Kh,Kw[,pad=P|PH:PW|T:B:L:R][,stride=S|SH:SW][,dilation=D|DH:DW]"
          "[,groups=G][,bias]: a shape (options as F.conv2d's; e.g. "
          "32,96,96,56,56,7,7,pad=3,groups=96,bias); repeatable, or several separated by ';'. "
          "Replaces the suite unless --suite is also given");
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
namespace {

constexpr const char kCudnn[] = "cudnn";
constexpr const char kAuto[] = "auto";
const double kNaN = std::numeric_limits<double>::quiet_NaN();

constexpr const char kUsage[] =
    "The conv2d benchmark: every registered algorithm, auto and cuDNN on the KernelBot suite (or\n"
    "the cnn or nets suite, or --shape), timed as KernelBot times them, with each error against\n"
    "fp64.\n"
    "  benchmark [flags] [Google Benchmark's --benchmark_* flags, e.g. --benchmark_out=FILE]";

// `bazel run` starts the binary in its runfiles tree; a relative output path means the caller's
// directory.
std::string FromCallerDir(const std::string& path) {
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || wd == nullptr || *wd == '\0') return path;
  return absl::StrCat(wd, "/", path);
}

// The command line, split: Google Benchmark's own --benchmark_* flags (--benchmark_out made
// relative to the caller's directory) for benchmark::Initialize, the rest for Abseil. Every
// --shape is merged into one, since an Abseil flag keeps only its last value.
struct SplitArgs {
  std::deque<std::string> storage;  // what the rewritten arguments point into
  std::vector<char*> absl_args, benchmark_args;
};

void SplitCommandLine(int argc, char** argv, SplitArgs* out) {
  auto keep = [out](std::vector<char*>* args, std::string arg) {
    out->storage.push_back(std::move(arg));
    args->push_back(&out->storage.back()[0]);
  };
  out->absl_args.push_back(argv[0]);
  out->benchmark_args.push_back(argv[0]);
  std::vector<std::string> shapes;
  size_t shape_at = 0;
  auto add_shape = [&](absl::string_view value) {
    if (shapes.empty()) {
      shape_at = out->absl_args.size();
      out->absl_args.push_back(nullptr);  // filled in below
    }
    shapes.emplace_back(value);
  };
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "-h") {
      keep(&out->absl_args, "--help");
    } else if (absl::ConsumePrefix(&arg, "--benchmark_out=")) {
      keep(&out->benchmark_args, absl::StrCat("--benchmark_out=", FromCallerDir(std::string(arg))));
    } else if (absl::StartsWith(arg, "--benchmark_")) {
      out->benchmark_args.push_back(argv[i]);
    } else if (absl::ConsumePrefix(&arg, "--shape=")) {
      add_shape(arg);
    } else if (arg == "--shape" && i + 1 < argc) {
      add_shape(argv[++i]);
    } else {
      out->absl_args.push_back(argv[i]);
    }
  }
  if (!shapes.empty()) {
    out->storage.push_back(absl::StrCat("--shape=", absl::StrJoin(shapes, ";")));
    out->absl_args[shape_at] = &out->storage.back()[0];
  }
}

// What Abseil's parser cannot check for itself.
absl::Status CheckFlags() {
  const std::optional<std::string> suite = absl::GetFlag(FLAGS_suite);
  if (suite.has_value() && *suite != "kernelbot" && *suite != "cnn" && *suite != "nets") {
    return absl::InvalidArgumentError(absl::StrCat("--suite is kernelbot, cnn or nets: ", *suite));
  }
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

// --variants as given, blanks dropped.
std::vector<std::string> VariantsFlag() {
  std::vector<std::string> out;
  for (const std::string& v : absl::GetFlag(FLAGS_variants)) {
    absl::string_view name = absl::StripAsciiWhitespace(v);
    if (!name.empty()) out.emplace_back(name);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The nets suite: real networks' convolutions. Each row is one distinct Conv2d layer of one
// network (torchvision's builders, batch 32 on 224x224 images, fp32) and how many of the network's
// Conv2d modules are exactly it; a forward pass's convolution time is then the sum of count x
// time. Written down rather than derived at run time, so that the benchmark needs no torchvision;
// tools/nets_layers.py rebuilds the rows from the real models (forward hooks) and diffs them with
// this table (run it where torchvision is installed after editing a row).
constexpr int64_t kNetsBatch = 32;

struct NetLayer {
  const char* net;     // torchvision's builder (resnet50, convnext_tiny, efficientnet_b0), or a set
  const char* module;  // the network's first module of this geometry, in forward order
  int count;           // the network's Conv2d modules of exactly this geometry and input size
  // Every layer listed is square: H = W, Kh = Kw, one stride, padding and dilation for both axes
  // and both sides (so cuDNN's symmetric-padding API takes all of them).
  int64_t in, out, size, kernel, stride, pad, dilation, groups;
  bool bias;
};

// {net, first module, count, Cin, Cout, H = W, K, stride, pad, dilation, groups, bias}
constexpr NetLayer kNetLayers[] = {
    // ResNet-50 (torchvision v1.5: the bottleneck's stride on its 3x3; downsample 1x1/s2 on the
    // block's input; no conv bias, BatchNorm follows): 53 Conv2d, 23 distinct. The 1x1 64->256 at
    // 56x56 is both layer1's conv3 (x3) and layer1.0's downsample (stride 1 there), hence x4.
    {"resnet50", "conv1", 1, 3, 64, 224, 7, 2, 3, 1, 1, false},
    {"resnet50", "layer1.0.conv1", 1, 64, 64, 56, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer1.0.conv2", 3, 64, 64, 56, 3, 1, 1, 1, 1, false},
    {"resnet50", "layer1.0.conv3", 4, 64, 256, 56, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer1.1.conv1", 2, 256, 64, 56, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer2.0.conv1", 1, 256, 128, 56, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer2.0.conv2", 1, 128, 128, 56, 3, 2, 1, 1, 1, false},
    {"resnet50", "layer2.0.conv3", 4, 128, 512, 28, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer2.0.downsample.0", 1, 256, 512, 56, 1, 2, 0, 1, 1, false},
    {"resnet50", "layer2.1.conv1", 3, 512, 128, 28, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer2.1.conv2", 3, 128, 128, 28, 3, 1, 1, 1, 1, false},
    {"resnet50", "layer3.0.conv1", 1, 512, 256, 28, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer3.0.conv2", 1, 256, 256, 28, 3, 2, 1, 1, 1, false},
    {"resnet50", "layer3.0.conv3", 6, 256, 1024, 14, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer3.0.downsample.0", 1, 512, 1024, 28, 1, 2, 0, 1, 1, false},
    {"resnet50", "layer3.1.conv1", 5, 1024, 256, 14, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer3.1.conv2", 5, 256, 256, 14, 3, 1, 1, 1, 1, false},
    {"resnet50", "layer4.0.conv1", 1, 1024, 512, 14, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer4.0.conv2", 1, 512, 512, 14, 3, 2, 1, 1, 1, false},
    {"resnet50", "layer4.0.conv3", 3, 512, 2048, 7, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer4.0.downsample.0", 1, 1024, 2048, 14, 1, 2, 0, 1, 1, false},
    {"resnet50", "layer4.1.conv1", 2, 2048, 512, 7, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer4.1.conv2", 2, 512, 512, 7, 3, 1, 1, 1, 1, false},
    // ConvNeXt-T: stem 4x4/s4 (3->96), per stage a 7x7 depthwise (padding 3, groups = C, bias)
    // per block (depths 3, 3, 9, 3), 2x2/s2 downsamples with bias between stages; the blocks'
    // pointwise layers are nn.Linear, not Conv2d. 22 Conv2d, 8 distinct.
    {"convnext_tiny", "features.0.0", 1, 3, 96, 224, 4, 4, 0, 1, 1, true},
    {"convnext_tiny", "features.1.0.block.0", 3, 96, 96, 56, 7, 1, 3, 1, 96, true},
    {"convnext_tiny", "features.2.1", 1, 96, 192, 56, 2, 2, 0, 1, 1, true},
    {"convnext_tiny", "features.3.0.block.0", 3, 192, 192, 28, 7, 1, 3, 1, 192, true},
    {"convnext_tiny", "features.4.1", 1, 192, 384, 28, 2, 2, 0, 1, 1, true},
    {"convnext_tiny", "features.5.0.block.0", 9, 384, 384, 14, 7, 1, 3, 1, 384, true},
    {"convnext_tiny", "features.6.1", 1, 384, 768, 14, 2, 2, 0, 1, 1, true},
    {"convnext_tiny", "features.7.0.block.0", 3, 768, 768, 7, 7, 1, 3, 1, 768, true},
    // EfficientNet-B0: stem 3x3/s2 (3->32); 16 MBConv blocks, each an expand 1x1 (not in the
    // first, whose expand ratio is 1), a kxk depthwise (padding (k-1)/2) carrying the stride, the
    // squeeze-excitation's two 1x1 convs on the pooled 1x1 image (the only ones with bias:
    // torchvision's SqueezeExcitation keeps nn.Conv2d's default), a project 1x1; head 1x1
    // 320->1280. 81 Conv2d, 46 distinct.
    {"efficientnet_b0", "features.0.0", 1, 3, 32, 224, 3, 2, 1, 1, 1, false},
    {"efficientnet_b0", "features.1.0.block.0.0", 1, 32, 32, 112, 3, 1, 1, 1, 32, false},
    {"efficientnet_b0", "features.1.0.block.1.fc1", 1, 32, 8, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.1.0.block.1.fc2", 1, 8, 32, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.1.0.block.2.0", 1, 32, 16, 112, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.2.0.block.0.0", 1, 16, 96, 112, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.2.0.block.1.0", 1, 96, 96, 112, 3, 2, 1, 1, 96, false},
    {"efficientnet_b0", "features.2.0.block.2.fc1", 1, 96, 4, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.2.0.block.2.fc2", 1, 4, 96, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.2.0.block.3.0", 1, 96, 24, 56, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.2.1.block.0.0", 2, 24, 144, 56, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.2.1.block.1.0", 1, 144, 144, 56, 3, 1, 1, 1, 144, false},
    {"efficientnet_b0", "features.2.1.block.2.fc1", 2, 144, 6, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.2.1.block.2.fc2", 2, 6, 144, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.2.1.block.3.0", 1, 144, 24, 56, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.3.0.block.1.0", 1, 144, 144, 56, 5, 2, 2, 1, 144, false},
    {"efficientnet_b0", "features.3.0.block.3.0", 1, 144, 40, 28, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.3.1.block.0.0", 2, 40, 240, 28, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.3.1.block.1.0", 1, 240, 240, 28, 5, 1, 2, 1, 240, false},
    {"efficientnet_b0", "features.3.1.block.2.fc1", 2, 240, 10, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.3.1.block.2.fc2", 2, 10, 240, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.3.1.block.3.0", 1, 240, 40, 28, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.4.0.block.1.0", 1, 240, 240, 28, 3, 2, 1, 1, 240, false},
    {"efficientnet_b0", "features.4.0.block.3.0", 1, 240, 80, 14, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.4.1.block.0.0", 3, 80, 480, 14, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.4.1.block.1.0", 2, 480, 480, 14, 3, 1, 1, 1, 480, false},
    {"efficientnet_b0", "features.4.1.block.2.fc1", 3, 480, 20, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.4.1.block.2.fc2", 3, 20, 480, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.4.1.block.3.0", 2, 480, 80, 14, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.5.0.block.1.0", 1, 480, 480, 14, 5, 1, 2, 1, 480, false},
    {"efficientnet_b0", "features.5.0.block.3.0", 1, 480, 112, 14, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.5.1.block.0.0", 3, 112, 672, 14, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.5.1.block.1.0", 2, 672, 672, 14, 5, 1, 2, 1, 672, false},
    {"efficientnet_b0", "features.5.1.block.2.fc1", 3, 672, 28, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.5.1.block.2.fc2", 3, 28, 672, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.5.1.block.3.0", 2, 672, 112, 14, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.6.0.block.1.0", 1, 672, 672, 14, 5, 2, 2, 1, 672, false},
    {"efficientnet_b0", "features.6.0.block.3.0", 1, 672, 192, 7, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.6.1.block.0.0", 4, 192, 1152, 7, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.6.1.block.1.0", 3, 1152, 1152, 7, 5, 1, 2, 1, 1152, false},
    {"efficientnet_b0", "features.6.1.block.2.fc1", 4, 1152, 48, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.6.1.block.2.fc2", 4, 48, 1152, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.6.1.block.3.0", 3, 1152, 192, 7, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.7.0.block.1.0", 1, 1152, 1152, 7, 3, 1, 1, 1, 1152, false},
    {"efficientnet_b0", "features.7.0.block.3.0", 1, 1152, 320, 7, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.8.0", 1, 320, 1280, 7, 1, 1, 0, 1, 1, false},
    // Large-kernel depthwise (RepLKNet-like 31x31 at 56x56; a 13x13 at 7x7 with many channels):
    // not a torchvision model, its own group; no bias (BatchNorm follows in such nets).
    {"large_kernel_dw", "dw31x31", 1, 128, 128, 56, 31, 1, 15, 1, 128, false},
    {"large_kernel_dw", "dw13x13", 1, 1024, 1024, 7, 13, 1, 6, 1, 1024, false},
};

// One network's use of a case's shape.
struct NetUse {
  std::string net;
  std::string module;
  int count = 0;
};

// A case to run and, in the nets suite, which networks use it and how often.
struct SuiteCase {
  Shape shape;
  std::vector<NetUse> uses;
};

Shape NetLayerShape(const NetLayer& l) {
  Shape s{kNetsBatch, l.in, l.out, l.size, l.size, l.kernel, l.kernel};
  s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = l.pad;
  s.stride_h = s.stride_w = l.stride;
  s.dilation_h = s.dilation_w = l.dilation;
  s.groups = l.groups;
  s.has_bias = l.bias;
  return s;
}

// One case per distinct shape of kNetLayers, in table order; a shape that two networks share is
// timed once and counted in both.
std::vector<SuiteCase> NetsCases() {
  std::vector<SuiteCase> cases;
  for (const NetLayer& l : kNetLayers) {
    const Shape s = NetLayerShape(l);
    auto it = std::find_if(cases.begin(), cases.end(),
                           [&](const SuiteCase& c) { return c.shape == s; });
    if (it == cases.end()) it = cases.insert(cases.end(), SuiteCase{s, {}});
    it->uses.push_back(NetUse{l.net, l.module, l.count});
  }
  return cases;
}

std::vector<SuiteCase> SuiteCases(const std::string& suite) {
  if (suite == "nets") return NetsCases();
  // cnn: common CNN layers, from tiny to large channel counts; else KernelBot's five (its repeated
  // case included).
  std::vector<SuiteCase> cases;
  for (const Shape& s : suite == "cnn" ? CnnShapes() : KernelBotBenchmarkShapes()) {
    cases.push_back(SuiteCase{s, {}});
  }
  return cases;
}

// ---------------------------------------------------------------------------------------------
// The GPU benchmark.

struct Case {
  Shape shape;
  std::vector<NetUse> uses;  // the nets suite's: which networks have the layer, how often
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
  // --classes: the worst ratio over every output of every class beyond randn (NaN: not run; inf
  // where an output's finiteness differs from fp64's), and each class's.
  double classes_worst = kNaN;
  std::vector<std::pair<std::string, double>> per_class;
};

// One variant ready to run on a case: a call that enqueues the convolution on a stream.
struct Prepared {
  std::string label;
  size_t workspace_bytes = 0;
  TimedCall call;
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

struct SummaryRow;

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
  double worst_vs_cudnn = std::numeric_limits<double>::quiet_NaN();
  int worst_case = -1;
  std::string worst_module;
  double vs_cudnn() const { return cudnn_ms / auto_ms; }
};

class GpuBench {
 public:
  explicit GpuBench(std::vector<SuiteCase> suite) : variants_(VariantsFlag()) {
    for (size_t i = 0; i < suite.size(); ++i) {
      Case c;
      c.shape = suite[i].shape;
      c.uses = std::move(suite[i].uses);
      c.seed = absl::GetFlag(FLAGS_seed) + i;
      cases_.push_back(std::move(c));
    }
  }
  ~GpuBench() {
    problem_.reset();
    timer_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    // A blocking stream: it orders after the testbed's synchronous copies and memsets.
    RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&stream_), "cudaStreamCreate"));
    ASSIGN_OR_RETURN(KernelBotTimer timer, KernelBotTimer::Create());
    timer_.emplace(std::move(timer));
    return absl::OkStatus();
  }

  // Registers one benchmark per (variant, case), cuDNN first within each case.
  absl::Status Register() {
    std::vector<std::string> known = {kCudnn, kAuto};
    for (const std::string& n : Registry::Global().Names()) known.push_back(n);
    for (const std::string& v : variants_) {
      if (std::find(known.begin(), known.end(), v) == known.end()) {
        return absl::InvalidArgumentError(absl::StrCat("--variants: unknown variant '", v,
                                                       "'; known: ", absl::StrJoin(known, ", ")));
      }
    }
    auto wanted = [&](const std::string& v) {
      return variants_.empty() ||
             std::find(variants_.begin(), variants_.end(), v) != variants_.end();
    };
    auto named = [&](const std::string& v) {
      return std::find(variants_.begin(), variants_.end(), v) != variants_.end();
    };
    std::vector<std::string> skipped_oracles;
    for (int ci = 0; ci < static_cast<int>(cases_.size()); ++ci) {
      const Shape& shape = cases_[ci].shape;
      if (wanted(kCudnn)) {
        // Asymmetric padding: not applicable to cuDNN's legacy API, said as such, not an error.
        if (absl::Status can = CudnnConv::Supports(shape); !can.ok()) {
          RecordNotApplicable(kCudnn, ci, can);
        } else {
          Add(kCudnn, ci);
        }
      }
      for (const Algorithm* a : Registry::Global().All()) {
        const std::string name = a->name();
        if (!wanted(name)) continue;
        // A part of the geometry the algorithm does not compute: n/a, said before the oracle test
        // below, which an algorithm that refuses the shape passes too (its estimate is infinite).
        // Basic shapes pass this check, so the kernelbot and cnn suites' rows are as they were.
        if (absl::Status geometry = a->CheckGeometry(shape); !geometry.ok()) {
          RecordNotApplicable(name, ci, geometry);
          continue;
        }
        // Oracles say so by an infinite estimate; they take seconds per call on large cases.
        if (!std::isfinite(a->EstimateSeconds(shape)) && !absl::GetFlag(FLAGS_include_oracle) && !named(name)) {
          if (std::find(skipped_oracles.begin(), skipped_oracles.end(), name) ==
              skipped_oracles.end()) {
            skipped_oracles.push_back(name);
          }
          continue;
        }
        absl::Status can = a->CanImplement(shape);
        if (!can.ok()) {
          RecordNotApplicable(name, ci, can);
          continue;
        }
        Add(name, ci);
      }
      if (wanted(kAuto)) {
        // Layers no algorithm takes yet (a geometry part no kernel computes) are n/a for auto,
        // listed rather than timed; any other reason to fail is left to Plan::Create to report.
        absl::StatusOr<std::string> choice = ChooseAlgorithm(shape);
        if (!choice.ok() && choice.status().code() == absl::StatusCode::kUnimplemented) {
          RecordNotApplicable(kAuto, ci, choice.status());
        } else {
          Add(kAuto, ci);
        }
      }
    }
    if (!skipped_oracles.empty()) {
      std::fprintf(stderr, "not timing oracle(s) %s (add --include_oracle)\n",
                   absl::StrJoin(skipped_oracles, ", ").c_str());
    }
    return absl::OkStatus();
  }

  void PrintSummary() const;
  // The nets suite's per-layer table (one row per case, one column per variant) and the
  // per-variant tally, in place of the per-case columns, which would run past 80 cases wide.
  void PrintNetsTable(const std::vector<SummaryRow>& rows) const;
  // Per network: the forward pass's totals, for auto and for cuDNN.
  std::vector<NetTotal> NetTotals() const;
  void PrintNetTotals() const;
  bool has_nets() const {
    return std::any_of(cases_.begin(), cases_.end(), [](const Case& c) { return !c.uses.empty(); });
  }
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
        ->Iterations(absl::GetFlag(FLAGS_calls))
        ->Unit(benchmark::kMillisecond);
  }

  void Record(const Result& r) { results_[{r.variant, r.case_index}] = r; }

  // `variant` cannot take case `ci`, for the reason `why`: a result with no time, "n/a: why".
  void RecordNotApplicable(const std::string& variant, int ci, const absl::Status& why) {
    Result r;
    r.variant = variant;
    r.case_index = ci;
    r.error = absl::StrCat("n/a: ", why.message());
    Record(r);
  }

  // The input classes of case `ci` (built when the case changes; one case's at a time).
  absl::Status PrepareClasses(int ci) {
    if (classes_case_ == ci) return absl::OkStatus();
    classes_.clear();
    classes_case_ = -1;
    const Case& c = cases_[ci];
    const absl::Time t0 = absl::Now();
    for (InputClass ic : AllInputClasses()) {
      if (ic == InputClass::kRandn) continue;  // the main check's
      ASSIGN_OR_RETURN(ClassProblem p, MakeClassProblem(c.shape, c.seed, ic));
      classes_.push_back(std::move(p));
    }
    classes_case_ = ci;
    std::fprintf(stderr, "[case %d/%zu] input classes and their GPU fp64 references (%.1f s)\n",
                 ci + 1, cases_.size(), absl::ToDoubleSeconds(absl::Now() - t0));
    return absl::OkStatus();
  }

  // Every class of case `ci` through `variant`, every output compared at the class's scale.
  absl::Status CheckClasses(const std::string& variant, int ci, Result* r) {
    RETURN_IF_ERROR(PrepareClasses(ci));
    r->classes_worst = 0;
    for (const ClassProblem& cp : classes_) {
      ASSIGN_OR_RETURN(const Comparison cmp, CheckClass(cp, variant));
      // A failure whose ratio does not show it (an unwritten output) counts as inf.
      const double worst = !cmp.ok() && !(cmp.worst_ratio > 1.0) ? INFINITY : cmp.worst_ratio;
      r->per_class.emplace_back(InputClassName(cp.input_class), worst);
      if (!(worst <= r->classes_worst)) r->classes_worst = worst;
    }
    return absl::OkStatus();
  }

  // Inputs on the device for case `ci` (one case's buffers at a time) and its fp64 reference.
  absl::Status PrepareCase(int ci) {
    Case& c = cases_[ci];
    if (problem_case_ != ci) {
      problem_.reset();
      problem_case_ = -1;
      ASSIGN_OR_RETURN(DeviceProblem p, DeviceProblem::Create(c.shape, c.seed, absl::GetFlag(FLAGS_inputs)));
      problem_ = std::make_unique<DeviceProblem>(std::move(p));
      problem_case_ = ci;
    }
    if (!c.reference_ready) {
      const absl::Time t0 = absl::Now();
      const Shape& s = c.shape;
      const int64_t positions = absl::GetFlag(FLAGS_positions);
      if (s.output_elements() <= positions) {
        c.positions.clear();
        c.y64 = ReferenceConv(s, problem_->host_x().data(), problem_->host_w().data(),
                              problem_->host_bias());
      } else {
        c.positions = SamplePositions(s, positions, c.seed);
        c.y64 = ReferenceConvAt(s, problem_->host_x().data(), problem_->host_w().data(),
                                c.positions, problem_->host_bias());
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
    ASSIGN_OR_RETURN(DeviceBuffer workspace,
                     DeviceBuffer::Allocate(p.workspace_bytes, "cudaMalloc workspace"));
    p.workspace = std::make_shared<DeviceBuffer>(std::move(workspace));
    const DeviceProblem* prob = problem_.get();
    void* ws = p.workspace->p;
    const size_t ws_bytes = p.workspace_bytes;
    if (p.cudnn) {
      const CudnnConv* c = p.cudnn.get();
      p.call = [=](cudaStream_t s) {
        return c->Run(prob->x(), prob->w(), prob->bias(), prob->y(), ws, ws_bytes, s);
      };
    } else {
      const Plan* plan = p.plan.get();
      p.call = [=](cudaStream_t s) {
        return plan->Run(prob->x(), prob->w(), prob->bias(), prob->y(), ws, ws_bytes, s);
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

  absl::Status Measure(benchmark::State& state, const std::string& variant, int ci, Result* r) {
    RETURN_IF_ERROR(PrepareCase(ci));  // the fp64 reference: CPU time, not counted as busy
    Case& c = cases_[ci];
    // A variant timed right after a heavy one ran at lowered clocks (docs/PERF.md, round 52):
    // every variant starts from a GPU that has idled as long as the previous one kept it busy
    // (its wall time: plan, checks, flushes and calls), up to --cooldown seconds.
    const double rest_s = std::min(absl::GetFlag(FLAGS_cooldown), busy_s_);
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
    ASSIGN_OR_RETURN(CallTimes times, timer_->Time(p.call, stream_, absl::GetFlag(FLAGS_calls),
                                                   absl::GetFlag(FLAGS_warmup)));
    size_t i = 0;  // Google Benchmark runs exactly --calls iterations (Iterations above)
    for (auto _ : state) state.SetIterationTime(times.ms[i++ % times.ms.size()] * 1e-3);
    ASSIGN_OR_RETURN(Comparison last, Check(p, c));
    r->cmp = Merge(first, last);
    r->pass = r->cmp.ok();
    r->ms = times.mean_ms();
    r->tflops = c.shape.flops() / (r->ms * 1e-3) * 1e-12;
    if (variant == kCudnn) c.cudnn_ms = r->ms;
    r->speedup = c.cudnn_ms / r->ms;  // NaN when cuDNN was filtered out or failed
    if (absl::GetFlag(FLAGS_classes) && variant != kCudnn) {
      RETURN_IF_ERROR(CheckClasses(variant, ci, r));
    }
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

  const std::vector<std::string> variants_;  // --variants; empty: all
  double busy_s_ = 0;  // the wall time of the last variant's measurement
  std::vector<Case> cases_;
  std::vector<std::string> variant_order_;
  std::map<std::pair<std::string, int>, Result> results_;
  std::unique_ptr<DeviceProblem> problem_;
  int problem_case_ = -1;
  std::vector<ClassProblem> classes_;
  int classes_case_ = -1;
  cudaStream_t stream_ = nullptr;
  std::optional<KernelBotTimer> timer_;
};

struct SummaryRow {
  std::string variant;
  std::vector<const Result*> per_case;  // null: not run
  double geomean_ms = kNaN;             // only when every case has a time
  double worst_ratio = kNaN;
  double classes_worst = kNaN;  // over the cases that ran --classes
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

// A result's cell in the summaries: its time ('!' when it failed the bar), n/a, ERROR, or '-'.
std::string Cell(const Result* res) {
  if (res == nullptr) return "-";
  if (!res->error.empty()) return res->error.rfind("n/a", 0) == 0 ? "n/a" : "ERROR";
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

void GpuBench::PrintSummary() const {
  std::vector<SummaryRow> rows = Summarize(variant_order_, cases_.size(), results_);
  double cudnn_geo = kNaN;
  for (const SummaryRow& r : rows) {
    if (r.variant == kCudnn) cudnn_geo = r.geomean_ms;
  }
  std::printf("\nSummary: mean ms per case (%d calls after %d warm-up, L2 flushed before each; "
              "error vs fp64 at <= %lld positions, bar |y-y64| <= 1e-3 + 1e-3|y64|)\n",
              absl::GetFlag(FLAGS_calls), absl::GetFlag(FLAGS_warmup),
              static_cast<long long>(absl::GetFlag(FLAGS_positions)));
  if (has_nets()) {
    PrintNetsTable(rows);
  } else {
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
  if (has_nets()) PrintNetTotals();
  std::fflush(stdout);
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

void GpuBench::PrintNetsTable(const std::vector<SummaryRow>& rows) const {
  // Columns sized to their widest entry: the table is wide (a column per variant) but aligned.
  size_t layer_w = 5, shape_w = 5;
  for (const Case& c : cases_) {
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
  for (size_t ci = 0; ci < cases_.size(); ++ci) {
    const Case& c = cases_[ci];
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
    } else if (auto_result != nullptr && auto_result->error.rfind("n/a", 0) == 0) {
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
  for (size_t ci = 0; ci < cases_.size(); ++ci) {
    auto it = results_.find({kCudnn, static_cast<int>(ci)});
    if (it != results_.end() && it->second.error.rfind("n/a", 0) == 0) {
      std::printf("  #%zu cudnn %s\n", ci + 1, it->second.error.c_str());
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
                absl::StrCat(timed, "/", cases_.size()).c_str(), Num(r.worst_ratio, "%.3f").c_str(),
                Num(r.classes_worst, "%.3g").c_str(), PassCell(r).c_str());
  }
}

std::vector<NetTotal> GpuBench::NetTotals() const {
  std::vector<NetTotal> totals;
  auto find = [this](const std::string& variant, size_t ci) -> const Result* {
    auto it = results_.find({variant, static_cast<int>(ci)});
    return it == results_.end() ? nullptr : &it->second;
  };
  for (size_t ci = 0; ci < cases_.size(); ++ci) {
    const Result* cudnn = find(kCudnn, ci);
    const Result* au = find(kAuto, ci);
    const bool cudnn_timed = cudnn != nullptr && cudnn->error.empty();
    const bool auto_timed = au != nullptr && au->error.empty();
    for (const NetUse& u : cases_[ci].uses) {
      auto t = std::find_if(totals.begin(), totals.end(),
                            [&](const NetTotal& n) { return n.net == u.net; });
      if (t == totals.end()) t = totals.insert(totals.end(), NetTotal{u.net});
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
        const bool na = au != nullptr && au->error.rfind("n/a", 0) == 0;
        ++(na ? t->auto_na_layers : t->auto_error_layers);
        (na ? t->auto_na_convs : t->auto_error_convs) += u.count;
      }
    }
  }
  return totals;
}

void GpuBench::PrintNetTotals() const {
  std::printf("\nPer network, the convolutions of one forward pass (batch %lld, 224x224 input; the "
              "large-kernel set at its own sizes): the sum over its layers of count x mean ms; "
              "vs_cudnn = cuDNN ms / auto ms\n",
              static_cast<long long>(kNetsBatch));
  std::printf("%-16s %6s %5s %10s %11s %8s  %s\n", "network", "layers", "convs", "cudnn_ms",
              "auto_ms", "vs_cudnn", "auto's worst layer (vs_cudnn)");
  for (const NetTotal& t : NetTotals()) {
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
nlohmann::ordered_json CaseJson(int ci, const Shape& s, uint64_t seed,
                                const std::vector<NetUse>& uses) {
  using Json = nlohmann::ordered_json;
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
              {"seed", seed},
              {"gflop", Sig9(s.flops() * 1e-9)}};
  for (const NetUse& u : uses) {
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

absl::Status GpuBench::WriteJson(const std::string& path, const std::string& device) const {
  using Json = nlohmann::ordered_json;
  Json j;
  j["device"] = device;
  j["cudnn_version"] = CudnnVersion();
  j["calls"] = absl::GetFlag(FLAGS_calls);
  j["warmup"] = absl::GetFlag(FLAGS_warmup);
  j["cooldown_s"] = Sig9(absl::GetFlag(FLAGS_cooldown));
  j["positions"] = absl::GetFlag(FLAGS_positions);
  j["inputs"] = DistributionName(absl::GetFlag(FLAGS_inputs));
  j["seed"] = absl::GetFlag(FLAGS_seed);
  j["atol"] = Sig9(kAbsTol);
  j["rtol"] = Sig9(kRelTol);
  j["cases"] = Json::array();
  for (size_t ci = 0; ci < cases_.size(); ++ci) {
    j["cases"].push_back(CaseJson(static_cast<int>(ci), cases_[ci].shape, cases_[ci].seed,
                                  cases_[ci].uses));
  }
  j["results"] = Json::array();
  for (const auto& kv : results_) {
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
  for (const SummaryRow& r : Summarize(variant_order_, cases_.size(), results_)) {
    j["summary"].push_back({{"variant", r.variant},
                            {"geomean_ms", Sig9(r.geomean_ms)},
                            {"worst_ratio", Sig9(r.worst_ratio)},
                            {"classes_worst_ratio", Sig9(r.classes_worst)},
                            {"cases_passed", r.passed},
                            {"cases_failed", r.failed},
                            {"cases_errors", r.errors},
                            {"pass", r.passed > 0 && r.failed + r.errors == 0}});
  }
  if (has_nets()) {
    j["nets"] = Json::array();
    for (const NetTotal& t : NetTotals()) {
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

// --list: the cases and what auto and cuDNN would do with each, without a device (auto's choice is
// the model device's, DeviceInfo::ModelDevice).
// With --json_out, the cases' rows as the benchmark's JSON has them (tools/nets_layers.py reads
// the nets table from it where the source is not at hand).
absl::Status ListCases(const std::vector<SuiteCase>& cases, const std::string& json_out) {
  std::map<std::string, std::pair<int, int>> per_net;  // layers, convs
  std::vector<std::string> order;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const SuiteCase& c = cases[ci];
    absl::StatusOr<std::string> choice = ChooseAlgorithm(c.shape);
    const absl::Status cudnn = CudnnConv::Supports(c.shape);
    std::printf("#%-3zu %-40s %-44s %9.3f GFLOP  auto: %s  cudnn: %s\n", ci + 1,
                UsesText(c.uses).c_str(), c.shape.ToString().c_str(), c.shape.flops() * 1e-9,
                choice.ok() ? choice->c_str()
                            : absl::StrCat("n/a (", ShortReason(choice.status().message()), ")")
                                  .c_str(),
                cudnn.ok() ? "yes" : absl::StrCat("n/a (", cudnn.message(), ")").c_str());
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
  if (json_out.empty()) return absl::OkStatus();
  nlohmann::ordered_json j;
  j["cases"] = nlohmann::ordered_json::array();
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    j["cases"].push_back(CaseJson(static_cast<int>(ci), cases[ci].shape,
                                  absl::GetFlag(FLAGS_seed) + ci, cases[ci].uses));
  }
  return WriteText(json_out, Layout(j));
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
  std::vector<SuiteCase> cases;
  const std::vector<Shape> given = absl::GetFlag(FLAGS_shape).shapes;
  const std::optional<std::string> suite = absl::GetFlag(FLAGS_suite);
  if (given.empty() || suite.has_value()) cases = SuiteCases(suite.value_or("kernelbot"));
  for (const Shape& s : given) cases.push_back(SuiteCase{s, {}});
  if (absl::GetFlag(FLAGS_list)) {
    if (absl::Status listed = ListCases(cases, json_out); !listed.ok()) {
      std::fprintf(stderr, "%s\n", listed.ToString().c_str());
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
    return RunCpu(argc, argv);
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
  benchmark::AddCustomContext("cudnn", CudnnVersion());
  benchmark::AddCustomContext("protocol",
                              absl::StrCat("KernelBot: 256 MB L2 flush, events around one call, ",
                                           absl::GetFlag(FLAGS_calls), " calls after ",
                                           absl::GetFlag(FLAGS_warmup), " warm-up"));
  std::fprintf(stderr, "device %s, cuDNN %s, %zu case(s), variants: cudnn, %s, auto\n",
               device.c_str(), CudnnVersion().c_str(), cases.size(),
               absl::StrJoin(Registry::Global().Names(), ", ").c_str());

  GpuBench bench(std::move(cases));
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
  if (!json_out.empty()) {
    st = bench.WriteJson(json_out, device);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "wrote %s\n", json_out.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace conv2d

int main(int argc, char** argv) { return conv2d::Main(argc, argv); }
