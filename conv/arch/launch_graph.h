// A call's kernels enqueued as one CUDA graph launch instead of one launch each.
//
// Why: a kernel launch costs the host 2-3 us (more on slow hosts), a graph launch ~1 us plus
// ~0.4 us per node whose arguments change; the FFT's four kernels took ~9 us of launches where the
// graph takes ~3 (PERF.md round 93). For small problems the GPU waits on the host, so that time is
// what a caller sees.
//
// How: Plan::Run makes a LaunchRecording current on its thread and runs the runner; LaunchPdl
// (pdl.cuh), through which every launch of a recording runner goes, appends the launch with a
// copy of its arguments instead of enqueueing it. LaunchGraphs then enqueues the recording:
// through an executable graph made once per (stream, kernels, grids, shared memory), its nodes'
// arguments set to this call's, or as plain launches wherever a graph cannot serve (the stream is
// being captured: the caller is building a graph of its own; the kernels differ from every
// graph's; no slot left; CUDA refused to make or update one). Either way the same kernels run
// with the same arguments in the same order, and a kernel launched with PDL may overlap the one
// before it exactly as on a stream (a programmatic edge). Nothing is enqueued while recording, so
// a recording that overflows is simply run again without one.
//
// Host code (CUDA runtime); the recording itself makes no CUDA call (CPU-tested).
#ifndef CONV2D_CONV_ARCH_LAUNCH_GRAPH_H_
#define CONV2D_CONV_ARCH_LAUNCH_GRAPH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

namespace conv2d {

// The launch configuration of kernel<<<grid, block, smem, stream>>>, with programmatic stream
// serialization (PDL, pdl.cuh) when `pdl` is set: `attribute` is the caller's storage for it.
// LaunchPdl and LaunchEach both launch with it.
inline cudaLaunchConfig_t LaunchConfig(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                       bool pdl, cudaLaunchAttribute* attribute) {
  *attribute = cudaLaunchAttribute{};
  attribute->id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute->val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = pdl ? 1 : 0;
  return config;
}

// One launch: the kernel's host stub, its geometry, and pointers to its argument values.
struct KernelLaunch {
  static constexpr int kMaxArgs = 8;
  const void* kernel = nullptr;
  dim3 grid;
  dim3 block;
  size_t smem = 0;
  bool pdl = false;  // may overlap the kernel before it (pdl.cuh), on a device that supports it
  int num_args = 0;
  void* args[kMaxArgs] = {};
  // Where the argument values lie in the recording's storage: [args_begin, args_end), the gaps
  // between them zeroed (padding inside a struct argument is copied as it is, so equal
  // arguments may still differ in bytes: that costs an update, never a wrong launch).
  size_t args_begin = 0;
  size_t args_end = 0;
};

// The kernels one call enqueues on one stream, recorded instead of launched while this object
// is the thread's current recording (between its construction and its destruction).
class LaunchRecording {
 public:
  static constexpr int kMaxLaunches = 8;
  static constexpr size_t kStorageBytes = 4096;

  explicit LaunchRecording(cudaStream_t stream);
  ~LaunchRecording();
  LaunchRecording(const LaunchRecording&) = delete;
  LaunchRecording& operator=(const LaunchRecording&) = delete;

  // The thread's current recording, or null.
  static LaunchRecording* Current();

