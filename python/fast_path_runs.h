// What the fast path's two files share (fast_path.cc: the entry, Call, the training node;
// fast_path_ops.cc: the custom ops' kernels): the library's run functions, as the copy ctypes
// loaded exports them, and one run per operation on PyTorch's caching allocator and current
// stream, without Python (callable without the GIL: autograd's and the dispatcher's threads).
#ifndef CONV2D_PYTHON_FAST_PATH_RUNS_H_
#define CONV2D_PYTHON_FAST_PATH_RUNS_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "conv/conv2d_c.h"

namespace conv2d_fast {

using RunEx = decltype(&conv2d_plan_run_ex);
using RunDgradFn = decltype(&conv2d_plan_run_dgrad);
using RunWgradFn = decltype(&conv2d_plan_run_wgrad);
using LastError = decltype(&conv2d_last_error);

// Set once by init(), before any plan reaches C++ (functional.py makes them only after it).
inline RunEx g_run_ex = nullptr;
inline RunDgradFn g_run_dgrad = nullptr;
inline RunWgradFn g_run_wgrad = nullptr;
inline LastError g_last_error = nullptr;

// The case C++ takes: a contiguous tensor that is not a negative view (anything else is the
// Python path's, with its own checks and copies).
inline bool Plain(const at::Tensor& t) { return t.is_contiguous() && !t.is_neg(); }

// A plan made through ctypes: its handle and workspace size.
struct PlanRef {
  const conv2d_plan* plan = nullptr;
  size_t workspace_bytes = 0;
};

// A float32 CUDA tensor on the current device as at::empty makes it, without the dispatcher's
// round trip: the caching allocator on the current stream.
inline at::Tensor Empty(c10::IntArrayRef shape) {
  return at::Tensor(at::detail::empty_generic(shape, c10::cuda::CUDACachingAllocator::get(),
                                              c10::DispatchKeySet(c10::DispatchKey::CUDA),
                                              at::kFloat, std::nullopt));
}

// run(workspace, stream) with a workspace from the caching allocator on `device`'s current
// stream; a library error as a c10::Error.
template <class F>
void Enqueue(const PlanRef& p, c10::DeviceIndex device, const char* what, F&& run) {
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  void* workspace = p.workspace_bytes == 0
                        ? nullptr
                        : c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(
                              p.workspace_bytes, stream);
  const int rc = run(workspace, stream);
  if (workspace != nullptr) c10::cuda::CUDACachingAllocator::raw_delete(workspace);
  TORCH_CHECK(rc == 0, "conv2d: ", what, " failed: ", g_last_error(), " (code ", rc, ")");
}

// y (y_shape) = conv2d(x, w, bias or null) by a forward plan on `device`.
inline at::Tensor RunForward(const PlanRef& p, c10::DeviceIndex device,
                             const std::vector<int64_t>& y_shape, const at::Tensor& x,
                             const at::Tensor& w, const at::Tensor* bias) {
  const c10::cuda::CUDAGuard guard(device);
  at::Tensor y = Empty(y_shape);
  const float* xp = x.const_data_ptr<float>();
  const float* wp = w.const_data_ptr<float>();
  const float* bp = bias ? bias->const_data_ptr<float>() : nullptr;
  float* yp = y.mutable_data_ptr<float>();
  Enqueue(p, device, "the forward", [&](void* ws, cudaStream_t stream) {
    return g_run_ex(p.plan, xp, wp, bp, yp, ws, p.workspace_bytes, stream);
  });
  return y;
}

// dx (x_shape) from dy and w by a dgrad plan on `device`.
inline at::Tensor RunDgrad(const PlanRef& p, c10::DeviceIndex device,
                           const std::vector<int64_t>& x_shape, const at::Tensor& dy,
                           const at::Tensor& w) {
  const c10::cuda::CUDAGuard guard(device);
  at::Tensor dx = Empty(x_shape);
  const float* dyp = dy.const_data_ptr<float>();
  const float* wp = w.const_data_ptr<float>();
  float* dxp = dx.mutable_data_ptr<float>();
  Enqueue(p, device, "dgrad", [&](void* ws, cudaStream_t stream) {
    return g_run_dgrad(p.plan, dyp, wp, dxp, ws, p.workspace_bytes, stream);
  });
  return dx;
}

// (dw (w_shape), db (Cout,) where `bias`, else undefined) from x and dy by a wgrad plan on
// `device` (made with the bias exactly when `bias`).
inline std::pair<at::Tensor, at::Tensor> RunWgrad(const PlanRef& p, c10::DeviceIndex device,
                                                  const std::vector<int64_t>& w_shape,
                                                  const at::Tensor& x, const at::Tensor& dy,
                                                  bool bias) {
  const c10::cuda::CUDAGuard guard(device);
  at::Tensor dw = Empty(w_shape);
  at::Tensor db = bias ? Empty({w_shape[0]}) : at::Tensor();
  const float* xp = x.const_data_ptr<float>();
  const float* dyp = dy.const_data_ptr<float>();
  float* dwp = dw.mutable_data_ptr<float>();
  float* dbp = bias ? db.mutable_data_ptr<float>() : nullptr;
  Enqueue(p, device, "wgrad", [&](void* ws, cudaStream_t stream) {
    return g_run_wgrad(p.plan, xp, dyp, dwp, dbp, ws, p.workspace_bytes, stream);
  });
  return {dw, db};
}

// fast_path_ops.cc: the custom ops' CUDA and Autograd kernels in C++ (op: 0 conv2d::conv2d,
// 1 conv2d_input_grad, 2 conv2d_weight_grad), swapped in once by RegisterOps, and the table their
// CUDA kernels look plans up in, keyed by the call's arguments (OpKeyOf: tensors' sizes and
// devices, None, ints, int lists, bools), filled by RememberOp with the op's own arguments
// after the Python kernel's first run of a signature (false where they have no key).
void RegisterOps();
const c10::FunctionSchema& OpSchema(int op);
bool OpKeyOf(int op, c10::ArrayRef<c10::IValue> args, std::vector<int64_t>* key);
bool RememberOp(int op, PlanRef plan, int device, std::vector<int64_t> out_shape,
                const std::vector<c10::IValue>& args);

}  // namespace conv2d_fast

#endif  // CONV2D_PYTHON_FAST_PATH_RUNS_H_
