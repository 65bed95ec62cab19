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
// Two entries. `conv2d(input, weight, bias, stride, padding, dilation, groups, out)`, the first
// thing conv2d.conv2d calls, does the whole call for a signature it has seen: the dispatcher
// test (functional.py's _needs_op), the signature lookup (in its own table, filled by
// `remember` after the Python path's first fast call of a signature) and the call. A Call object
// does the call alone, after functional.py's own lookup.
// Both take only the plain case and return None for anything else (a signature not in the
// table; a call that needs the dispatcher; an `out` that is not a contiguous float32 tensor of
// y's shape on the plan's device, needs a gradient or shares an input's memory; inputs that
// are not contiguous or are negative views); functional.py's Python path then does that call,
// with its own checks and messages, so that every path behaves alike.
#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/forward_grad.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include "conv/conv2d_c.h"
#include "python/fast_path_runs.h"

namespace conv2d_fast {
namespace {

namespace py = pybind11;
// Python: (x, w, bias_wanted, grad, geometry, needs) -> the gradients through conv2d.grad's ops,
// for a backward that records its own graph (create_graph): functional._train_double_backward.
py::object* g_double_backward = nullptr;
// Python: rc -> the exception to raise (conv2d._native.Error with the library's message for this
// thread's last error).
py::object* g_error = nullptr;

// Whether two dense float32 tensors' memory overlaps.
bool Overlap(const at::Tensor& a, const at::Tensor& b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.const_data_ptr());
  const auto b0 = reinterpret_cast<uintptr_t>(b.const_data_ptr());
  return b0 < a0 + 4 * a.numel() && a0 < b0 + 4 * b.numel();
}

// One problem's plan on one device: what functional.py's _Call holds, in C++.
class Call {
 public:
  Call(uintptr_t plan, size_t workspace_bytes, int device, std::vector<int64_t> out_shape)
      : plan_(reinterpret_cast<const conv2d_plan*>(plan)),
        workspace_bytes_(workspace_bytes),
        device_(static_cast<c10::DeviceIndex>(device)),
        out_shape_(std::move(out_shape)) {}

  // x, w, bias (or null): of the plan's problem (shapes, float32, the plan's device): a
  // signature lookup chose this Call by them. Returns y (out, if given), or None for the Python
  // path to take the call.
  py::object Run(const at::Tensor& x, const at::Tensor& w, const at::Tensor* bias,
                 const at::Tensor* out) const {
    if (!Plain(x) || !Plain(w) || (bias && !Plain(*bias))) return py::none();
    if (out && !(out->sizes().equals(out_shape_) &&
                 out->scalar_type() == at::kFloat && out->is_cuda() &&
                 out->get_device() == device_ && Plain(*out) &&
                 !(out->requires_grad() && c10::GradMode::is_enabled()) &&
                 !Overlap(*out, x) && !Overlap(*out, w) && !(bias && Overlap(*out, *bias)))) {
      return py::none();
    }
    const c10::cuda::CUDAGuard guard(device_);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_).stream();
    at::Tensor y = out ? *out : Empty(out_shape_);
    // Every call that may throw comes before the workspace exists (PyTorch's errors reach
    // Python as its own exception types).
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
      // As ctypes does: a first call builds graphs (ms). Nothing of this object is read without
      // the GIL.
      const conv2d_plan* plan = plan_;
      const size_t workspace_bytes = workspace_bytes_;
      py::gil_scoped_release no_gil;
      rc = g_run_ex(plan, x_ptr, w_ptr, bias_ptr, y_ptr, workspace, workspace_bytes, stream);
    }
    if (workspace != nullptr) c10::cuda::CUDACachingAllocator::raw_delete(workspace);
    if (rc != 0) {
      py::object error = (*g_error)(rc);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
      throw py::error_already_set();
    }
    // Written behind autograd's back: whatever saved `out` for a backward must know.
    // As torch.autograd.graph.increment_version: an inference tensor has no version counter.
    if (out && !out->is_inference()) torch::autograd::impl::bump_version(*out);
    return py::cast(std::move(y));
  }

 private:
  const conv2d_plan* plan_;
  size_t workspace_bytes_;
  c10::DeviceIndex device_;
  std::vector<int64_t> out_shape_;
};

