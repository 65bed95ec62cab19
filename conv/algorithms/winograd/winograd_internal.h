// winograd internals: the F(4x4, 3x3) transforms, the tile geometry, the workspace layout and the
// cost model, as plain C++ (the transforms host+device) so that the CPU test runs the very
// arithmetic the GPU runs.
//
// Winograd's minimal filtering (Lavin & Gray 2016) for a 3x3 kernel and 4x4 output tiles: each
// 6x6 input tile d and 3x3 filter g give
//   Y (4x4) = A^T [ (G g G^T) .* (B^T d B) ] A
// so that a tile's 16 outputs cost 36 multiplies per (input, output) channel pair instead of 144.
// Summed over the input channels, the 36 element-wise products become 36 independent GEMMs:
//   U[p][o][c] = (G w[o][c] G^T)[p]            filter transform, every call
//   V[p][c][t] = (B^T x-tile(c, t) B)[p]       input transform, t = (b, tile row, tile column)
//   M[p]       = U[p] (O x C) * V[p] (C x T)   36 fp64 GEMMs (cuBLAS DGEMM, fp64 tensor cores)
//   y-tile(o, t) = A^T M[.][o][t] A            output transform, the valid part only
// The points are 0, +-1, +-2 (and infinity): every coefficient of B and A is a small integer.
// Why fp64 for U, V, M and the GEMM: the transformed values are much larger than the outputs
// they combine into (A^T's coefficients reach 8, so up to 64 in 2D, with heavy cancellation),
// and fp32 accumulation over the channels is what that amplifies. Measured (the CPU emulation,
// (2,256,256,14,3), normal inputs): worst error 1.44x the tolerance with fp32 GEMM accumulation,
// 0.15x with fp64 accumulation of the same fp32-rounded U and V; cuBLAS's SGEMM failed a golden
// file at 1.46x (docs/PERF.md, session 3). On an H200 the fp64 tensor cores (DMMA) run at the
// fp32 CUDA cores' rate, so the GEMM costs about what SGEMM does; the buffers double in size.
#ifndef CONV2D_CONV_WINOGRAD_INTERNAL_H_
#define CONV2D_CONV_WINOGRAD_INTERNAL_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "conv/arch/host_device.h"
#include "conv/shape.h"

