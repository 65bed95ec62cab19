// The C ABI over Plan. Errors become codes plus a thread-local message; no exception or abort
// crosses the boundary: the entry points that can allocate run their body through Guard, which
// turns an escaping C++ exception into an error code (ResourceExhausted for std::bad_alloc,
// Internal for any other).
#include <exception>
#include <new>
#include <string>
#include <vector>

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
  return Guard("conv2d_plan_create", [&] {
    conv2d::Shape shape{batch, in_channels, out_channels, height, width, kernel_h, kernel_w};
    auto created = conv2d::Plan::Create(shape, algorithm == nullptr ? "auto" : algorithm);
    if (!created.ok()) return Fail(created.status());
    *plan = new conv2d_plan{*std::move(created)};
    return static_cast<int>(CONV2D_OK);
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
  if (plan == nullptr) return Fail(absl::StatusCode::kInvalidArgument, "plan is null");
  return Guard("conv2d_plan_run", [&] {
    absl::Status st = plan->plan.Run(x, w, y, workspace, workspace_bytes,
                                     static_cast<cudaStream_t>(stream));
    return st.ok() ? static_cast<int>(CONV2D_OK) : Fail(st);
  });
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
