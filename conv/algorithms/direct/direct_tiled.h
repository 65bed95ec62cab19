// "direct_tiled": tiled shared-memory direct convolution on CUDA cores, for any shape the plan
// accepts. Each thread block computes a tile of output pixels for a block of output channels;
// input tiles (with halo) and filter slices are staged in shared memory one "stage" at a time
// (a few input channels, or a chunk of kernel rows, or a chunk of one kernel row when the kernel
// is very wide), each thread keeps 4 pixels x 8 output channels in fp32 registers for one stage
// and folds them into fp64 accumulators after it. That blocked accumulation is what keeps long
// reductions (131072 terms on the largest KernelBot case) inside the accuracy bar, where a single
// fp32 accumulator does not.
#ifndef CONV2D_CONV_DIRECT_TILED_H_
#define CONV2D_CONV_DIRECT_TILED_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include <memory>

#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

std::unique_ptr<Algorithm> MakeDirectTiled();

// Internals exposed so that the planning and the kernel's index arithmetic can be tested on a
// machine without a GPU. Not part of the library's API.
namespace direct_tiled_internal {

// Shared memory for one stage (filter slice + input tile) when the caller does not say
// otherwise. Each block also holds 64 KiB of fp64 accumulators: 104 KiB per block, two per SM.
constexpr int64_t kDefaultSmemBudgetBytes = 40 * 1024;

// How one launch is cut up.
struct Tiling {
  int config = 0;          // which compiled tile configuration (see kConfigs in the .cu)
  int tile_h = 0;          // output rows per block
  int tile_w = 0;          // output columns per block
  int block_channels = 0;  // output channels per block
  // One stage stages chan_chunk input channels x row_chunk kernel rows x col_chunk kernel
  // columns. Either whole kernels (row_chunk = kernel_h, col_chunk = kernel_w), or one channel
  // and whole kernel rows (col_chunk = kernel_w), or one channel and one row: then a stage's
  // filter terms are contiguous in the OIHW filter, which the loader relies on.
  int chan_chunk = 0;
  int row_chunk = 0;
  int col_chunk = 0;
  int in_stride = 0;        // floats per staged input row (padded against bank conflicts)
  int64_t w_floats = 0;     // floats of the staged filter slice (the input tile follows it)
  int64_t stage_bytes = 0;  // shared memory of one stage, within the budget
  int64_t smem_bytes = 0;   // dynamic shared memory per block: fp64 accumulators + stage
  int64_t tiles_h = 0, tiles_w = 0, channel_blocks = 0;
  int64_t blocks = 0;  // batch * tiles_h * tiles_w * channel_blocks
  int64_t stages = 0;  // stages per block (each one: two barriers and one fp64 fold)
};

// Number of compiled tile configurations.
int NumConfigs();

// Picks a configuration (the one with the smallest modelled time, or `force_config` when >= 0)
// and the stage sizes whose staged data fit `smem_budget_bytes`. OutOfRange when a dimension
// exceeds 2^30 or the grid would exceed 2^31-1 blocks.
absl::StatusOr<Tiling> PlanTiling(const Shape& shape, int num_sms,
                                  int64_t smem_budget_bytes = kDefaultSmemBudgetBytes,
                                  int force_config = -1);

// Runs the kernel's own per-thread code on the CPU, block by block and thread by thread (shared
// memory poisoned with NaN before every stage, every shared and global index bounds-checked), and
// returns y. Slow: for tests on small shapes.
absl::StatusOr<std::vector<float>> SimulateOnHost(const Shape& shape, const Tiling& tiling,
                                                  const float* x, const float* w);

}  // namespace direct_tiled_internal
}  // namespace conv2d

#endif  // CONV2D_CONV_DIRECT_TILED_H_