// A training call's plans: the forward's, and the dgrad's and wgrad's of the same problem
// (functional.py makes all of them on a signature's first training call, so that the backward,
// which runs on autograd's thread without the GIL, finds them made).

// Runs of the training node's forward, dgrad and wgrad (tests: only what is asked for).
std::atomic<int64_t> g_train_runs[3];

class TrainCall {
 public:
  TrainCall(PlanRef forward, PlanRef dgrad, PlanRef wgrad, PlanRef wgrad_bias, int device,
            std::vector<int64_t> x_shape, std::vector<int64_t> w_shape,
            std::vector<int64_t> y_shape, py::object geometry)
      : forward_(forward), dgrad_(dgrad), wgrad_(wgrad), wgrad_bias_(wgrad_bias),
        device_(static_cast<c10::DeviceIndex>(device)), x_shape_(std::move(x_shape)),
        w_shape_(std::move(w_shape)), y_shape_(std::move(y_shape)),
        geometry_(std::move(geometry)) {}

  // Each allocates on the plan's device (made current first: the caller's may be another).
  at::Tensor Forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor* bias) const {
    ++g_train_runs[0];
    return RunForward(forward_, device_, y_shape_, x, w, bias);
  }

  at::Tensor Dgrad(const at::Tensor& dy, const at::Tensor& w) const {
    ++g_train_runs[1];
    return RunDgrad(dgrad_, device_, x_shape_, dy, w);
  }

  std::pair<at::Tensor, at::Tensor> Wgrad(const at::Tensor& x, const at::Tensor& dy,
                                          bool bias) const {
    ++g_train_runs[2];
    return RunWgrad(bias ? wgrad_bias_ : wgrad_, device_, w_shape_, x, dy, bias);
  }

  // y = conv2d(x, w, bias) recording ConvTrain, or None where the tensors are not plain (the
  // Python path's _Train takes those, as the Python path takes Call's).
  py::object Apply(const at::Tensor& x, const at::Tensor& w, const at::Tensor* bias) const;

  bool has_bias_plan() const { return wgrad_bias_.plan != nullptr; }
  const py::object& geometry() const { return geometry_; }

 private:
  PlanRef forward_, dgrad_, wgrad_, wgrad_bias_;
  c10::DeviceIndex device_;
  std::vector<int64_t> x_shape_, w_shape_, y_shape_;
  py::object geometry_;  // (stride, padding, dilation, groups) as the ops take them
};

// Eager training's autograd node (functional.py's _Train, in C++): the forward through the
// library, the backward's dx and dw (db with dw) only where asked for, on autograd's thread
// without Python. A backward that records its own graph (create_graph) goes to Python, whose
// conv2d.grad ops record the double backward.
struct ConvTrain : public torch::autograd::Function<ConvTrain> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& w, const std::optional<at::Tensor>& bias,
                            int64_t call) {
    const auto* c = reinterpret_cast<const TrainCall*>(call);
    ctx->save_for_backward({x, w});
    ctx->saved_data["call"] = call;
    ctx->saved_data["bias"] = bias.has_value();
    return c->Forward(x, w, bias ? &*bias : nullptr);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* c = reinterpret_cast<const TrainCall*>(ctx->saved_data["call"].toInt());
    const bool has_bias = ctx->saved_data["bias"].toBool();
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const bool want_x = ctx->needs_input_grad(0), want_w = ctx->needs_input_grad(1);
    const bool want_b = has_bias && ctx->needs_input_grad(2);
    if (c10::GradMode::is_enabled()) {
      py::gil_scoped_acquire gil;
      const py::tuple g = (*g_double_backward)(x, w, has_bias, grads[0], c->geometry(),
                                               py::make_tuple(want_x, want_w, want_b));
      auto tensor = [](py::handle h) { return h.is_none() ? at::Tensor() : h.cast<at::Tensor>(); };
      return {tensor(g[0]), tensor(g[1]), tensor(g[2]), at::Tensor()};
    }
    // Dense memory of dy's values: a negative view's data are not its values (functional._dense).
    const at::Tensor dy = Plain(grads[0]) ? grads[0] : grads[0].resolve_neg().contiguous();
    at::Tensor gx, gw, gb;
    if (want_x) gx = c->Dgrad(dy, w);
    if (want_w) {
      std::tie(gw, gb) = c->Wgrad(x, dy, want_b && c->has_bias_plan());
    }
    if (want_b && !gb.defined()) {
      gb = dy.sum({0, 2, 3}, /*keepdim=*/false, at::kDouble).to(at::kFloat);
    }
    return {gx, gw, gb, at::Tensor()};
  }
};

