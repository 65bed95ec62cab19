#include "tools/benchmark/cpu_fallback.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "conv/shape.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace conv2d {
namespace bench {
namespace {

void BM_ReferenceCpu(benchmark::State& state, Shape shape) {
  const std::vector<float> x = RandomTensor(1, kInputTensor, shape.input_elements());
  const std::vector<float> w = RandomTensor(1, kFilterTensor, shape.filter_elements());
  for (auto _ : state) {
    std::vector<double> y = ReferenceConv(shape, x.data(), w.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(shape.flops() * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

}  // namespace

int RunCpuReference(int argc, char** argv) {
  const Shape shape = Shape::KernelBot(32, 4, 16, 2);
  benchmark::RegisterBenchmark(absl::StrCat("reference_cpu/", shape.ToString()).c_str(),
                               BM_ReferenceCpu, shape)
      ->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace bench
}  // namespace conv2d
