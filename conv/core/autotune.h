// "autotune": the opt-in algorithm choice by measurement (Plan::Create(shape, "autotune")). For a
// shape it builds a runner for every candidate auto would consider, times each, and keeps the
// fastest one's runner; the winner's name is cached per (device, shape) for the rest of the
// process, and later plans build it from its proposal without timing again. The timing follows
// the benchmark's protocol in miniature: seeded normal inputs (never zeros), one warm-up call,
// then the best of three calls timed with CUDA events, each after a write that evicts the inputs
// from L2.
#ifndef CONV2D_CONV_CORE_AUTOTUNE_H_
#define CONV2D_CONV_CORE_AUTOTUNE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "conv/core/algorithm.h"
#include "conv/shape.h"

namespace conv2d {

struct Candidate {
  const Algorithm* algorithm;
  Proposal proposal;  // made for `shape` on `device`
};

struct Tuned {
  const Algorithm* algorithm;
  std::shared_ptr<const Runner> runner;
};

// The fastest of `candidates` (in auto's order) on the current device, `device`.
absl::StatusOr<Tuned> Autotune(const Shape& shape, const DeviceInfo& device,
                               const std::vector<Candidate>& candidates);

// Whether Autotune has cached a winner for `shape` on the device of this ordinal (for tests).
bool AutotuneCached(const Shape& shape, int device_ordinal);

}  // namespace conv2d

#endif  // CONV2D_CONV_CORE_AUTOTUNE_H_
