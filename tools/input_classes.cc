// Worst ratio to the fp64 bar of every registered variant (the lab's too) on the input classes
// of reference/input_classes.h, not only randn: the data behind the accuracy contract. Every
// output element is checked against the fp64 reference computed on the GPU. For huge and tiny
// the outputs are compared after dividing both by scale^2 (the bar's 1e-3 is absolute, and every
// method's error scales with the data); for nonfinite, the outputs whose window holds a
// non-finite input must be non-finite and all others within the bar. Prints a table, variant by
// class, per shape. Needs a GPU.
//   input_classes [--shapes=kernelbot|cnn|all] [--variants=a,b]
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "conv/conv.h"
#include "conv/testing/shapes.h"
#include "conv/testing/testbed.h"
#include "reference/input_classes.h"
#include "tools/lab/lab.h"

ABSL_FLAG(std::string, shapes, "kernelbot", "kernelbot (the distinct benchmark cases), cnn, all");
ABSL_FLAG(std::string, variants, "", "comma-separated variants (default: every one but direct)");

namespace conv2d {
namespace {

int Main() {
  if (!RegisterLabAlgorithms().ok()) return 2;
  std::vector<Shape> shapes;
  const std::string which = absl::GetFlag(FLAGS_shapes);
  if (which == "kernelbot" || which == "all") {
    for (const Shape& s : KernelBotBenchmarkShapes()) {
      if (shapes.empty() || !(shapes.back() == s)) shapes.push_back(s);
    }
  }
  if (which == "cnn" || which == "all") {
    for (const Shape& s : CnnShapes()) shapes.push_back(s);
  }
  std::vector<std::string> variants;
  if (absl::GetFlag(FLAGS_variants).empty()) {
    for (const std::string& v : Algorithms()) {
      if (v != "direct") variants.push_back(v);
    }
  } else {
    variants = absl::StrSplit(absl::GetFlag(FLAGS_variants), ',');
  }
  const std::vector<InputClass> classes = AllInputClasses();
  int failures = 0;
  for (const Shape& s : shapes) {
    std::printf("\n%s: worst |y - y64| / (1e-3 + 1e-3 |y64|) over all %lld outputs (! = fails)\n",
                s.ToString().c_str(), static_cast<long long>(s.output_elements()));
    std::printf("%-22s", "variant");
    for (InputClass c : classes) std::printf("%12s", InputClassName(c));
    std::printf("\n");
    std::vector<ClassProblem> problems;
    for (InputClass c : classes) {
      absl::StatusOr<ClassProblem> p = MakeClassProblem(s, 11, c);
      if (!p.ok()) {
        std::printf("%s\n", p.status().ToString().c_str());
        return 1;
      }
      problems.push_back(*std::move(p));
    }
    for (const std::string& v : variants) {
      if (v != "auto" && !Registry::Global().Find(v)->CanImplement(s).ok()) continue;
      std::printf("%-22s", v.c_str());
      for (const ClassProblem& p : problems) {
        absl::StatusOr<Comparison> c = CheckClass(p, v);
        if (!c.ok()) {
          std::printf("%12s", "ERROR");
          continue;
        }
        failures += !c->ok();
        std::printf("%11.3g%s", c->worst_ratio, c->ok() ? " " : "!");
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  std::printf("\n%d (variant, shape, class) cases fail the bar\n", failures);
  return 0;
}

}  // namespace
}  // namespace conv2d

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return conv2d::Main();
}
