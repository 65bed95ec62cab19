// The custom ops' kernels in C++: conv2d::conv2d, conv2d::conv2d_input_grad and
// conv2d::conv2d_weight_grad (functional.py, grad.py), for the calls that reach them through the
// dispatcher: every convolution of a torch.compile'd graph, forward and backward, and the op
// path's eager calls.
//
// Why: torch.library.custom_op registers Python kernels for the Autograd and CUDA keys; a call
// through them costs 46 us (the forward, no gradient) and 76 us (dgrad) on an H100 where the
// direct path costs 15.5 (docs/PERF.md, round 98), which made EfficientNet-B0's compiled step
// host-bound (0.71x the plain model's). Here:
//  - Autograd: where no argument needs a gradient (every call of a compiled graph, and the
//    backward's own calls), below autograd in C++; otherwise the Python kernel registered before
//    (custom_op's autograd.Function: the formula, the double backward).
//  - CUDA: the call's plan looked up by its arguments in a table that the Python kernel fills
//    after its first run of a signature (remember_op), and run here; otherwise (a new signature,
//    tensors that are not plain) the Python kernel registered before, with its checks and
//    messages.
// The dispatcher keeps the last registration for a key (PyTorch warns once that a kernel is
// overridden; custom_op's own ADInplaceOrView registration silences the same warning), so
// register_ops, called once where the fast path loads, swaps these in; without the fast path
// the Python kernels serve.
#include <array>
#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "python/fast_path_runs.h"

namespace conv2d_fast {
namespace {

constexpr int kOps = 3;  // forward, dgrad, wgrad: the index of each table below
constexpr const char* kOpNames[kOps] = {"conv2d::conv2d", "conv2d::conv2d_input_grad",
                                        "conv2d::conv2d_weight_grad"};

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct OpEntry {
  PlanRef plan;
  c10::DeviceIndex device = 0;
  std::vector<int64_t> out_shape;  // y, dx or dw
};

// Written under the GIL by remember_op, read by kernels on any thread (autograd's backward
// runs the grad ops on its own): a reader-writer lock. Never freed (outlives teardown).
auto* g_ops = new std::unordered_map<std::vector<int64_t>, OpEntry, KeyHash>();
auto* g_ops_lock = new std::shared_mutex();

// The Python kernels the C++ ones replaced, per op: the fallbacks.
std::optional<c10::SafeKernelFunction> g_python_cuda[kOps];
std::optional<c10::SafeKernelFunction> g_python_autograd[kOps];

bool IntOf(const c10::IValue& v, int64_t* out) {
  if (v.isInt()) {
    *out = v.toInt();
    return true;
  }
  if (v.isSymInt()) {
    const std::optional<int64_t> i = v.toSymInt().maybe_as_int();
    if (i) *out = *i;
    return i.has_value();
  }
  return false;
}

// Runs a looked-up plan on the stack's arguments and replaces them with the results; false
// (stack untouched) where the tensors are not the plain float32 case on the plan's device.
bool RunOp(int op, const OpEntry& e, torch::jit::Stack* stack, size_t n) {
  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, n);
  const at::Tensor& a = args[0].toTensor();
  const at::Tensor& b = args[1].toTensor();
  const bool bias = op == 0 ? !args[2].isNone() : op == 2 && args[7].toBool();
  const at::Tensor* bias_t = op == 0 && bias ? &args[2].toTensor() : nullptr;
  for (const at::Tensor* t : {&a, &b, bias_t}) {
    if (t != nullptr && !(Plain(*t) && t->scalar_type() == at::kFloat && t->is_cuda() &&
                          t->get_device() == e.device)) {
      return false;
    }
  }
  if (op == 0) {
    at::Tensor y = RunForward(e.plan, e.device, e.out_shape, a, b, bias_t);
    torch::jit::drop(*stack, n);
    torch::jit::push(*stack, std::move(y));
  } else if (op == 1) {
    at::Tensor dx = RunDgrad(e.plan, e.device, e.out_shape, a, b);
    torch::jit::drop(*stack, n);
    torch::jit::push(*stack, std::move(dx));
  } else {
    auto [dw, db] = RunWgrad(e.plan, e.device, e.out_shape, a, b, bias);
    if (!bias) db = at::empty({0}, dw.options());  // the schema's db when not asked for
    torch::jit::drop(*stack, n);
    torch::jit::push(*stack, std::move(dw), std::move(db));
  }
  return true;
}

template <int kOp>
void CudaKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  std::vector<int64_t> key;
  if (OpKeyOf(kOp, torch::jit::last(*stack, n), &key)) {
    std::optional<OpEntry> entry;
    {
      const std::shared_lock<std::shared_mutex> read(*g_ops_lock);
      const auto it = g_ops->find(key);
      if (it != g_ops->end()) entry = it->second;
    }
    if (entry && RunOp(kOp, *entry, stack, n)) return;
  }
  g_python_cuda[kOp]->callBoxed(op, keys, stack);
}

