// The benchmark's suites: named lists of cases, each a problem to time and, in the nets suite,
// which networks have it. The lists are data (suites.cc), so that what a case is (a Shape, and
// everything it will carry) is decided in one place and the runner and reports only pass it on.
#ifndef CONV2D_TOOLS_BENCHMARK_SUITES_H_
#define CONV2D_TOOLS_BENCHMARK_SUITES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "conv/shape.h"

namespace conv2d {
namespace bench {

// The nets suite's batch: a forward pass's convolutions at this batch are what it totals.
inline constexpr int64_t kNetsBatch = 32;

// One network's use of a case's shape.
struct NetUse {
  std::string net;
  std::string module;
  int count = 0;
  // The network's input layer (it reads the images, Cin = 3): a training step computes no dx for
  // it (the images need no gradient; PyTorch's autograd and the library's own node skip it).
  bool input = false;
};

// A case to run and, in the nets suite, which networks use it and how often.
struct Case {
  Shape shape;
  std::vector<NetUse> uses;
  uint64_t seed = 0;  // of its inputs: --seed plus the case's index (AssignSeeds)
};

// The suites' names, the default first.
const std::vector<std::string>& SuiteNames();

// The cases of suite `name` (one of SuiteNames()); InvalidArgument naming the suites otherwise.
absl::StatusOr<std::vector<Case>> SuiteCases(const std::string& name);

// Case i's seed is `first` + i, wherever the case came from.
void AssignSeeds(uint64_t first, std::vector<Case>* cases);

// --op's value: "fprop", "dgrad", "wgrad", or "train" (all three, in that order).
absl::StatusOr<std::vector<Op>> OpsFromFlag(const std::string& op);
// Each case once per operation, the operations of a case together (a dgrad case has no bias:
// the bias gradient is wgrad's).
std::vector<Case> ForOps(const std::vector<Case>& cases, const std::vector<Op>& ops);

}  // namespace bench
}  // namespace conv2d

#endif  // CONV2D_TOOLS_BENCHMARK_SUITES_H_