  // Records kernel<<<grid, block, smem, stream>>>(args...) (pdl: see KernelLaunch), each argument
  // converted to its parameter's type as a launch would. cudaErrorInvalidValue, recording
  // nothing, for another stream than the recording's; cudaErrorMemoryAllocation when the
  // recording is full (overflowed() then says so).
  template <typename... Params, typename... Args>
  cudaError_t Add(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                  cudaStream_t stream, Args&&... args) {
    static_assert(sizeof...(Params) == sizeof...(Args), "one argument per kernel parameter");
    static_assert(sizeof...(Params) <= KernelLaunch::kMaxArgs, "raise KernelLaunch::kMaxArgs");
    static_assert((std::is_trivially_copyable_v<std::decay_t<Params>> && ...),
                  "kernel parameters are copied as bytes");
    if (stream != stream_) return cudaErrorInvalidValue;
    if (size_ == kMaxLaunches) return Overflow();
    KernelLaunch& l = launches_[size_];
    l = KernelLaunch{};
    l.kernel = reinterpret_cast<const void*>(kernel);
    l.grid = grid;
    l.block = block;
    l.smem = smem;
    l.pdl = pdl;
    l.num_args = static_cast<int>(sizeof...(Params));
    const size_t mark = used_;
    if (!StoreAll<std::decay_t<Params>...>(l, std::index_sequence_for<Params...>{},
                                           std::forward<Args>(args)...)) {
      used_ = mark;
      return Overflow();
    }
    l.args_begin = mark;
    l.args_end = used_;
    ++size_;
    return cudaSuccess;
  }

  cudaStream_t stream() const { return stream_; }
  int size() const { return size_; }
  const KernelLaunch& operator[](int i) const { return launches_[i]; }
  bool overflowed() const { return overflowed_; }
  // The bytes of launch i's argument values.
  const unsigned char* arg_bytes(int i) const { return storage_ + launches_[i].args_begin; }
  size_t arg_size(int i) const { return launches_[i].args_end - launches_[i].args_begin; }

 private:
  cudaError_t Overflow() {
    overflowed_ = true;
    return cudaErrorMemoryAllocation;
  }
  // A copy of `bytes` bytes at `align` in storage_, or null when it is full.
  void* Store(const void* value, size_t bytes, size_t align);

  template <typename... Params, size_t... I, typename... Args>
  bool StoreAll(KernelLaunch& l, std::index_sequence<I...>, Args&&... args) {
    // The converted values, then their bytes: what the launch's argument buffer would hold.
    [[maybe_unused]] const std::tuple<Params...> values(std::forward<Args>(args)...);
    return ((l.args[I] = Store(&std::get<I>(values), sizeof(Params), alignof(Params))) && ...);
  }

  cudaStream_t stream_;
  LaunchRecording* previous_;
  KernelLaunch launches_[kMaxLaunches];
  int size_ = 0;
  bool overflowed_ = false;
  alignas(16) unsigned char storage_[kStorageBytes];
  size_t used_ = 0;
};

// Enqueues the recording's launches on its stream, plainly: each with cudaLaunchKernelExC.
cudaError_t LaunchEach(const LaunchRecording& r);

// One plan's executable graphs, at most kSlots (stream, kernels) pairs, kept for the plan's life
// (a stream past the slots, e.g. one of many in a pool, gets plain launches). Not thread-safe:
// the caller serializes Launch (Plan::Run's lock). Made on the device current at the first
// Launch, which must stay the device of every call (a plan is bound to its device).
class LaunchGraphs {
 public:
  static constexpr int kSlots = 4;

  LaunchGraphs() = default;
  ~LaunchGraphs();  // an executable graph still running is freed when its launch completes
  LaunchGraphs(const LaunchGraphs&) = delete;
  LaunchGraphs& operator=(const LaunchGraphs&) = delete;

  // Enqueues r's launches on r.stream(), through a graph where one serves, else LaunchEach. A
  // node whose arguments are those of the graph's last launch is not updated (0.4 us each).
  cudaError_t Launch(const LaunchRecording& r);

  // False where $CONV2D_GRAPHS is "0" (read once): every call then launches plainly.
  static bool Enabled();

  // How many executable graphs serve calls (slots CUDA refused aside).
  int graphs() const;
  // Graph launches made by every LaunchGraphs of the process so far (for tests).
  static unsigned long long Launches();

 private:
  struct Slot;
  Slot* Find(const LaunchRecording& r, unsigned long long stream_id);
  Slot* Make(const LaunchRecording& r, unsigned long long stream_id);
  Slot* slots_[kSlots] = {};
  int used_ = 0;
};

}  // namespace conv2d

#endif  // CONV2D_CONV_ARCH_LAUNCH_GRAPH_H_