template <int kOp>
void AutogradKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                    torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  bool needs = false;
  if (c10::GradMode::is_enabled()) {
    for (const c10::IValue& v : torch::jit::last(*stack, n)) {
      needs = needs || (v.isTensor() && v.toTensor().requires_grad());
    }
  }
  if (needs) {  // custom_op's autograd.Function records the graph (Python)
    g_python_autograd[kOp]->callBoxed(op, keys, stack);
    return;
  }
  const at::AutoDispatchBelowAutograd below;
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

// Swallows the dispatcher's one "overriding a previously registered kernel" warning.
class QuietHandler : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

}  // namespace

bool OpKeyOf(int op, c10::ArrayRef<c10::IValue> args, std::vector<int64_t>* key) {
  key->clear();
  key->push_back(op);
  for (const c10::IValue& v : args) {
    int64_t i;
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      key->push_back(t.dim());
      for (int64_t s : t.sizes()) key->push_back(s);
      key->push_back(t.is_cuda() ? t.get_device() : -2);
    } else if (v.isNone()) {
      key->push_back(-1);
    } else if (v.isBool()) {
      key->push_back(v.toBool() ? 1 : 0);
    } else if (IntOf(v, &i)) {
      key->push_back(i);
    } else if (v.isList()) {
      const c10::List<c10::IValue> list = v.toList();
      key->push_back(static_cast<int64_t>(list.size()));
      for (size_t j = 0; j < list.size(); ++j) {
        if (!IntOf(list.get(j), &i)) return false;
        key->push_back(i);
      }
    } else if (v.isIntList()) {
      const std::vector<int64_t> list = v.toIntVector();
      key->push_back(static_cast<int64_t>(list.size()));
      key->insert(key->end(), list.begin(), list.end());
    } else {
      return false;
    }
  }
  return true;
}

const c10::FunctionSchema& OpSchema(int op) {
  TORCH_CHECK(op >= 0 && op < kOps, "conv2d fast path: no op ", op);
  return c10::Dispatcher::singleton().findSchemaOrThrow(kOpNames[op], "").schema();
}

bool RememberOp(int op, PlanRef plan, int device, std::vector<int64_t> out_shape,
                const std::vector<c10::IValue>& args) {
  std::vector<int64_t> key;
  if (!OpKeyOf(op, args, &key)) return false;
  const std::unique_lock<std::shared_mutex> write(*g_ops_lock);
  (*g_ops)[std::move(key)] =
      OpEntry{plan, static_cast<c10::DeviceIndex>(device), std::move(out_shape)};
  return true;
}

// Op I's C++ CUDA and Autograd kernels into lib (the op's name without the "conv2d::" namespace).
template <int I>
void ImplOp(torch::Library* lib) {
  const char* name = kOpNames[I] + sizeof("conv2d::") - 1;
  using torch::CppFunction;
  lib->impl(name, torch::dispatch(c10::DispatchKey::CUDA,
                                  CppFunction::makeFromBoxedFunction<&CudaKernel<I>>()));
  lib->impl(name, torch::dispatch(c10::DispatchKey::Autograd,
                                  CppFunction::makeFromBoxedFunction<&AutogradKernel<I>>()));
}

void RegisterOps() {
  static torch::Library* lib = nullptr;  // once; never freed (the kernels stay registered)
  if (lib != nullptr) return;
  for (int i = 0; i < kOps; ++i) {
    const c10::OperatorHandle handle =
        c10::Dispatcher::singleton().findSchemaOrThrow(kOpNames[i], "");
    g_python_cuda[i] = handle.getComputedKernelForDispatchKey(c10::DispatchKey::CUDA);
    g_python_autograd[i] = handle.getComputedKernelForDispatchKey(c10::DispatchKey::AutogradCUDA);
  }
  static QuietHandler quiet_handler;
  const c10::WarningUtils::WarningHandlerGuard quiet(&quiet_handler);
  lib = new torch::Library(torch::Library::IMPL, "conv2d", std::nullopt, __FILE__, __LINE__);
  ImplOp<0>(lib);
  ImplOp<1>(lib);
  ImplOp<2>(lib);
}

}  // namespace conv2d_fast
