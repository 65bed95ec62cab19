#include "tools/lab/lab.h"

#include "tools/lab/fft_tiled.h"

namespace conv2d {

const std::vector<AlgorithmFactory>& LabAlgorithms() {
  static const auto* factories = new std::vector<AlgorithmFactory>{
      &MakeFftTiled,
      &MakeFftTiled3xTf32,
  };
  return *factories;
}

absl::Status RegisterLabAlgorithms(Registry& registry) {
  return registry.AddAll(LabAlgorithms());
}

}  // namespace conv2d
