#include "conv/core/registry.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/direct/direct.h"
#include "conv/algorithms/direct/direct_tiled.h"
#include "conv/algorithms/fft/fft_fused.h"
#include "tools/lab/fft_tiled.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma.h"
#include "conv/algorithms/triton/triton_igemm.h"
#include "conv/algorithms/winograd/winograd.h"

namespace conv2d {

namespace {
std::mutex& RegistryMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
}  // namespace

void RegisterAll(Registry& registry) {
  RegisterDirect(registry);
  RegisterTritonIgemm(registry);
  RegisterDirectTiled(registry);
  RegisterFftTiled(registry);
  RegisterFftFused(registry);
  RegisterImplicitGemm3xTf32(registry);
  RegisterImplicitGemmWgmma(registry);
  RegisterWinograd(registry);
}

Registry& Registry::Global() {
  static Registry* registry = [] {
    auto* r = new Registry;
    RegisterAll(*r);
    return r;
  }();
  return *registry;
}

absl::Status Registry::Add(std::unique_ptr<Algorithm> algorithm) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (const auto& a : algorithms_) {
    if (a->name() == algorithm->name()) {
      return absl::AlreadyExistsError(
          absl::StrCat("an algorithm named '", algorithm->name(), "' is already registered"));
    }
  }
  algorithms_.push_back(std::move(algorithm));
  return absl::OkStatus();
}

const Algorithm* Registry::Find(absl::string_view name) const {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (const auto& a : algorithms_) {
    if (a->name() == name) return a.get();
  }
  return nullptr;
}

std::vector<const Algorithm*> Registry::All() const {
  std::lock_guard<std::mutex> lock(RegistryMutex());
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
