// The benchmark's command line beyond what Abseil parses by itself: --shape's syntax (and its
// inverse, for --help's default), --inputs' values, and the split between Abseil's flags and
// Google Benchmark's. The flags themselves are defined in tools/benchmark.cc, since Abseil's
// --help lists only the flags of the file named after the binary.
#ifndef CONV2D_TOOLS_BENCHMARK_COMMAND_LINE_H_
#define CONV2D_TOOLS_BENCHMARK_COMMAND_LINE_H_

#include <deque>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "conv/shape.h"
#include "reference/random.h"

namespace conv2d {

// Abseil's flag parser finds these by argument-dependent lookup: in the namespace of the type.
bool AbslParseFlag(absl::string_view text, Distribution* d, std::string* error);
std::string AbslUnparseFlag(Distribution d);

namespace bench {

// --shape's syntax, for messages.
inline constexpr char kShapeSyntax[] =
    "B,Cin,Cout,H,W,Kh,Kw[,pad=P|PH:PW|T:B:L:R][,stride=S|SH:SW][,dilation=D|DH:DW][,groups=G]"
    "[,bias]";

// One --shape: B,Cin,Cout,H,W,Kh,Kw[,option...] (tools/benchmark.cc's header lists the
// options), validated.
absl::StatusOr<Shape> ParseShape(absl::string_view text);
// The inverse: the basic form, then only the options off their defaults.
std::string UnparseShape(const Shape& s);

// --shape's value: shapes separated by ';'.
struct ShapeList {
  std::vector<Shape> shapes;
};
bool AbslParseFlag(absl::string_view text, ShapeList* list, std::string* error);
std::string AbslUnparseFlag(const ShapeList& list);

// `bazel run` starts the binary in its runfiles tree; a relative output path means the caller's
// directory.
std::string FromCallerDir(const std::string& path);

// The command line, split: Google Benchmark's own --benchmark_* flags (--benchmark_out made
// relative to the caller's directory) for benchmark::Initialize, the rest for Abseil. Every
// --shape is merged into one, since an Abseil flag keeps only its last value.
struct SplitArgs {
  std::deque<std::string> storage;  // what the rewritten arguments point into
  std::vector<char*> absl_args, benchmark_args;
};
void SplitCommandLine(int argc, char** argv, SplitArgs* out);

}  // namespace bench
}  // namespace conv2d

#endif  // CONV2D_TOOLS_BENCHMARK_COMMAND_LINE_H_
