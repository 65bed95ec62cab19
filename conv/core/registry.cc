#include "conv/core/registry.h"

#include "absl/strings/str_cat.h"

namespace conv2d {

// Registry::Global() is defined beside the list it is filled with, in conv/algorithms/builtin.cc:
// the core knows no algorithm.

Registry* Registry::MakeFilled(const std::vector<AlgorithmFactory>& factories) {
  auto* r = new Registry;
  r->status_ = r->AddAll(factories);
  return r;
}

absl::Status Registry::Add(std::unique_ptr<Algorithm> algorithm) {
  if (algorithm == nullptr) return absl::InvalidArgumentError("a null algorithm");
  const std::string name = algorithm->name();
  const bool well_formed =
      !name.empty() && name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") ==
                           std::string::npos;
  if (!well_formed || name == "auto" || name == "autotune") {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", name, "' cannot name an algorithm: [a-z0-9_]+, and not 'auto' or 'autotune'"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& a : algorithms_) {
    if (a->name() == name) {
      return absl::AlreadyExistsError(
          absl::StrCat("an algorithm named '", name, "' is already registered"));
    }
  }
  algorithms_.push_back(std::move(algorithm));
  return absl::OkStatus();
}

absl::Status Registry::AddAll(const std::vector<AlgorithmFactory>& factories) {
  for (AlgorithmFactory make : factories) {
    absl::Status st = Add(make());
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

const Algorithm* Registry::Find(absl::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& a : algorithms_) {
    if (a->name() == name) return a.get();
  }
  return nullptr;
}

std::vector<const Algorithm*> Registry::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const Algorithm*> out;
  for (const auto& a : algorithms_) out.push_back(a.get());
  return out;
}

std::vector<std::string> Registry::Names() const {
  std::vector<std::string> out;
  for (const Algorithm* a : All()) out.push_back(a->name());
  return out;
}

}  // namespace conv2d
