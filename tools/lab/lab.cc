#include "tools/lab/lab.h"

#include "conv/algorithms/depthwise/depthwise.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma.h"
#include "tools/lab/fft_tiled.h"

namespace conv2d {

const std::vector<AlgorithmFactory>& LabAlgorithms() {
  static const auto* factories = new std::vector<AlgorithmFactory>{
      &MakeFftTiled,
      &MakeFftTiled3xTf32,
      [] { return depthwise_internal::MakeDepthwiseForced(/*staged=*/true); },
      [] { return depthwise_internal::MakeDepthwiseForced(/*staged=*/false); },
      [] { return MakeImplicitGemmWgmmaForced(/*split_in_kernel=*/false); },
      [] { return MakeImplicitGemmWgmmaForced(/*split_in_kernel=*/true); },
      [] { return MakeImplicitGemmWgmmaWgradForced(/*im2col=*/false); },
      [] { return MakeImplicitGemmWgmmaWgradForced(/*im2col=*/true); },
      [] { return MakeImplicitGemmWgmmaDgradForced(/*fold=*/false); },
      [] { return MakeImplicitGemmWgmmaDgradForced(/*fold=*/true); },
  };
  return *factories;
}

absl::Status RegisterLabAlgorithms(Registry& registry) {
  return registry.AddAll(LabAlgorithms());
}

}  // namespace conv2d
