#include "tools/benchmark/command_line.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "conv/core/status_macros.h"

namespace conv2d {

bool AbslParseFlag(absl::string_view text, Distribution* d, std::string* error) {
  if (text != "normal" && text != "uniform") {
    *error = "normal or uniform";
    return false;
  }
  *d = text == "normal" ? Distribution::kNormal : Distribution::kUniform;
  return true;
}

std::string AbslUnparseFlag(Distribution d) { return DistributionName(d); }

namespace bench {
namespace {

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

}  // namespace

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

std::string FromCallerDir(const std::string& path) {
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || wd == nullptr || *wd == '\0') return path;
  return absl::StrCat(wd, "/", path);
}

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

}  // namespace bench
}  // namespace conv2d