namespace conv2d {
namespace winograd {

constexpr int kOut = 4;          // outputs per tile side (m)
constexpr int kKernel = 3;       // kernel side (r)
constexpr int kTile = 6;         // input tile side, m + r - 1
constexpr int kPoints = 36;      // kTile^2: GEMMs per call
constexpr size_t kAlignment = 256;                    // of every buffer (cuBLAS)
using Real = double;  // U, V, M and the GEMM (see above)
constexpr size_t kBlasWorkspaceBytes = size_t{4} << 20;
constexpr size_t kMaxWorkspaceBytes = size_t{1} << 30;  // past this, refuse (other variants fit)

struct Geometry {
  int64_t tiles_h = 0, tiles_w = 0;  // per image: ceil(out / 4)
  int64_t tiles = 0;                 // T = batch * tiles_h * tiles_w
};
Geometry MakeGeometry(const Shape& shape);

enum Buffer { kFilter, kInput, kProduct, kBlasWork, kNumBuffers };
struct WorkspaceLayout {
  size_t offset[kNumBuffers] = {};  // from the workspace base rounded up to kAlignment
  size_t bytes[kNumBuffers] = {};
  size_t total_bytes = 0;           // the sum, aligned, plus kAlignment for an unaligned base
};
WorkspaceLayout MakeWorkspaceLayout(const Shape& shape);

// OK for Kh = Kw = 3 whose workspace is <= kMaxWorkspaceBytes and whose GEMM sizes and element
// counts fit in int32 (cuBLAS's int arguments, the kernels' indices). Never touches the GPU.
absl::Status CheckShape(const Shape& shape);

// Modelled seconds on an H200 (before the per-algorithm calibration factor): the bytes of the
// transform kernels and of the GEMMs, the GEMMs' FLOPs and a fixed part, with coefficients fitted
// to measured runs (see winograd_plan.cc).
struct Cost {
  double bytes = 0, gemm_flops = 0, seconds = 0;
};
Cost EstimateCost(const Shape& shape);

// ---- The tiles and the transforms (host and device) --------------------------------------------

// Item n of the input (output) transform, six threads (one per line of the tile), takes channel
// n / T and tile t = n % T, where t = (image b, tile row, tile column) row-major within each
// image; the tile's 6x6 input window and its 4x4 outputs start at row 4 * tile row, column
// 4 * tile column of their planes.
struct TileIndex {
  int channel, b, row0, col0;
};
CONV2D_HOST_DEVICE inline TileIndex TileOfThread(int n, int tiles, int tiles_h, int tiles_w) {
  TileIndex r;
  r.channel = n / tiles;
  const int t = n - r.channel * tiles;
  const int per_image = tiles_h * tiles_w;
  r.b = t / per_image;
  const int rest = t - r.b * per_image;
  const int th = rest / tiles_w;
  r.row0 = kOut * th;
  r.col0 = kOut * (rest - th * tiles_w);
  return r;
}

// u = G g G^T in double. g row-major 3x3, u row-major 6x6.
//   G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]
// Entry i of G g for one line g of 3; the filter kernel's threads each compute one row.
CONV2D_HOST_DEVICE inline double GRow(const double g[3], int i) {
  switch (i) {
    case 0: return g[0] / 4;
    case 1: return -(g[0] + g[1] + g[2]) / 6;
    case 2: return -(g[0] - g[1] + g[2]) / 6;
    case 3: return g[0] / 24 + g[1] / 12 + g[2] / 6;
    case 4: return g[0] / 24 - g[1] / 12 + g[2] / 6;
    default: return g[2];
  }
}
CONV2D_HOST_DEVICE inline void GRows(const double g[3], double out[6]) {
  for (int i = 0; i < 6; ++i) out[i] = GRow(g, i);
}

// Row i of u = G g G^T: G applied to row i of G g. One filter-kernel thread computes one row.
CONV2D_HOST_DEVICE inline void FilterTransformRow(const float g[9], int i, double u_row[6]) {
  double t[3];  // row i of G g
  for (int j = 0; j < 3; ++j) {
    const double col[3] = {g[j], g[3 + j], g[6 + j]};
    t[j] = GRow(col, i);
  }
  GRows(t, u_row);
}
CONV2D_HOST_DEVICE inline void FilterTransform(const float g[9], double u[36]) {
  for (int i = 0; i < 6; ++i) FilterTransformRow(g, i, u + 6 * i);
}

// out = B^T d for one line of 6.
//   B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0;
//          0 4 0 -5 0 1]
template <class T>
CONV2D_HOST_DEVICE inline void BtRows(const T d[6], T out[6]) {
  out[0] = 4 * d[0] - 5 * d[2] + d[4];
  out[1] = -4 * (d[1] + d[2]) + (d[3] + d[4]);
  out[2] = 4 * (d[1] - d[2]) + (d[4] - d[3]);
  out[3] = 2 * (d[3] - d[1]) + (d[4] - d[2]);
  out[4] = 2 * (d[1] - d[3]) + (d[4] - d[2]);
  out[5] = 4 * d[1] - 5 * d[3] + d[5];
}

// v = B^T d B; d and v row-major 6x6. In fp64 like the rest of the chain: the fp32 version's
// roundings, amplified by the output transform, were most of what was left of the error
// (worst 0.107x the tolerance on (2,256,256,14,3) in fp32; docs/PERF.md round 20).
CONV2D_HOST_DEVICE inline void InputTransform(const float d[36], double v[36]) {
  double t[36];  // B^T d, row-major
  for (int j = 0; j < 6; ++j) {
    const double col[6] = {d[j], d[6 + j], d[12 + j], d[18 + j], d[24 + j], d[30 + j]};
    double out[6];
    BtRows(col, out);
    for (int i = 0; i < 6; ++i) t[6 * i + j] = out[i];
  }
  for (int i = 0; i < 6; ++i) BtRows(t + 6 * i, v + 6 * i);  // (B^T d) B
}

// out = A^T m for one line of 6.
//   A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
template <class T>
CONV2D_HOST_DEVICE inline void AtRows(const T m[6], T out[4]) {
  const T s12 = m[1] + m[2], d12 = m[1] - m[2];
  const T s34 = m[3] + m[4], d34 = m[3] - m[4];
  out[0] = m[0] + s12 + s34;
  out[1] = d12 + 2 * d34;
  out[2] = s12 + 4 * s34;
  out[3] = d12 + 8 * d34 + m[5];
}

// y = A^T m A; m row-major 6x6, y row-major 4x4.
template <class T>
CONV2D_HOST_DEVICE inline void OutputTransform(const T m[36], T y[16]) {
  T t[24];  // A^T m, 4x6 row-major
  for (int j = 0; j < 6; ++j) {
    const T col[6] = {m[j], m[6 + j], m[12 + j], m[18 + j], m[24 + j], m[30 + j]};
    T out[4];
    AtRows(col, out);
    for (int i = 0; i < 4; ++i) t[6 * i + j] = out[i];
  }
  for (int i = 0; i < 4; ++i) AtRows(t + 6 * i, y + 4 * i);
}

}  // namespace winograd
}  // namespace conv2d

#endif  // CONV2D_CONV_WINOGRAD_INTERNAL_H_
