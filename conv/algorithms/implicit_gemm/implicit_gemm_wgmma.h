// "implicit_gemm_wgmma": implicit-GEMM convolution on Hopper's warpgroup tensor-core instructions
// (wgmma, sm_90a) in split precision (3xTF32), the same arithmetic and accuracy argument as
// implicit_gemm_3xtf32 with the operand splitting done once per element instead of once per warp
// per fragment. Needs an sm_90 device: Initialize says so elsewhere. The tiling and the index
// algebra are in implicit_gemm_wgmma_internal.h.
#ifndef CONV2D_CONV_IMPLICIT_GEMM_WGMMA_H_
#define CONV2D_CONV_IMPLICIT_GEMM_WGMMA_H_

#include <memory>

#include "conv/core/algorithm.h"

namespace conv2d {

std::unique_ptr<Algorithm> MakeImplicitGemmWgmma();
// "implicit_gemm_wgmma_split_kernel" (the filter split by its own kernel into the workspace, then
// the main kernel) and "implicit_gemm_wgmma_split_in_kernel" (one launch: the main kernel's copy
// warpgroup splits each filter tile into shared memory; whole-tile schedules without groups
// only): the two paths forced, so that both can be timed and tested on one shape. Measurement
// only: registered by tools/lab, never ranked by auto.
std::unique_ptr<Algorithm> MakeImplicitGemmWgmmaForced(bool split_in_kernel);
// "implicit_gemm_wgmma_wgrad_gemm" and "implicit_gemm_wgmma_wgrad_im2col": the rule's algorithm
// with wgrad's form forced, its own GEMM or the im2col form (implicit_gemm_wgmma_wgrad.h), so
// that each is timed and tested where the model takes the other. Measurement only, as the two
// above.
std::unique_ptr<Algorithm> MakeImplicitGemmWgmmaWgradForced(bool im2col);
// "implicit_gemm_wgmma_dgrad_phases" and "implicit_gemm_wgmma_dgrad_fold": the rule's algorithm
// with the transposed dgrad's form forced (transposed_dgrad.h: the stride phases and their
// scatter, or the fold's one 1x1 and its gather), so that each is timed where the rule takes
// the other. Measurement only, as the four above.
std::unique_ptr<Algorithm> MakeImplicitGemmWgmmaDgradForced(bool fold);

}  // namespace conv2d

#endif  // CONV2D_CONV_IMPLICIT_GEMM_WGMMA_H_
