// PerDevice<T>: a value made once per CUDA device, for state that belongs to a device rather
// than to the process: a kernel's function attributes (cudaFuncSetAttribute applies to the
// current device only), its occupancy, whether the device runs the sm_90a code. A function-level
// static holds the first device's value and hands it to every other device: a second GPU then
// launched with the first one's attributes unset (issue 24). Host code.
#ifndef CONV2D_CONV_ARCH_PER_DEVICE_H_
#define CONV2D_CONV_ARCH_PER_DEVICE_H_

#include <map>
#include <mutex>
#include <utility>

namespace conv2d {

template <typename T>
class PerDevice {
 public:
  // The value for `device`, made by make() on its first request (with `device` current). The
  // reference stays valid: values are never removed.
  template <typename Make>
  const T& Get(int device, Make&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(device);
    if (it == values_.end()) it = values_.emplace(device, std::forward<Make>(make)()).first;
    return it->second;
  }

 private:
  std::mutex mu_;
  std::map<int, T> values_;
};

}  // namespace conv2d

#endif  // CONV2D_CONV_ARCH_PER_DEVICE_H_
