#include "conv/core/timing.h"

#include <algorithm>
#include <limits>

#include "conv/core/cuda_status.h"
#include "conv/core/status_macros.h"

namespace conv2d {

absl::StatusOr<EventPair> EventPair::Create() {
  EventPair e;
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&e.start_), "cudaEventCreate"));
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&e.stop_), "cudaEventCreate"));
  return e;
}

EventPair::EventPair(EventPair&& o) noexcept : start_(o.start_), stop_(o.stop_) {
  o.start_ = o.stop_ = nullptr;
}

EventPair& EventPair::operator=(EventPair&& o) noexcept {
  if (this != &o) {
    Destroy();
    start_ = o.start_;
    stop_ = o.stop_;
    o.start_ = o.stop_ = nullptr;
  }
  return *this;
}

EventPair::~EventPair() { Destroy(); }

void EventPair::Destroy() {
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (stop_ != nullptr) cudaEventDestroy(stop_);
}

absl::Status EventPair::Start(cudaStream_t stream) {
  return CudaStatus(cudaEventRecord(start_, stream), "cudaEventRecord");
}

absl::StatusOr<double> EventPair::StopMs(cudaStream_t stream) {
  RETURN_IF_ERROR(CudaStatus(cudaEventRecord(stop_, stream), "cudaEventRecord"));
  RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(stop_), "timed call"));
  float ms = 0;
  RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime"));
  return static_cast<double>(ms);
}

double CallTimes::mean_ms() const {
  if (ms.empty()) return std::numeric_limits<double>::quiet_NaN();
  double total = 0;
  for (double t : ms) total += t;
  return total / ms.size();
}

double CallTimes::best_ms() const {
  double best = std::numeric_limits<double>::infinity();
  for (double t : ms) best = std::min(best, t);
  return best;
}

absl::StatusOr<KernelBotTimer> KernelBotTimer::Create(size_t flush_bytes) {
  ASSIGN_OR_RETURN(DeviceBuffer flush, DeviceBuffer::Allocate(flush_bytes, "cudaMalloc L2 flush"));
  ASSIGN_OR_RETURN(EventPair events, EventPair::Create());
  return KernelBotTimer(std::move(flush), flush_bytes, std::move(events));
}

absl::Status KernelBotTimer::FlushL2(cudaStream_t stream) const {
  return CudaStatus(cudaMemsetAsync(flush_.p, 0, flush_bytes_, stream), "flush L2");
}

absl::StatusOr<CallTimes> KernelBotTimer::Time(const TimedCall& call, cudaStream_t stream,
                                               int calls, int warmup) {
  CallTimes times;
  times.ms.reserve(calls > 0 ? calls : 0);
  for (int i = -warmup; i < calls; ++i) {
    RETURN_IF_ERROR(FlushL2(stream));
    RETURN_IF_ERROR(events_.Start(stream));
    RETURN_IF_ERROR(call(stream));
    ASSIGN_OR_RETURN(double ms, events_.StopMs(stream));
    if (i >= 0) times.ms.push_back(ms);
  }
  return times;
}

absl::StatusOr<double> TimeBackToBack(const TimedCall& call, cudaStream_t stream, int iterations,
                                      int warmup) {
  if (iterations < 1) return absl::InvalidArgumentError("TimeBackToBack: iterations < 1");
  ASSIGN_OR_RETURN(EventPair events, EventPair::Create());
  for (int i = 0; i < warmup; ++i) RETURN_IF_ERROR(call(stream));
  RETURN_IF_ERROR(events.Start(stream));
  for (int i = 0; i < iterations; ++i) RETURN_IF_ERROR(call(stream));
  ASSIGN_OR_RETURN(double ms, events.StopMs(stream));
  return ms / iterations;
}

}  // namespace conv2d
