// The FFT variants' side of the lifecycle, once: a planner ChooseConfig(shape, options) gives
// the Config the proposal carries (tile, workspace layout, its cost model's time), and a
// function builds the runner from that Config for the device. fft_fused / fft_fused_3xtf32 and
// the lab's fft_tiled / fft_tiled_3xtf32 are instances with their own options.
#ifndef CONV2D_CONV_ALGORITHMS_FFT_FFT_ALGORITHM_H_
#define CONV2D_CONV_ALGORITHMS_FFT_FFT_ALGORITHM_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "conv/core/algorithm.h"

namespace conv2d {

template <typename Options, typename Config>
class FftAlgorithm : public AlgorithmWithConfig<Config> {
 public:
  using PlanFn = absl::StatusOr<Config> (*)(const Shape&, const Options&);
  using BuildFn = absl::StatusOr<std::unique_ptr<Runner>> (*)(const Shape&, const Options&,
                                                             const Config&, const DeviceInfo&);
  // `calibration`: fitted by tools/fit_auto.py, passed by the factory that names the variant.
  // `cleans`: the variant takes spikes, non-finite values and large means out of its transforms
  // (fft_fused's CleanTransforms); one that does not (the lab's baselines) is never within the
  // accuracy contract.
  FftAlgorithm(std::string name, const Options& options, double calibration, PlanFn plan,
               BuildFn build, bool cleans)
      : name_(std::move(name)),
        options_(options),
        calibration_(calibration),
        plan_(plan),
        build_(build),
        cleans_(cleans) {}
  std::string name() const override { return name_; }
  double calibration() const override { return calibration_; }
  // A filter of fewer than 9 taps gives CleanTransforms nothing to judge a spike against.
  absl::Status WithinContract(const Shape& shape) const override {
    if (!cleans_) return absl::OutOfRangeError(name_ + ": a baseline, outside the contract");
    if (shape.kernel_h * shape.kernel_w < 9) {
      return absl::OutOfRangeError(name_ + ": filters of fewer than 9 taps");
    }
    return absl::OkStatus();
  }

 protected:
  absl::StatusOr<Config> Choose(const Shape& shape, const DeviceInfo&,
                                double* seconds) const override {
    absl::StatusOr<Config> c = plan_(shape, options_);
    if (c.ok()) *seconds = c->cost.seconds;
    return c;
  }
  absl::StatusOr<std::unique_ptr<Runner>> Build(const Shape& shape, const Config& config,
                                                const DeviceInfo& device) const override {
    return build_(shape, options_, config, device);
  }

 private:
  std::string name_;
  Options options_;
  double calibration_;
  PlanFn plan_;
  BuildFn build_;
  bool cleans_;
};

}  // namespace conv2d

#endif  // CONV2D_CONV_ALGORITHMS_FFT_FFT_ALGORITHM_H_
