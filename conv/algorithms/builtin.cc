// Adding an algorithm to the library: its folder under conv/algorithms/, one line below, and its
// target in this package's BUILD (docs/DESIGN.md, "Adding an algorithm").
#include "conv/algorithms/builtin.h"

#include "conv/algorithms/depthwise/depthwise.h"
#include "conv/algorithms/depthwise/depthwise_dgrad.h"
#include "conv/algorithms/direct/direct.h"
#include "conv/algorithms/direct/direct_tiled.h"
#include "conv/algorithms/dot/dot.h"
#include "conv/algorithms/fft/fft_depthwise.h"
#include "conv/algorithms/fft/fft_fused.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_3xtf32.h"
#include "conv/algorithms/implicit_gemm/implicit_gemm_wgmma.h"
#include "conv/algorithms/implicit_gemm/pointwise_wgrad.h"
#include "conv/algorithms/triton/triton_igemm.h"
#include "conv/algorithms/winograd/winograd.h"
#include "conv/core/registry.h"

namespace conv2d {

const std::vector<AlgorithmFactory>& BuiltinAlgorithms() {
  static const auto* factories = new std::vector<AlgorithmFactory>{
      &MakeDirect,
      &MakeTritonIgemm,
      &MakeDirectTiled,
      &MakeFftFused,
      &MakeFftFused3xTf32,
      &MakeImplicitGemm3xTf32,
      &MakeImplicitGemmWgmma,
      &MakeWinograd,
      &MakeDepthwise,
      &MakeDot,
      &MakeFftDepthwise,
      &MakeGroupedDirect,
      &MakeDepthwiseDgrad,
      &MakePointwiseWgrad,
  };
  return *factories;
}

Registry& Registry::Global() {
  static Registry* registry = Registry::MakeFilled(BuiltinAlgorithms());
  return *registry;
}

}  // namespace conv2d
