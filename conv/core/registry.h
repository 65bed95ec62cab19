// The registry of algorithms. Variants join through RegisterAll (registry.cc), one line each;
// the dispatcher (plan.cc) only ever loops over the registry.
#ifndef CONV2D_CONV_REGISTRY_H_
#define CONV2D_CONV_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "conv/core/algorithm.h"

namespace conv2d {

class Registry {
 public:
  // The process-wide registry, filled by RegisterAll on first use.
  static Registry& Global();

  // Fails with AlreadyExists if an algorithm of the same name is registered.
  absl::Status Add(std::unique_ptr<Algorithm> algorithm);
  // nullptr if no algorithm has that name.
  const Algorithm* Find(absl::string_view name) const;
  std::vector<const Algorithm*> All() const;
  std::vector<std::string> Names() const;

 private:
  std::vector<std::unique_ptr<Algorithm>> algorithms_;
};

// Registers every built-in variant. Explicit, so the linker cannot drop a variant.
void RegisterAll(Registry& registry);

}  // namespace conv2d

#endif  // CONV2D_CONV_REGISTRY_H_
