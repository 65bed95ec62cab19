// Without a CUDA device the benchmark times the CPU reference on a small shape instead, so that
// the binary still shows it works on a machine without a GPU.
#ifndef CONV2D_TOOLS_BENCHMARK_CPU_FALLBACK_H_
#define CONV2D_TOOLS_BENCHMARK_CPU_FALLBACK_H_

namespace conv2d {
namespace bench {

// Runs Google Benchmark with `argv` (its own --benchmark_* flags only); returns the exit code.
int RunCpuReference(int argc, char** argv);

}  // namespace bench
}  // namespace conv2d

#endif  // CONV2D_TOOLS_BENCHMARK_CPU_FALLBACK_H_
