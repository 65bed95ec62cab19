// conv2d.conv2d's direct path in C++, for the PyTorch and CPython it is compiled against
// (tools/deps.bzl: TORCH_VERSION, TORCH_PYTHON): the Python module
// conv2d._fast_torch<major>_<minor>, which python/conv2d/functional.py uses only under that very
// PyTorch release (the module's TORCH_VERSION).
//
// Why: of a call's ~8 us of Python (docs/PERF.md, round 93), y's allocation took 2.7, the
// workspace's 1.2 and the ctypes call 0.9, most of it PyTorch's Python argument parsing and
// ctypes' conversions. Here they are C++ calls into the same caching allocator and current
// stream that Python's path uses, and the library is called through the very function ctypes
// loaded (its address handed over by init), so plans made through ctypes run here.
//
// It takes only the plain case and returns None for anything else (an `out` that is not a
// contiguous float32 tensor of y's shape on the plan's device, or needs a gradient; inputs that
// are not contiguous or are negative views); functional.py's Python path then does that call,
// with its own checks and messages, so that both paths behave alike.
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/utils/pybind.h>

#include "conv/conv2d_c.h"

namespace {

namespace py = pybind11;
using RunEx = decltype(&conv2d_plan_run_ex);

// Set once by init(), before any Call exists (functional.py makes Calls only after it).
RunEx g_run_ex = nullptr;
// Python: rc -> the exception to raise (conv2d._native.Error with the library's message for this
// thread's last error).
py::object* g_error = nullptr;

bool Plain(const at::Tensor& t) { return t.is_contiguous() && !t.is_neg(); }

// One problem's plan on one device: what functional.py's _Call holds, in C++.
class Call {
 public:
  Call(uintptr_t plan, size_t workspace_bytes, int device, std::vector<int64_t> out_shape)
      : plan_(reinterpret_cast<const conv2d_plan*>(plan)),
        workspace_bytes_(workspace_bytes),
        device_(static_cast<c10::DeviceIndex>(device)),
        out_shape_(std::move(out_shape)) {}

  // x, w, bias: of the plan's problem (shapes, float32, the plan's device): functional.py's
  // signature lookup chose this Call by them. Returns y (out, if given), or None for the Python
  // path to take the call.
  py::object operator()(const at::Tensor& x, const at::Tensor& w,
                        const std::optional<at::Tensor>& bias,
                        const std::optional<at::Tensor>& out) const {
    if (!Plain(x) || !Plain(w) || (bias && !Plain(*bias))) return py::none();
    if (out && !(out->sizes().equals(out_shape_) &&
                 out->scalar_type() == at::kFloat && out->is_cuda() &&
                 out->get_device() == device_ && Plain(*out) &&
                 !(out->requires_grad() && c10::GradMode::is_enabled()))) {
      return py::none();
    }
    const c10::cuda::CUDAGuard guard(device_);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_).stream();
    at::Tensor y = out ? *out
                       : at::empty(out_shape_, at::TensorOptions()
                                                   .dtype(at::kFloat)
                                                   .device(at::kCUDA, device_));
    // Every call that may throw comes before the workspace exists (PyTorch's errors reach
    // Python as its own exception types: its translators are registered with pybind11).
    const float* x_ptr = x.const_data_ptr<float>();
    const float* w_ptr = w.const_data_ptr<float>();
    const float* bias_ptr = bias ? bias->const_data_ptr<float>() : nullptr;
    float* y_ptr = y.mutable_data_ptr<float>();
    // The workspace as functional.py's path takes it: a block of the caching allocator on the
    // call's stream (the graph's private pool under capture), freed once the call is enqueued.
    void* workspace = workspace_bytes_ == 0 ? nullptr
                                            : c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(
                                                  workspace_bytes_, stream);
    int rc;
    {
      py::gil_scoped_release no_gil;  // as ctypes does: a first call builds graphs (ms)
      rc = g_run_ex(plan_, x_ptr, w_ptr, bias_ptr, y_ptr, workspace, workspace_bytes_, stream);
    }
    if (workspace != nullptr) c10::cuda::CUDACachingAllocator::raw_delete(workspace);
    if (rc != 0) {
      py::object error = (*g_error)(rc);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
      throw py::error_already_set();
    }
    // Written behind autograd's back: whatever saved `out` for a backward must know.
    if (out) torch::autograd::impl::bump_version(*out);  // torch.autograd.graph.increment_version
    return py::cast(std::move(y));
  }

 private:
  const conv2d_plan* plan_;
  size_t workspace_bytes_;
  c10::DeviceIndex device_;
  std::vector<int64_t> out_shape_;
};

}  // namespace

PYBIND11_MODULE(CONV2D_FAST_PATH_MODULE, m) {
  m.doc() = "conv2d.conv2d's direct path in C++ (python/fast_path.cc)";
  // The PyTorch release it was compiled against: functional.py uses it under that release only.
  m.attr("TORCH_VERSION") = CONV2D_FAST_PATH_TORCH_VERSION;
  m.def(
      "init",
      [](uintptr_t run_ex, py::object error) {
        g_run_ex = reinterpret_cast<RunEx>(run_ex);
        if (g_error == nullptr) g_error = new py::object();  // never freed: outlives teardown
        *g_error = std::move(error);
      },
      py::arg("run_ex"), py::arg("error"),
      "run_ex: the address of the loaded libconv2d's conv2d_plan_run_ex; error(rc): the "
      "exception to raise for a failed call");
  py::class_<Call>(m, "Call")
      .def(py::init<uintptr_t, size_t, int, std::vector<int64_t>>(), py::arg("plan"),
           py::arg("workspace_bytes"), py::arg("device"), py::arg("out_shape"))
      .def("__call__", &Call::operator(), py::arg("x"), py::arg("w"), py::arg("bias"),
           py::arg("out"));
}
