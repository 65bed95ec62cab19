// PerDevice<T>: a value made once per CUDA device, for state that belongs to a device rather
// than to the process: a kernel's function attributes (cudaFuncSetAttribute applies to the
// current device only), its occupancy, whether the device runs the sm_90a code. A function-level
// static holds the first device's value and hands it to every other device: a second GPU then
// launched with the first one's attributes unset (issue 24). Host code.
//
// Read on every launch, so a made value is read without a lock (an atomic pointer per device
// ordinal); only making one takes the mutex.
#ifndef CONV2D_CONV_ARCH_PER_DEVICE_H_
#define CONV2D_CONV_ARCH_PER_DEVICE_H_

#include <atomic>
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
    const bool fast = device >= 0 && device < kFastDevices;
    if (fast) {
      if (const T* v = fast_[device].load(std::memory_order_acquire)) return *v;
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(device);
    if (it == values_.end()) it = values_.emplace(device, std::forward<Make>(make)()).first;
    if (fast) fast_[device].store(&it->second, std::memory_order_release);
    return it->second;
  }

 private:
  static constexpr int kFastDevices = 64;
  std::atomic<const T*> fast_[kFastDevices] = {};
  std::mutex mu_;
  std::map<int, T> values_;  // node-based: a value's address is stable
};

}  // namespace conv2d

#endif  // CONV2D_CONV_ARCH_PER_DEVICE_H_
