// Writes testdata/*.golden from the fp64 reference: `bazel run //tools:make_golden -- --out=$PWD/testdata`
// (--filter=SUBSTRING: only the files whose name has it).
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "conv/testing/shapes.h"
#include "reference/input_classes.h"
#include "reference/random.h"
#include "reference/reference.h"
#include "tools/golden.h"

ABSL_FLAG(std::string, out, "", "DIR: where the .golden files are written (required)");
ABSL_FLAG(std::string, filter, "", "SUBSTRING: write only the files whose name has it");

namespace conv2d {
namespace {

int Write(const std::string& dir, const Shape& s, uint64_t seed, int64_t samples,
          Distribution inputs, InputClass input_class = InputClass::kRandn) {
  Golden g;
  g.shape = s;
  g.seed = seed;
  g.inputs = input_class == InputClass::kRandn ? inputs : Distribution::kNormal;
  g.input_class = input_class;
  const std::string path = dir + "/" + GoldenFileName(g);
  if (GoldenFileName(g).find(absl::GetFlag(FLAGS_filter)) == std::string::npos) return 0;
  const GoldenTensors in = GoldenInputs(g);
  if (samples > 0 && samples < s.written_elements()) {
    g.positions = SamplePositions(s, samples, seed);
    g.values = ReferenceAt(s, in.inputs(), g.positions);
    g.store_f64 = true;
  } else {
    g.values = Reference(s, in.inputs());
    // Small randn outputs keep full precision; large ones, and the input classes', are stored
    // as fp32 (see golden.h).
    g.store_f64 = s.written_elements() <= 100000 && input_class == InputClass::kRandn;
  }
  absl::Status st = WriteGolden(g, path);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  std::printf("wrote %s\n", path.c_str());
  return 0;
}

}  // namespace
}  // namespace conv2d

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Writes testdata/*.golden. make_golden --out=DIR");
  const bool positional = absl::ParseCommandLine(argc, argv).size() > 1;
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty() || positional) {
    std::fprintf(stderr, "usage: make_golden --out=DIR\n");
    return 2;
  }
  using namespace conv2d;
  int failures = 0;
  uint64_t seed = 1000;
  // KernelBot's own shapes with its input distribution (randn); edge shapes uniform.
  for (const Shape& s : KernelBotTestShapes()) {
    failures += Write(out, s, ++seed, 0, Distribution::kNormal);
  }
  seed = 2000;
  for (const Shape& s : KernelBotBenchmarkShapes()) {
    failures += Write(out, s, ++seed, 4096, Distribution::kNormal);
  }
  seed = 3000;
  for (const Shape& s : EdgeShapes()) failures += Write(out, s, ++seed, 0, Distribution::kUniform);
  // The cnn suite (issue 4's shapes, where winograd and the implicit GEMMs compete), sampled.
  seed = 4000;
  for (const Shape& s : CnnShapes()) failures += Write(out, s, ++seed, 4096, Distribution::kNormal);
  // The input classes beyond randn (reference/input_classes.h), every output: odd sizes with
  // Cin != Cout and H != W; 3x3 (winograd's, and the FFT's fewest taps); a long kernel with
  // K > H/4; the first again with asymmetric padding, the top wider than the kernel's half
  // (where the FFT's mean removal must not count the padding as the mean: large_mean's border
  // outputs).
  seed = 5000;
  const Shape class_shapes[] = {{2, 6, 5, 40, 37, 5, 4}, {4, 8, 8, 33, 31, 3, 3},
                                {1, 16, 24, 64, 48, 16, 8},
                                WithGeometry({2, 6, 5, 40, 37, 5, 4}, 3, 1, 0, 2, 1, 1)};
  for (const Shape& s : class_shapes) {
    ++seed;
    for (InputClass c : AllInputClasses()) {
      if (c != InputClass::kRandn) failures += Write(out, s, seed, 0, Distribution::kNormal, c);
    }
  }
  // The geometry beyond the basic form (conv/testing/shapes.h): each part alone and together,
  // every output, uniform as the edge shapes; networks' geometry at full size, sampled, normal.
  seed = 6000;
  for (const Shape& s : GeometryShapes()) failures += Write(out, s, ++seed, 0, Distribution::kUniform);
  seed = 6100;
  for (const Shape& s : NetworkGeometryShapes()) {
    failures += Write(out, s, ++seed, 4096, Distribution::kNormal);
  }
  // The backward (dgrad, then wgrad; seeds 7000 and 8000 onward): every part of the geometry
  // and the input classes, every element; the networks' geometry at full size, sampled.
  for (Op op : {Op::kDgrad, Op::kWgrad}) {
    auto as = [op](Shape s) {
      s.op = op;
      if (op == Op::kDgrad) s.has_bias = false;
      return s;
    };
    seed = op == Op::kDgrad ? 7000 : 8000;
    for (const Shape& s : GeometryShapes()) {
      failures += Write(out, as(s), ++seed, 0, Distribution::kUniform);
    }
    for (const Shape& s : class_shapes) {
      ++seed;
      for (InputClass c : AllInputClasses()) {
        if (c != InputClass::kRandn) failures += Write(out, as(s), seed, 0, Distribution::kNormal, c);
      }
    }
    seed += 100 - seed % 100;
    for (const Shape& s : NetworkGeometryShapes()) {
      failures += Write(out, as(s), ++seed, 4096, Distribution::kNormal);
    }
    // EfficientNet-B0's 1x1 40 -> 240 at 28x28, whose wgrad implicit_gemm_wgmma computes in the
    // swapped orientation and turns back by the channel transpose: no other golden file reaches
    // that path (PERF.md round 109: a defect there passed every golden file).
    if (op == Op::kWgrad) {
      failures += Write(out, as(Shape{32, 40, 240, 28, 28, 1, 1}), ++seed, 4096,
                        Distribution::kNormal);
    }
  }
  return failures ? 1 : 0;
}
