// winograd's planning: geometry, workspace layout, shape checks and the cost model (no CUDA).
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "conv/algorithms/winograd/winograd_internal.h"
#include "conv/arch/int_math.h"

namespace conv2d {
namespace winograd {

Geometry MakeGeometry(const Shape& s) {
  Geometry g;
  g.tiles_h = CeilDiv(s.out_h(), kOut);
  g.tiles_w = CeilDiv(s.out_w(), kOut);
  g.tiles = s.batch * g.tiles_h * g.tiles_w;
  return g;
}

WorkspaceLayout MakeWorkspaceLayout(const Shape& s) {
  const Geometry g = MakeGeometry(s);
  WorkspaceLayout l;
  l.bytes[kFilter] = sizeof(Real) * kPoints * s.out_channels * s.in_channels;
  l.bytes[kInput] = sizeof(Real) * kPoints * s.in_channels * g.tiles;
  l.bytes[kProduct] = sizeof(Real) * kPoints * s.out_channels * g.tiles;
  l.bytes[kBlasWork] = kBlasWorkspaceBytes;
  size_t at = 0;
  for (int b = 0; b < kNumBuffers; ++b) {
    l.offset[b] = at;
    at += static_cast<size_t>(RoundUp(static_cast<int64_t>(l.bytes[b]), kAlignment));
  }
  l.total_bytes = at + kAlignment;
  return l;
}

absl::Status CheckShape(const Shape& s) {
  if (s.kernel_h != kKernel || s.kernel_w != kKernel) {
    return absl::UnimplementedError(absl::StrCat(
        "winograd: F(4x4, 3x3) takes 3x3 kernels only; this shape's kernel is ", s.kernel_h, "x",
        s.kernel_w));
  }
  if (absl::Status st = CheckFitsInt32(s, "winograd"); !st.ok()) return st;
  // Items (channel, tile) and (out channel, in channel) are indexed with int; cuBLAS
  // takes int sizes and leading dimensions.
  const Geometry g = MakeGeometry(s);
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (s.in_channels * g.tiles > kMax || s.out_channels * g.tiles > kMax) {
    return absl::OutOfRangeError(absl::StrCat("winograd: ", g.tiles, " tiles x ",
                                              s.in_channels, " or ", s.out_channels,
                                              " channels exceed 32-bit indexing"));
  }
  const WorkspaceLayout l = MakeWorkspaceLayout(s);
  if (l.total_bytes > kMaxWorkspaceBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "winograd: ", s.ToString(), " would need ", l.total_bytes,
        " bytes of workspace; the limit is ", kMaxWorkspaceBytes));
  }
  return absl::OkStatus();
}

Cost EstimateCost(const Shape& s) {
  // The three coefficients are a least-squares fit (relative error) to 12 H200 runs, the six cnn
  // 3x3 shapes twice in round 38 (after round 37's transform kernels), all within 4%:
  // tools/fit_auto.py --winograd on docs/data/round38_cnn_igw_[12].json.
  // They are fitted, not the hardware's rates: bytes and GEMM flops grow together on these
  // shapes, so neither term alone is physical (cuBLAS's DGEMM kernels ran at 28-46 TFLOP/s under
  // ncu, rounds 21 and 37). The fixed part is three launches and the kernels' latency.
  constexpr double kBytesPerSecond = 4.97e12;
  constexpr double kGemmFlopsPerSecond = 69.6e12;
  constexpr double kFixedSeconds = 20.0e-6;
  const WorkspaceLayout l = MakeWorkspaceLayout(s);
  const Geometry g = MakeGeometry(s);
  Cost c;
  // Each transform reads its tensor and writes its buffer (or reads M and writes y); the GEMMs
  // read U and V and write M.
  c.bytes = 4.0 * (s.filter_elements() + s.input_elements() + s.output_elements()) +
            2.0 * (l.bytes[kFilter] + l.bytes[kInput] + l.bytes[kProduct]);
  c.gemm_flops = 2.0 * kPoints * s.out_channels * s.in_channels * static_cast<double>(g.tiles);
  c.seconds = c.bytes / kBytesPerSecond + c.gemm_flops / kGemmFlopsPerSecond + kFixedSeconds;
  return c;
}

}  // namespace winograd
}  // namespace conv2d
