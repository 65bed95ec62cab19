// How the project times GPU work, in one place, so that the benchmark, autotune, the tools and
// the throughput tests measure the same way:
//   * KernelBotTimer: KernelBot's protocol, each timed call cold: a 256 MB write evicts L2, then
//     CUDA events around exactly one call, then a wait for it. Per-call times come back; the
//     caller takes the mean (the benchmark, README.md) or the best (autotune).
//   * TimeBackToBack: warm calls back to back with one pair of events around them all, the mean
//     per call: for parts too short for a flush to leave their time readable (fft_fused's
//     stages, throughput tests).
// The timed work is a callable that enqueues one call on the given stream.
#ifndef CONV2D_CONV_CORE_TIMING_H_
#define CONV2D_CONV_CORE_TIMING_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "conv/core/device_buffer.h"

namespace conv2d {

// KernelBot's L2 flush: 256 MB written before every timed call.
inline constexpr size_t kL2FlushBytes = size_t{256} << 20;

// Enqueues one call of what is timed on `stream`.
using TimedCall = std::function<absl::Status(cudaStream_t stream)>;

// Two CUDA events: the device time of what is enqueued on a stream between Start and Stop.
class EventPair {
 public:
  static absl::StatusOr<EventPair> Create();
  EventPair(EventPair&& o) noexcept;
  EventPair& operator=(EventPair&& o) noexcept;
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  ~EventPair();

  absl::Status Start(cudaStream_t stream);
  // Records the stop event, waits for it, and returns the milliseconds since Start.
  absl::StatusOr<double> StopMs(cudaStream_t stream);

 private:
  EventPair() = default;
  void Destroy();
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// The times of the timed calls, in order.
struct CallTimes {
  std::vector<double> ms;
  double mean_ms() const;  // NaN when there are none
  double best_ms() const;  // +inf when there are none
};

class KernelBotTimer {
 public:
  // The flush buffer (`flush_bytes` of device memory, KernelBot's 256 MB by default) and events.
  static absl::StatusOr<KernelBotTimer> Create(size_t flush_bytes = kL2FlushBytes);

  // Writes the whole flush buffer on `stream`, evicting whatever L2 holds.
  absl::Status FlushL2(cudaStream_t stream) const;

  // `warmup` calls whose times are dropped, then `calls` timed ones; every one of them is
  // FlushL2, start event, `call`, stop event, wait. Stops at the first error.
  absl::StatusOr<CallTimes> Time(const TimedCall& call, cudaStream_t stream, int calls,
                                 int warmup = 0);

 private:
  KernelBotTimer(DeviceBuffer flush, size_t flush_bytes, EventPair events)
      : flush_(std::move(flush)), flush_bytes_(flush_bytes), events_(std::move(events)) {}
  DeviceBuffer flush_;
  size_t flush_bytes_;
  EventPair events_;
};

// `warmup` untimed calls, then `iterations` (>= 1) calls back to back between one pair of
// events, no flush: the mean milliseconds per call.
absl::StatusOr<double> TimeBackToBack(const TimedCall& call, cudaStream_t stream, int iterations,
                                      int warmup = 2);

}  // namespace conv2d

#endif  // CONV2D_CONV_CORE_TIMING_H_
