// The registry of algorithms. The library's own are listed once, as factories, in
// conv/algorithms/builtin.cc; tools and tests may add more (tools/lab). The dispatcher
// (plan.cc) only ever loops over the registry. Variant headers do not include this file: they
// declare a factory, and the arrows run from the registry to the algorithms.
#ifndef CONV2D_CONV_CORE_REGISTRY_H_
#define CONV2D_CONV_CORE_REGISTRY_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "conv/core/algorithm.h"

namespace conv2d {

class Registry {
 public:
  // The process-wide registry, filled with BuiltinAlgorithms() on first use (defined in
  // conv/algorithms/builtin.cc, beside that list).
  static Registry& Global();
  // A new registry holding `factories`' algorithms; status() says why any did not register.
  static Registry* MakeFilled(const std::vector<AlgorithmFactory>& factories);

  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // AlreadyExists if an algorithm of the same name is registered, InvalidArgument for a name
  // outside [a-z0-9_] or one of the reserved names "auto" and "autotune".
  absl::Status Add(std::unique_ptr<Algorithm> algorithm);
  // Adds each factory's algorithm; the first error stops and is returned.
  absl::Status AddAll(const std::vector<AlgorithmFactory>& factories);
  // nullptr if no algorithm has that name.
  const Algorithm* Find(absl::string_view name) const;
  std::vector<const Algorithm*> All() const;
  std::vector<std::string> Names() const;
  // Why the built-in list did not register whole (e.g. two algorithms of one name), else OK.
  // Plan::Create returns it rather than run with a registry that silently lost an algorithm.
  const absl::Status& status() const { return status_; }

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Algorithm>> algorithms_;
  absl::Status status_;
};

}  // namespace conv2d

#endif  // CONV2D_CONV_CORE_REGISTRY_H_
