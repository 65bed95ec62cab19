// The C ABI over Plan. Errors become codes plus a thread-local message; no exception or abort
// crosses the boundary: the entry points that can allocate run their body through Guard, which
// turns an escaping C++ exception into an error code (ResourceExhausted for std::bad_alloc,
// Internal for any other).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "conv/conv.h"
#include "conv/conv2d_c.h"

struct conv2d_plan {
  conv2d::Plan plan;
};

namespace {

thread_local std::string last_error;

int Fail(const absl::Status& status) {
  last_error = status.ToString();
  return static_cast<int>(status.code());
}

int Fail(absl::StatusCode code, const char* message) { return Fail(absl::Status(code, message)); }

// Runs `body` (returning an error code), mapping an exception to an error code and message.
template <typename Body>
int Guard(const char* function, Body body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(absl::StatusCode::kResourceExhausted,
                (std::string(function) + ": out of host memory").c_str());
  } catch (const std::exception& e) {
    return Fail(absl::StatusCode::kInternal,
                (std::string(function) + ": unexpected C++ exception: " + e.what()).c_str());
  } catch (...) {
    return Fail(absl::StatusCode::kInternal,
                (std::string(function) + ": unexpected C++ exception").c_str());
  }
}

// The first version's size: the smallest struct_size ever accepted. Later versions append fields
// and keep this constant.
constexpr size_t kProblemV1Size = 8 + 16 * 8 + 8;  // struct_size, 16 int64, has_bias + padding
static_assert(sizeof(size_t) != 8 || offsetof(conv2d_problem, operation) == kProblemV1Size,
              "conv2d_problem's first version is 144 bytes on 64-bit targets");
static_assert(sizeof(size_t) != 8 || sizeof(conv2d_problem) == kProblemV1Size + 8,
              "version 2 appends operation (int64)");
// A struct_size beyond this is not a conv2d_problem (and is not read).
constexpr size_t kProblemMaxSize = 4096;

// The Shape a caller's descriptor describes (not yet validated: Plan::Create does that), or why
// the descriptor itself is unreadable.
absl::Status ShapeOf(const conv2d_problem* problem, conv2d::Shape* shape) {
  if (problem == nullptr) return absl::InvalidArgumentError("problem is null");
  const size_t size = problem->struct_size;
  if (size < kProblemV1Size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "problem->struct_size = ", size, " is smaller than the first conv2d_problem's (",
        kProblemV1Size, " bytes); set it with conv2d_problem_init"));
  }
  if (size > kProblemMaxSize) {
    return absl::InvalidArgumentError(absl::StrCat("problem->struct_size = ", size,
                                                   " is beyond ", kProblemMaxSize,
                                                   ": not a conv2d_problem"));
  }
  // A caller compiled against a newer header: the fields this library does not know must be
  // unset (zero), else it would silently compute another problem than the one asked for.
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(problem);
  for (size_t i = sizeof(conv2d_problem); i < size; ++i) {
    if (bytes[i] != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "problem->struct_size = ", size, ": byte ", i, " is nonzero, past the ",
          sizeof(conv2d_problem), " bytes of conv2d_problem this library knows (a field of a "
          "newer version is set; use a newer libconv2d)"));
    }
  }
  // A caller compiled against an older header: the fields past its struct_size keep their
  // defaults (version 1's callers get the forward).
  conv2d_problem p;
  conv2d_problem_init(&p);
  // Only whole fields of the caller's version: a size between two versions' reads the older.
  std::memcpy(&p, problem, size < sizeof(conv2d_problem) ? kProblemV1Size : sizeof(conv2d_problem));
  if (p.has_bias != 0 && p.has_bias != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem->has_bias must be 0 or 1, got ", p.has_bias));
  }
  if (p.operation != CONV2D_FPROP && p.operation != CONV2D_DGRAD && p.operation != CONV2D_WGRAD) {
    return absl::InvalidArgumentError(absl::StrCat(
        "problem->operation must be CONV2D_FPROP (0), CONV2D_DGRAD (1) or CONV2D_WGRAD (2), got ",
        p.operation));
  }
  conv2d::Shape& s = *shape;
  s.op = static_cast<conv2d::Op>(p.operation);
  s.batch = p.batch;
  s.in_channels = p.in_channels;
  s.out_channels = p.out_channels;
  s.height = p.height;
  s.width = p.width;
  s.kernel_h = p.kernel_h;
  s.kernel_w = p.kernel_w;
  s.pad_top = p.pad_top;
  s.pad_bottom = p.pad_bottom;
  s.pad_left = p.pad_left;
  s.pad_right = p.pad_right;
  s.stride_h = p.stride_h;
  s.stride_w = p.stride_w;
  s.dilation_h = p.dilation_h;
  s.dilation_w = p.dilation_w;
  s.groups = p.groups;
  s.has_bias = p.has_bias == 1;
  return absl::OkStatus();
}

int CreatePlan(const char* function, const conv2d::Shape& shape, const char* algorithm,
               conv2d_plan** plan) {
  return Guard(function, [&] {
    auto created = conv2d::Plan::Create(shape, algorithm == nullptr ? "auto" : algorithm);
    if (!created.ok()) return Fail(created.status());
    *plan = new conv2d_plan{*std::move(created)};
    return static_cast<int>(CONV2D_OK);
  });
}

