#include "conv/core/autotune.h"

#include <cuda_runtime.h>

#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "conv/core/bias.h"
#include "conv/core/cuda_status.h"
#include "conv/core/device_buffer.h"
#include "conv/core/status_macros.h"
#include "conv/core/timing.h"
#include "reference/random.h"

namespace conv2d {

namespace {

// (device ordinal, Shape::ToString): every field of the problem, the geometry and the bias
// included, so that shapes alike but for padding, stride or bias are timed apart.
using Key = std::pair<int, std::string>;

std::mutex& CacheMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::map<Key, std::string>& Cache() {
  static auto* cache = new std::map<Key, std::string>;
  return *cache;
}

// The best of three calls of `runner` as a plan runs it (with the bias pass of a runner that
// does not add the bias itself), after one warm-up, each after an L2 flush.
absl::StatusOr<double> TimeOne(const Runner& runner, const Shape& shape, RunArgs args,
                               KernelBotTimer& timer) {
  ASSIGN_OR_RETURN(DeviceBuffer ws,
                   DeviceBuffer::Allocate(runner.workspace_bytes(), "autotune workspace"));
  args.workspace = ws.p;
  args.workspace_bytes = runner.workspace_bytes();
  const TimedCall call = [&](cudaStream_t stream) {
    RunArgs a = args;
    a.stream = stream;
    return RunWithBias(runner, shape, a);
  };
  ASSIGN_OR_RETURN(CallTimes t, timer.Time(call, args.stream, /*calls=*/3, /*warmup=*/1));
  return t.best_ms();
}

absl::StatusOr<Tuned> Measure(const Shape& shape, const DeviceInfo& device,
                              const std::vector<Candidate>& candidates) {
  // The device must hold x, w, y, the bias and the flush buffer; a shape that cannot is refused
  // before its host copies are made (on an overcommitting host a huge vector is not a bad_alloc
  // but a process killed while filling it).
  const double tensor_bytes =
      4.0 * (static_cast<double>(shape.input_elements()) + shape.filter_elements() +
             shape.output_elements() + (shape.has_bias ? shape.out_channels : 0));
  size_t free_bytes = 0, total_bytes = 0;
  RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  if (tensor_bytes + kL2FlushBytes > static_cast<double>(free_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "autotune: ", shape.ToString(), " needs ", tensor_bytes,
        " bytes of device memory for x, w, y and the bias; ", free_bytes, " are free"));
  }
  // Every buffer the operation reads holds randn (an FFT's spike handling depends on the data);
  // the written one is overwritten, so y (dy in the backward) is drawn only where it is read.
  std::vector<float> hx, hw, hy;
  try {
    hx = RandomTensor(1, kInputTensor, shape.input_elements(), Distribution::kNormal);
    hw = RandomTensor(1, kFilterTensor, shape.filter_elements(), Distribution::kNormal);
    if (shape.op != Op::kFprop) {
      hy = RandomTensor(1, kGradTensor, shape.output_elements(), Distribution::kNormal);
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("autotune: no host memory for the random inputs of ", shape.ToString()));
  }
  ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Allocate(hx.size() * sizeof(float), "autotune x"));
  ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::Allocate(hw.size() * sizeof(float), "autotune w"));
  ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Allocate(shape.output_elements() * sizeof(float),
                                                          "autotune y"));
  // A bias of zeros: its values do not change the time.
  ASSIGN_OR_RETURN(DeviceBuffer bias,
                   DeviceBuffer::Allocate(shape.has_bias ? shape.out_channels * sizeof(float) : 0,
                                          "autotune bias"));
  if (shape.has_bias) {
    RETURN_IF_ERROR(CudaStatus(cudaMemset(bias.p, 0, shape.out_channels * sizeof(float)),
                               "zero the bias"));
  }
  ASSIGN_OR_RETURN(KernelBotTimer timer, KernelBotTimer::Create());
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(x.p, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice), "copy x"));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(w.p, hw.data(), hw.size() * sizeof(float), cudaMemcpyHostToDevice), "copy w"));
  if (!hy.empty()) {
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy(y.p, hy.data(), hy.size() * sizeof(float), cudaMemcpyHostToDevice),
        "copy dy"));
  }
  cudaStream_t stream;
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&stream), "cudaStreamCreate"));
  RunArgs args;
  static_cast<Tensors&>(args) =
      BindRoles(shape, x.as<float>(), w.as<float>(), bias.as<float>(), y.as<float>());
  args.stream = stream;
  Tuned best{nullptr, nullptr};
  double best_ms = std::numeric_limits<double>::infinity();
  absl::Status status;
  for (const Candidate& c : candidates) {
    absl::StatusOr<std::unique_ptr<Runner>> runner =
        c.algorithm->Initialize(shape, c.proposal, device);
    if (!runner.ok()) continue;  // e.g. a workspace the device cannot hold, or another GPU's
    absl::StatusOr<double> ms = TimeOne(**runner, shape, args, timer);
    if (!ms.ok()) {
      status = ms.status();
      break;
    }
    if (*ms < best_ms) {
      best_ms = *ms;
      best = Tuned{c.algorithm, std::shared_ptr<const Runner>(*std::move(runner))};
    }
  }
  cudaStreamDestroy(stream);
  RETURN_IF_ERROR(status);
  if (best.algorithm == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("autotune: no algorithm could be timed on ", shape.ToString()));
  }
  return best;
}

}  // namespace

absl::StatusOr<Tuned> Autotune(const Shape& shape, const DeviceInfo& device,
                               const std::vector<Candidate>& candidates) {
  const Key key{device.ordinal, shape.ToString()};
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

bool AutotuneCached(const Shape& shape, int device_ordinal) {
  std::lock_guard<std::mutex> lock(CacheMutex());
  return Cache().count(Key{device_ordinal, shape.ToString()}) > 0;
}

}  // namespace conv2d
