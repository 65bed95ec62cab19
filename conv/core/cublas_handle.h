// A cuBLAS handle owned by one Runner, shared by the variants that hand a stage to cuBLAS. The
// handle is made once per plan with an explicit math mode (so that the environment cannot turn
// TF32 on behind our accuracy argument) and bound to the call's stream and to a slice of the
// plan's workspace before every call, so that cuBLAS allocates nothing of its own while a call
// runs.
#ifndef CONV2D_CONV_CUBLAS_HANDLE_H_
#define CONV2D_CONV_CUBLAS_HANDLE_H_

#include <cublas_v2.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace conv2d {

class CublasHandle {
 public:
  // `owner` names the variant in every error message.
  explicit CublasHandle(absl::string_view owner) : owner_(owner) {}
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle() {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }

  absl::Status Init(cublasMath_t math) {
    if (handle_ == nullptr) {
      absl::Status st = Check(cublasCreate(&handle_), "cublasCreate");
      if (!st.ok()) {
        handle_ = nullptr;
        return st;
      }
    }
    return Check(cublasSetMathMode(handle_, math), "cublasSetMathMode");
  }

  // Before every call: cublasSetStream resets the handle to cuBLAS's own workspace pool, so the
  // workspace is set after it. It changes the handle: one thread at a time, as Runner::Run is
  // called (algorithm.h).
  absl::Status Bind(cudaStream_t stream, void* workspace, size_t workspace_bytes) const {
    absl::Status st = Check(cublasSetStream(handle_, stream), "cublasSetStream");
    if (!st.ok()) return st;
    return Check(cublasSetWorkspace(handle_, workspace, workspace_bytes), "cublasSetWorkspace");
  }

  cublasHandle_t get() const { return handle_; }

  absl::Status Check(cublasStatus_t s, absl::string_view what) const {
    if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(owner_, ": ", what, ": ", cublasGetStatusName(s), " (",
                                            cublasGetStatusString(s), ")"));
  }

 private:
  std::string owner_;
  cublasHandle_t handle_ = nullptr;
};

}  // namespace conv2d

#endif  // CONV2D_CONV_CUBLAS_HANDLE_H_
