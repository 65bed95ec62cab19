#include "conv/arch/launch_graph.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace conv2d {
namespace {

thread_local LaunchRecording* current_recording = nullptr;
std::atomic<unsigned long long> graph_launches{0};

// Whether two launches are the same node of a graph: all but their arguments.
bool SameNode(const KernelLaunch& a, const KernelLaunch& b) {
  return a.kernel == b.kernel && a.grid.x == b.grid.x && a.grid.y == b.grid.y &&
         a.grid.z == b.grid.z && a.block.x == b.block.x && a.block.y == b.block.y &&
         a.block.z == b.block.z && a.smem == b.smem && a.pdl == b.pdl &&
         a.num_args == b.num_args;
}

cudaKernelNodeParams NodeParams(const KernelLaunch& l) {
  cudaKernelNodeParams p = {};
  p.func = const_cast<void*>(l.kernel);
  p.gridDim = l.grid;
  p.blockDim = l.block;
  p.sharedMemBytes = static_cast<unsigned>(l.smem);
  p.kernelParams = const_cast<void**>(l.args);
  return p;
}

// Lets this thread make a graph while another thread captures a stream in the global mode (where
// an unsafe call, e.g. an allocation for the executable graph, would invalidate that capture),
// as the mode's documentation asks of libraries.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace

LaunchRecording::LaunchRecording(cudaStream_t stream)
    : stream_(stream), previous_(current_recording) {
  current_recording = this;
}

LaunchRecording::~LaunchRecording() { current_recording = previous_; }

LaunchRecording* LaunchRecording::Current() { return current_recording; }

void* LaunchRecording::Store(const void* value, size_t bytes, size_t align) {
  const size_t at = (used_ + align - 1) / align * align;
  if (at > kStorageBytes || bytes > kStorageBytes - at) return nullptr;
  std::memset(storage_ + used_, 0, at - used_);
  std::memcpy(storage_ + at, value, bytes);
  used_ = at + bytes;
  return storage_ + at;
}

cudaError_t LaunchEach(const LaunchRecording& r) {
  for (int i = 0; i < r.size(); ++i) {
    const KernelLaunch& l = r[i];
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config =
        LaunchConfig(l.grid, l.block, l.smem, r.stream(), l.pdl, &attribute);
    const cudaError_t err = cudaLaunchKernelExC(&config, l.kernel, const_cast<void**>(l.args));
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

struct LaunchGraphs::Slot {
  // The stream's ID, not its handle: cudaStreamPerThread is one handle for a stream of each
  // thread, and a handle may be reused by a stream made after another was destroyed.
  unsigned long long stream_id = 0;
  KernelLaunch shape[LaunchRecording::kMaxLaunches];  // the nodes' launches, arguments aside
  cudaGraphNode_t nodes[LaunchRecording::kMaxLaunches] = {};
  // The argument bytes each node holds now: a node whose next arguments are the same is not
  // updated.
  std::vector<unsigned char> args[LaunchRecording::kMaxLaunches];
  int size = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool broken = false;  // CUDA refused to make or update it: these calls launch plainly

  bool Serves(const LaunchRecording& r, unsigned long long id) const {
    if (stream_id != id || size != r.size()) return false;
    for (int i = 0; i < size; ++i) {
      if (!SameNode(shape[i], r[i])) return false;
    }
    return true;
  }
};

LaunchGraphs::~LaunchGraphs() {
  RelaxedCaptureMode relaxed;
  for (Slot* s : slots_) {
    if (s == nullptr) continue;
    if (s->exec != nullptr) cudaGraphExecDestroy(s->exec);
    if (s->graph != nullptr) cudaGraphDestroy(s->graph);
    delete s;
  }
}

bool LaunchGraphs::Enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("CONV2D_GRAPHS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

int LaunchGraphs::graphs() const {
  int n = 0;
  for (int i = 0; i < used_; ++i) n += !slots_[i]->broken;
  return n;
}

unsigned long long LaunchGraphs::Launches() {
  return graph_launches.load(std::memory_order_relaxed);
}

LaunchGraphs::Slot* LaunchGraphs::Find(const LaunchRecording& r, unsigned long long stream_id) {
  for (int i = 0; i < used_; ++i) {
    if (slots_[i]->Serves(r, stream_id)) return slots_[i];
  }
  return nullptr;
}

// A graph of r's kernels in a chain (a programmatic edge into each PDL launch), instantiated.
// Null when no slot is left; a broken slot when CUDA refused (kept, so that it is not retried on
// every call).
LaunchGraphs::Slot* LaunchGraphs::Make(const LaunchRecording& r, unsigned long long stream_id) {
  if (used_ == kSlots) return nullptr;
  Slot* s = new Slot;
  slots_[used_++] = s;
  s->stream_id = stream_id;
  s->size = r.size();
  for (int i = 0; i < r.size(); ++i) {  // first, so that a slot broken below still matches
    s->shape[i] = r[i];
    s->args[i].assign(r.arg_bytes(i), r.arg_bytes(i) + r.arg_size(i));
  }
  RelaxedCaptureMode relaxed;
  bool ok = cudaGraphCreate(&s->graph, 0) == cudaSuccess;
  for (int i = 0; ok && i < r.size(); ++i) {
    const cudaKernelNodeParams p = NodeParams(r[i]);
    ok = cudaGraphAddKernelNode(&s->nodes[i], s->graph, nullptr, 0, &p) == cudaSuccess;
    if (ok && i > 0) {
      cudaGraphEdgeData edge = {};
      if (r[i].pdl) {
        edge.type = cudaGraphDependencyTypeProgrammatic;
        edge.from_port = cudaGraphKernelNodePortProgrammatic;
      }
      ok = cudaGraphAddDependencies(s->graph, &s->nodes[i - 1], &s->nodes[i], &edge, 1) ==
           cudaSuccess;
    }
  }
  ok = ok && cudaGraphInstantiate(&s->exec, s->graph, 0) == cudaSuccess;
  if (!ok) {
    cudaGetLastError();  // not this call's error: its launches go plainly
    s->broken = true;
  }
  return s;
}

cudaError_t LaunchGraphs::Launch(const LaunchRecording& r) {
  if (!Enabled() || r.size() == 0) return LaunchEach(r);
  // A stream being captured records plain launches into the caller's own graph.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(r.stream(), &capture) != cudaSuccess) {
    cudaGetLastError();
    return LaunchEach(r);
  }
  if (capture != cudaStreamCaptureStatusNone) return LaunchEach(r);
  unsigned long long stream_id = 0;
  if (cudaStreamGetId(r.stream(), &stream_id) != cudaSuccess) {
    cudaGetLastError();
    return LaunchEach(r);
  }
  Slot* s = Find(r, stream_id);
  if (s == nullptr) s = Make(r, stream_id);
  if (s == nullptr || s->broken) return LaunchEach(r);
  for (int i = 0; i < r.size(); ++i) {
    std::vector<unsigned char>& held = s->args[i];
    const unsigned char* bytes = r.arg_bytes(i);
    if (held.size() == r.arg_size(i) && std::memcmp(held.data(), bytes, held.size()) == 0) {
      continue;
    }
    const cudaKernelNodeParams p = NodeParams(r[i]);
    if (cudaGraphExecKernelNodeSetParams(s->exec, s->nodes[i], &p) != cudaSuccess) {
      cudaGetLastError();
      s->broken = true;  // partly updated: never launched again
      return LaunchEach(r);
    }
    held.assign(bytes, bytes + r.arg_size(i));
  }
  const cudaError_t err = cudaGraphLaunch(s->exec, r.stream());
  if (err == cudaSuccess) graph_launches.fetch_add(1, std::memory_order_relaxed);
  return err;
}

}  // namespace conv2d