py::object TrainCall::Apply(const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor* bias) const {
  if (!Plain(x) || !Plain(w) || (bias && !Plain(*bias))) return py::none();
  const std::optional<at::Tensor> b = bias ? std::optional<at::Tensor>(*bias) : std::nullopt;
  return py::cast(ConvTrain::apply(x, w, b, reinterpret_cast<int64_t>(this)));
}

// The signature table of the `conv2d` entry. A key holds what makes a problem and its plan:
// x's rank and sizes, w's sizes, bias's size (or -1), the device, and stride, padding, dilation
// and groups in one form whichever way F.conv2d's arguments spelled them (an int n as (n, n);
// padding "valid" as (0, 0), "same" as (-2, -2)). Only float32 CUDA tensors have keys. An
// entry exists only for a signature a call of the Python path has run (remember), which has
// checked those arguments as F.conv2d does; a spelling with no key (another type: a bool, a
// NumPy integer, a one-element tuple) keeps to the Python path, which decides.
using Key = std::array<int64_t, 18>;

struct KeyHash {
  size_t operator()(const Key& key) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// A signature's calls: the forward's Call (no gradient to record) and the training node's
// TrainCall (a gradient to record), each remembered once the Python path has made it.
struct Entry {
  py::object owner;  // keeps the Call alive
  const Call* call = nullptr;
  const TrainCall* train = nullptr;  // never freed: a graph's node may outlive the table
};

// Read and written only under the GIL; never freed (outlives interpreter teardown).
auto* g_table = new std::unordered_map<Key, Entry, KeyHash>();

// An exact Python int (not a bool, not a subclass) that fits int64.
bool ExactInt(PyObject* o, int64_t* v) {
  if (!PyLong_CheckExact(o)) return false;
  int overflow = 0;
  *v = PyLong_AsLongLongAndOverflow(o, &overflow);
  return overflow == 0 && !(*v == -1 && PyErr_Occurred());
}

// F.conv2d's int-or-pair: n as (n, n), or a tuple or list of two exact ints.
bool IntPair(PyObject* o, int64_t* a, int64_t* b) {
  if (ExactInt(o, a)) {
    *b = *a;
    return true;
  }
  if ((PyTuple_CheckExact(o) || PyList_CheckExact(o)) && PySequence_Fast_GET_SIZE(o) == 2) {
    return ExactInt(PySequence_Fast_GET_ITEM(o, 0), a) &&
           ExactInt(PySequence_Fast_GET_ITEM(o, 1), b);
  }
  return false;
}

// Padding's key: "valid" is no padding; "same" a negative pair, which no padding F.conv2d takes
// can equal, so a negative padding has no key (the Python path refuses it as F.conv2d does).
bool Padding(PyObject* o, int64_t* a, int64_t* b) {
  if (PyUnicode_CheckExact(o)) {
    if (PyUnicode_CompareWithASCIIString(o, "valid") == 0) *a = *b = 0;
    else if (PyUnicode_CompareWithASCIIString(o, "same") == 0) *a = *b = -2;
    else return false;
    return true;
  }
  return IntPair(o, a, b) && *a >= 0 && *b >= 0;
}

// A torch.Tensor or nn.Parameter, not a subclass (functional.py's _PLAIN): else null.
const at::Tensor* PlainType(PyObject* o) {
  return THPVariable_CheckExact(o) ? &THPVariable_Unpack(o) : nullptr;
}

bool Float32On(const at::Tensor& t, const at::Device& device) {
  return t.scalar_type() == at::kFloat && t.device() == device;
}

// The tensors and key of conv2d's first seven arguments, or false where they have none.
bool KeyOf(PyObject* const* args, Key* key, const at::Tensor** x, const at::Tensor** w,
           const at::Tensor** bias) {
  *x = PlainType(args[0]);
  *w = PlainType(args[1]);
  *bias = args[2] == Py_None ? nullptr : PlainType(args[2]);
  if (*x == nullptr || *w == nullptr || (args[2] != Py_None && *bias == nullptr)) return false;
  const at::Tensor& xt = **x;
  const at::Tensor& wt = **w;
  if (!xt.is_cuda() || !Float32On(xt, xt.device()) || !Float32On(wt, xt.device())) return false;
  if ((xt.dim() != 3 && xt.dim() != 4) || wt.dim() != 4) return false;
  if (*bias && (!Float32On(**bias, xt.device()) || (*bias)->dim() != 1)) return false;
  Key& k = *key;
  k.fill(-1);
  k[0] = xt.dim();
  for (int64_t i = 0; i < xt.dim(); ++i) k[1 + i] = xt.size(i);
  for (int64_t i = 0; i < 4; ++i) k[5 + i] = wt.size(i);
  if (*bias) k[9] = (*bias)->size(0);
  k[10] = xt.get_device();
  return IntPair(args[3], &k[11], &k[12]) && Padding(args[4], &k[13], &k[14]) &&
         IntPair(args[5], &k[15], &k[16]) && ExactInt(args[6], &k[17]);
}

// Whether conv2d may skip the dispatcher, as functional.py's _needs_op decides beyond the
// tensors' types: no gradient to record (WantsGradient) and NoModes; with a gradient to record,
// eager training's node takes the call where NoModes (functional.py's _trains_eagerly).
bool WantsGradient(const at::Tensor& x, const at::Tensor& w, const at::Tensor* bias) {
  return c10::GradMode::is_enabled() &&
         (x.requires_grad() || w.requires_grad() || (bias && bias->requires_grad()));
}

// Nothing in play that needs the dispatcher: no dispatch or function mode, no functorch
// transform, no forward-mode AD level.
bool NoModes() {
  const c10::DispatchKeySet included = c10::impl::tls_local_dispatch_key_set().included_;
  return c10::impl::TorchDispatchModeTLS::stack_len() == 0 &&
         !at::impl::torch_function_mode_enabled() &&
         !included.has(c10::DispatchKey::FuncTorchDynamicLayerFrontMode) &&
         !included.has(c10::DispatchKey::FuncTorchDynamicLayerBackMode) &&
         torch::autograd::ForwardADLevel::try_get_by_idx(0) == nullptr;
}

bool DirectAllowed(const at::Tensor& x, const at::Tensor& w, const at::Tensor* bias) {
  return !WantsGradient(x, w, bias) && NoModes();
}

// conv2d(input, weight, bias, stride, padding, dilation, groups, out): y, or None for the Python
// path. A METH_FASTCALL function: pybind11's argument handling would cost more than the lookup.
PyObject* Conv2d(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 8) {
    PyErr_SetString(PyExc_TypeError,
                    "conv2d(input, weight, bias, stride, padding, dilation, groups, out)");
    return nullptr;
  }
  Key key;
  const at::Tensor *x, *w, *bias;
  if (!KeyOf(args, &key, &x, &w, &bias)) Py_RETURN_NONE;
  const at::Tensor* out = args[7] == Py_None ? nullptr : PlainType(args[7]);
  if ((args[7] != Py_None && out == nullptr) || !NoModes()) Py_RETURN_NONE;
  const auto entry = g_table->find(key);
  if (entry == g_table->end()) Py_RETURN_NONE;
  if (WantsGradient(*x, *w, bias)) {
    const TrainCall* train = entry->second.train;
    if (train == nullptr || out != nullptr || x->dim() != 4) Py_RETURN_NONE;
    return train->Apply(*x, *w, bias).release().ptr();
  }
  if (entry->second.call == nullptr) Py_RETURN_NONE;
  // Held through the call: another thread may replace the entry while Run releases the GIL.
  const py::object keep = entry->second.owner;
  const Call* call = entry->second.call;
  return call->Run(*x, *w, bias, out).release().ptr();
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_conv2d_def = {
    "conv2d", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(&Conv2d)), METH_FASTCALL,
    "conv2d(input, weight, bias, stride, padding, dilation, groups, out): conv2d.conv2d's call "
    "for a signature remembered before, else None"};

}  // namespace
}  // namespace conv2d_fast