// Runs `plan` on `t` after checking that the entry point called is the plan's operation's.
int RunPlan(const char* function, conv2d::Op op, const conv2d_plan* plan, const conv2d::Tensors& t,
            void* workspace, size_t workspace_bytes, void* stream) {
  if (plan == nullptr) return Fail(absl::StatusCode::kInvalidArgument, "plan is null");
  return Guard(function, [&] {
    if (plan->plan.shape().op != op) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          function, " runs ", conv2d::OpName(op), " but the plan is for ",
          conv2d::OpName(plan->plan.shape().op), " (", plan->plan.shape().ToString(), ")")));
    }
    absl::Status st =
        plan->plan.Run(t, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
    return st.ok() ? static_cast<int>(CONV2D_OK) : Fail(st);
  });
}

conv2d::Tensors Forward(const float* x, const float* w, const float* bias, float* y) {
  conv2d::Tensors t;
  t.x = x, t.w = w, t.bias = bias, t.y = y;
  return t;
}

const std::vector<std::string>& Names() {
  static const auto* names = new std::vector<std::string>(conv2d::Algorithms());
  return *names;
}

}  // namespace

extern "C" {

int conv2d_plan_create(int64_t batch, int64_t in_channels, int64_t out_channels, int64_t height,
                       int64_t width, int64_t kernel_h, int64_t kernel_w, const char* algorithm,
                       conv2d_plan** plan) {
  last_error.clear();
  if (plan == nullptr) return Fail(absl::StatusCode::kInvalidArgument, "plan out-pointer is null");
  *plan = nullptr;
  conv2d::Shape shape{batch, in_channels, out_channels, height, width, kernel_h, kernel_w};
  return CreatePlan("conv2d_plan_create", shape, algorithm, plan);
}

int conv2d_plan_create_ex(const conv2d_problem* problem, const char* algorithm,
                          conv2d_plan** plan) {
  last_error.clear();
  if (plan == nullptr) return Fail(absl::StatusCode::kInvalidArgument, "plan out-pointer is null");
  *plan = nullptr;
  return Guard("conv2d_plan_create_ex", [&] {
    conv2d::Shape shape;
    if (absl::Status st = ShapeOf(problem, &shape); !st.ok()) return Fail(st);
    return CreatePlan("conv2d_plan_create_ex", shape, algorithm, plan);
  });
}

int conv2d_plan_workspace_size(const conv2d_plan* plan, size_t* bytes) {
  last_error.clear();
  if (plan == nullptr) return Fail(absl::StatusCode::kInvalidArgument, "plan is null");
  if (bytes == nullptr) return Fail(absl::StatusCode::kInvalidArgument, "bytes is null");
  *bytes = plan->plan.workspace_bytes();
  return CONV2D_OK;
}

const char* conv2d_plan_algorithm(const conv2d_plan* plan) {
  return plan == nullptr ? nullptr : plan->plan.algorithm().c_str();
}

int conv2d_plan_run(const conv2d_plan* plan, const float* x, const float* w, float* y,
                    void* workspace, size_t workspace_bytes, void* stream) {
  last_error.clear();
  return RunPlan("conv2d_plan_run", conv2d::Op::kFprop, plan, Forward(x, w, nullptr, y), workspace,
                 workspace_bytes, stream);
}

int conv2d_plan_run_ex(const conv2d_plan* plan, const float* x, const float* w,
                       const float* bias, float* y, void* workspace, size_t workspace_bytes,
                       void* stream) {
  last_error.clear();
  return RunPlan("conv2d_plan_run_ex", conv2d::Op::kFprop, plan, Forward(x, w, bias, y),
                 workspace, workspace_bytes, stream);
}

int conv2d_plan_run_dgrad(const conv2d_plan* plan, const float* dy, const float* w, float* dx,
                          void* workspace, size_t workspace_bytes, void* stream) {
  last_error.clear();
  conv2d::Tensors t;
  t.dy = dy, t.w = w, t.dx = dx;
  return RunPlan("conv2d_plan_run_dgrad", conv2d::Op::kDgrad, plan, t, workspace,
                 workspace_bytes, stream);
}

int conv2d_plan_run_wgrad(const conv2d_plan* plan, const float* x, const float* dy, float* dw,
                          float* db, void* workspace, size_t workspace_bytes, void* stream) {
  last_error.clear();
  conv2d::Tensors t;
  t.x = x, t.dy = dy, t.dw = dw, t.db = db;
  return RunPlan("conv2d_plan_run_wgrad", conv2d::Op::kWgrad, plan, t, workspace,
                 workspace_bytes, stream);
}

void conv2d_plan_destroy(conv2d_plan* plan) { delete plan; }

int conv2d_algorithm_count(void) {
  try {
    return static_cast<int>(Names().size());
  } catch (...) {  // building the list on first use failed (out of host memory): none to give
    last_error = "conv2d_algorithm_count: could not list the algorithms";
    return 0;
  }
}

const char* conv2d_algorithm_name(int index) {
  if (index < 0 || index >= conv2d_algorithm_count()) return nullptr;
  return Names()[index].c_str();
}

const char* conv2d_last_error(void) { return last_error.c_str(); }

}  // extern "C"
