#include "conv/triton/cuda_driver.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace conv2d {
namespace triton {

absl::Status CudaDriver::Check(CUresult result, const char* what) const {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  const char* text = nullptr;
  if (GetErrorName == nullptr || GetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (GetErrorString == nullptr || GetErrorString(result, &text) != CUDA_SUCCESS) text = nullptr;
  return absl::InternalError(absl::StrCat(what, ": ", name ? name : "CUresult ",
                                          name ? "" : absl::StrCat(static_cast<int>(result)),
                                          text ? absl::StrCat(" (", text, ")") : ""));
}

namespace {

absl::Status NoDriver(absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat("no CUDA driver: ", why));
}

absl::StatusOr<CudaDriver> OpenDriver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    return NoDriver(absl::StrCat("cannot open libcuda.so.1 (", err ? err : "unknown error",
                                 "); it comes with the NVIDIA GPU driver"));
  }
  // cuGetProcAddress picks each entry point's ABI version to match the declarations in the
  // cuda.h this file is compiled against (CUDA_VERSION), e.g. cuCtxPushCurrent_v2.
  using GetProcAddress = decltype(&::cuGetProcAddress);
  auto get_proc = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  using Init = decltype(&::cuInit);
  auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
  using DriverGetVersion = decltype(&::cuDriverGetVersion);
  auto driver_version = reinterpret_cast<DriverGetVersion>(dlsym(lib, "cuDriverGetVersion"));
  if (get_proc == nullptr || init == nullptr || driver_version == nullptr) {
    return NoDriver("libcuda.so.1 lacks cuGetProcAddress_v2 (a driver for CUDA 12.0 or later)");
  }
  CudaDriver d;
  bool missing = false;
  std::string missing_names;
  auto load = [&](auto& fn, const char* name, int version) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult found;
    if (get_proc(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS ||
        p == nullptr || found != CU_GET_PROC_ADDRESS_SUCCESS) {
      missing = true;
      absl::StrAppend(&missing_names, missing_names.empty() ? "" : ", ", name);
      return;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
#define CONV2D_CUDA_DRIVER_LOAD(member, function, abi) load(d.member, #function, abi);
  CONV2D_CUDA_DRIVER_ENTRY_POINTS(CONV2D_CUDA_DRIVER_LOAD)
#undef CONV2D_CUDA_DRIVER_LOAD
  if (missing) return NoDriver(absl::StrCat("libcuda.so.1 lacks ", missing_names));
  const CUresult init_result = init(0);
  if (init_result != CUDA_SUCCESS) {
    return NoDriver(d.Check(init_result, "cuInit").message());
  }
  if (driver_version(&d.version) != CUDA_SUCCESS) d.version = 0;
  // The library stays open for the life of the process.
  return d;
}

}  // namespace

absl::StatusOr<const CudaDriver*> GetCudaDriver() {
  static const absl::StatusOr<CudaDriver>* driver = new absl::StatusOr<CudaDriver>(OpenDriver());
  if (!driver->ok()) return driver->status();
  return &driver->value();
}

}  // namespace triton
}  // namespace conv2d