PYBIND11_MODULE(CONV2D_FAST_PATH_MODULE, m) {
  using namespace conv2d_fast;  // NOLINT: the module's bindings of this file's classes
  m.doc() = "conv2d.conv2d's direct path in C++ (python/fast_path.cc)";
  // The PyTorch release it was compiled against: functional.py uses it under that release only.
  m.attr("TORCH_VERSION") = CONV2D_FAST_PATH_TORCH_VERSION;
  m.def(
      "init",
      [](uintptr_t run_ex, py::object error, uintptr_t run_dgrad, uintptr_t run_wgrad,
         uintptr_t last_error, py::object double_backward) {
        g_run_ex = reinterpret_cast<RunEx>(run_ex);
        g_run_dgrad = reinterpret_cast<RunDgradFn>(run_dgrad);
        g_run_wgrad = reinterpret_cast<RunWgradFn>(run_wgrad);
        g_last_error = reinterpret_cast<LastError>(last_error);
        if (g_error == nullptr) g_error = new py::object();  // never freed: outlives teardown
        *g_error = std::move(error);
        if (g_double_backward == nullptr) g_double_backward = new py::object();
        *g_double_backward = std::move(double_backward);
      },
      py::arg("run_ex"), py::arg("error"), py::arg("run_dgrad"), py::arg("run_wgrad"),
      py::arg("last_error"), py::arg("double_backward"),
      "run_ex, run_dgrad, run_wgrad, last_error: the addresses of the loaded libconv2d's "
      "conv2d_plan_run_ex, _run_dgrad, _run_wgrad and conv2d_last_error; error(rc): the "
      "exception to raise for a failed call; double_backward(x, w, has_bias, grad, geometry, "
      "needs): the gradients through conv2d.grad's ops, for a backward under create_graph");
  // Never deleted (py::nodelete): a recorded graph's ConvTrain node keeps the address, and may
  // outlive the Python object; one per signature trained.
  py::class_<TrainCall, std::unique_ptr<TrainCall, py::nodelete>>(m, "TrainCall")
      .def(py::init([](std::array<uintptr_t, 4> plans, std::array<size_t, 4> workspace_bytes,
                       int device, std::vector<int64_t> x_shape, std::vector<int64_t> w_shape,
                       std::vector<int64_t> y_shape, py::object geometry) {
             auto ref = [&](int i) {
               return PlanRef{reinterpret_cast<const conv2d_plan*>(plans[i]), workspace_bytes[i]};
             };
             return new TrainCall(ref(0), ref(1), ref(2), ref(3), device, std::move(x_shape),
                                  std::move(w_shape), std::move(y_shape), std::move(geometry));
           }),
           py::arg("plans"), py::arg("workspace_bytes"), py::arg("device"), py::arg("x_shape"),
           py::arg("w_shape"), py::arg("y_shape"), py::arg("geometry"))
      .def(
          "__call__",
          [](const TrainCall& call, const at::Tensor& x, const at::Tensor& w,
             const std::optional<at::Tensor>& bias) {
            return call.Apply(x, w, bias ? &*bias : nullptr);
          },
          py::arg("x"), py::arg("w"), py::arg("bias"),
          "y = conv2d(x, w, bias) recording eager training's C++ node, or None");
  py::class_<Call>(m, "Call")
      .def(py::init<uintptr_t, size_t, int, std::vector<int64_t>>(), py::arg("plan"),
           py::arg("workspace_bytes"), py::arg("device"), py::arg("out_shape"))
      .def(
          "__call__",
          [](const Call& call, const at::Tensor& x, const at::Tensor& w,
             const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& out) {
            return call.Run(x, w, bias ? &*bias : nullptr, out ? &*out : nullptr);
          },
          py::arg("x"), py::arg("w"), py::arg("bias"), py::arg("out"));
  m.def(
      "remember",
      [](py::object call, py::args args) {
        // args: conv2d's input, weight, bias, stride, padding, dilation, groups.
        if (args.size() != 7) throw py::type_error("remember(call, x, w, bias, stride, ...)");
        PyObject* const* items = &PyTuple_GET_ITEM(args.ptr(), 0);
        Key key;
        const at::Tensor *x, *w, *bias;
        if (!KeyOf(items, &key, &x, &w, &bias)) return false;
        Entry& entry = (*g_table)[key];
        if (py::isinstance<TrainCall>(call)) {
          entry.train = call.cast<const TrainCall*>();
        } else {
          entry.call = call.cast<const Call*>();
          entry.owner = std::move(call);
        }
        return true;
      },
      py::arg("call"),
      "Makes conv2d(...) with these arguments (a call the Python path ran through `call`, a "
      "Call, or a TrainCall for calls with a gradient to record) run `call`; returns whether "
      "they have a key (else conv2d leaves them to the Python path)");
  m.def("forget", [] { g_table->clear(); }, "Empties the signature table (tests)");
  m.def("register_ops", &RegisterOps,
        "Swaps C++ kernels in for the custom ops' Python CUDA and Autograd kernels (once; "
        "python/fast_path_ops.cc)");
  m.def(
      "remember_op",
      [](int op, uintptr_t plan, size_t workspace_bytes, int device,
         std::vector<int64_t> out_shape, py::args args) {
        const c10::FunctionSchema& schema = OpSchema(op);
        TORCH_CHECK(args.size() == schema.arguments().size(), "remember_op: ",
                    schema.arguments().size(), " arguments of ", schema.name(), ", got ",
                    args.size());
        std::vector<c10::IValue> values;
        for (size_t i = 0; i < args.size(); ++i) {
          values.push_back(torch::jit::toIValue(args[i], schema.arguments()[i].real_type()));
        }
        return RememberOp(op, PlanRef{reinterpret_cast<const conv2d_plan*>(plan), workspace_bytes},
                          device, std::move(out_shape), values);
      },
      py::arg("op"), py::arg("plan"), py::arg("workspace_bytes"), py::arg("device"),
      py::arg("out_shape"),
      "Makes the op `op` (0 conv2d, 1 conv2d_input_grad, 2 conv2d_weight_grad) called with "
      "these arguments run `plan` in C++ (its result's shape out_shape: y, dx or dw); returns "
      "whether they have a key");
  m.def(
      "train_runs",
      [] { return py::make_tuple(g_train_runs[0].load(), g_train_runs[1].load(),
                                 g_train_runs[2].load()); },
      "(forward, dgrad, wgrad) runs of the training node so far (tests)");
  m.def(
      "direct_allowed",
      [](const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias) {
        return DirectAllowed(x, w, bias ? &*bias : nullptr);
      },
      py::arg("x"), py::arg("w"), py::arg("bias") = py::none(),
      "Whether the conv2d entry would skip the dispatcher here, tensors' types aside (tests)");
  m.add_object("conv2d", py::reinterpret_steal<py::object>(PyCFunction_NewEx(
                             &g_conv2d_def, nullptr, m.attr("__name__").ptr())));
}
