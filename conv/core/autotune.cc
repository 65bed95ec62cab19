#include "conv/core/autotune.h"

#include <cuda_runtime.h>

#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"
#include "reference/random.h"

namespace conv2d {

namespace {

using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

std::mutex& CacheMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::map<Key, std::string>& Cache() {
  static auto* cache = new std::map<Key, std::string>;
  return *cache;
}

// Device buffers freed on every path out.
struct Buffers {
  std::vector<void*> ptrs;
  ~Buffers() {
    for (void* p : ptrs) cudaFree(p);
  }
  absl::StatusOr<void*> Alloc(size_t bytes) {
    void* p = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, bytes > 0 ? bytes : 1), "autotune cudaMalloc"));
    ptrs.push_back(p);
    return p;
  }
};

absl::StatusOr<double> TimeOne(const Runner& runner, RunArgs args, void* flush,
                               size_t flush_bytes) {
  Buffers local;
  if (runner.workspace_bytes() > 0) {
    ASSIGN_OR_RETURN(args.workspace, local.Alloc(runner.workspace_bytes()));
  }
  args.workspace_bytes = runner.workspace_bytes();
  cudaEvent_t start, stop;
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&start), "cudaEventCreate"));
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&stop), "cudaEventCreate"));
  double best = std::numeric_limits<double>::infinity();
  absl::Status st = runner.Run(args);  // warm-up
  for (int i = 0; st.ok() && i < 3; ++i) {
    st = CudaStatus(cudaMemsetAsync(flush, i, flush_bytes, args.stream), "autotune L2 flush");
    if (st.ok()) st = CudaStatus(cudaEventRecord(start, args.stream), "cudaEventRecord");
    if (st.ok()) st = runner.Run(args);
    if (st.ok()) st = CudaStatus(cudaEventRecord(stop, args.stream), "cudaEventRecord");
    if (st.ok()) st = CudaStatus(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (st.ok()) st = CudaStatus(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (st.ok()) best = std::min(best, double{ms});
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  RETURN_IF_ERROR(st);
  return best;
}

absl::StatusOr<Tuned> Measure(const Shape& shape, const DeviceInfo& device,
                              const std::vector<Candidate>& candidates) {
  // The device must hold x, w, y and the flush buffer; a shape that cannot is refused before its
  // host copies are made (on an overcommitting host a huge vector is not a bad_alloc but a
  // process killed while filling it).
  constexpr size_t kFlushBytes = size_t{256} << 20;
  const double tensor_bytes =
      4.0 * (static_cast<double>(shape.input_elements()) + shape.filter_elements() +
             shape.output_elements());
  size_t free_bytes = 0, total_bytes = 0;
  RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  if (tensor_bytes + kFlushBytes > static_cast<double>(free_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "autotune: ", shape.ToString(), " needs ", tensor_bytes, " bytes of device memory for x, w "
        "and y; ", free_bytes, " are free"));
  }
  Buffers buffers;
  std::vector<float> hx, hw;
  try {
    hx = RandomTensor(1, kInputTensor, shape.input_elements(), Distribution::kNormal);
    hw = RandomTensor(1, kFilterTensor, shape.filter_elements(), Distribution::kNormal);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("autotune: no host memory for the random inputs of ", shape.ToString()));
  }
  ASSIGN_OR_RETURN(void* x, buffers.Alloc(hx.size() * sizeof(float)));
  ASSIGN_OR_RETURN(void* w, buffers.Alloc(hw.size() * sizeof(float)));
  ASSIGN_OR_RETURN(void* y, buffers.Alloc(shape.output_elements() * sizeof(float)));
  ASSIGN_OR_RETURN(void* flush, buffers.Alloc(kFlushBytes));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(x, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice), "copy x"));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(w, hw.data(), hw.size() * sizeof(float), cudaMemcpyHostToDevice), "copy w"));
  cudaStream_t stream;
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&stream), "cudaStreamCreate"));
  RunArgs args;
  args.x = static_cast<const float*>(x);
  args.w = static_cast<const float*>(w);
  args.y = static_cast<float*>(y);
  args.stream = stream;
  Tuned best{nullptr, nullptr};
  double best_ms = std::numeric_limits<double>::infinity();
  for (const Candidate& c : candidates) {
    absl::StatusOr<std::unique_ptr<Runner>> runner =
        c.algorithm->Initialize(shape, c.proposal, device);
    if (!runner.ok()) continue;  // e.g. a workspace the device cannot hold, or another GPU's
    absl::StatusOr<double> ms = TimeOne(**runner, args, flush, kFlushBytes);
    if (!ms.ok()) {
      cudaStreamDestroy(stream);
      return ms.status();
    }
    if (*ms < best_ms) {
      best_ms = *ms;
      best = Tuned{c.algorithm, std::shared_ptr<const Runner>(*std::move(runner))};
    }
  }
  cudaStreamDestroy(stream);
  if (best.algorithm == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("autotune: no algorithm could be timed on ", shape.ToString()));
  }
  return best;
}

}  // namespace

absl::StatusOr<Tuned> Autotune(const Shape& shape, const DeviceInfo& device,
                               const std::vector<Candidate>& candidates) {
  const Key key{device.ordinal, shape.batch,  shape.in_channels, shape.out_channels,
                shape.height,   shape.width,  shape.kernel_h,    shape.kernel_w};
  // One measurement at a time: concurrent timings would disturb each other.
  std::lock_guard<std::mutex> lock(CacheMutex());
  auto it = Cache().find(key);
  if (it != Cache().end()) {
    for (const Candidate& c : candidates) {
      if (c.algorithm->name() != it->second) continue;
      ASSIGN_OR_RETURN(std::unique_ptr<Runner> runner,
                       c.algorithm->Initialize(shape, c.proposal, device));
      return Tuned{c.algorithm, std::shared_ptr<const Runner>(std::move(runner))};
    }
  }
  ASSIGN_OR_RETURN(Tuned tuned, Measure(shape, device, candidates));
  Cache()[key] = tuned.algorithm->name();
  return tuned;
}

}  // namespace conv2d
