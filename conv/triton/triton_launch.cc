// The loader's driver side: TritonKernel::Load (the module into the device's primary context,
// cubin or PTX, the dynamic shared memory opt-in) and Launch (cuLaunchKernelEx with Triton's
// launch attributes). Everything checkable without a driver is done before, in
// triton_kernel.cc and kernel_args.cc.
#include "conv/triton/triton_kernel.h"

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "conv/triton/cuda_driver.h"

namespace conv2d {
namespace triton {

struct TritonKernel::Loaded {
  const CudaDriver* driver = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;  // the device's primary context, retained
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  const char* code = "";
};

namespace {

// Makes `ctx` current for the scope if it is not already.
class ScopedContext {
 public:
  ScopedContext(const CudaDriver* d, CUcontext ctx) : d_(d) {
    CUcontext current = nullptr;
    status_ = d_->Check(d_->CtxGetCurrent(&current), "cuCtxGetCurrent");
    if (status_.ok() && current != ctx) {
      status_ = d_->Check(d_->CtxPushCurrent(ctx), "cuCtxPushCurrent");
      pushed_ = status_.ok();
    }
  }
  ~ScopedContext() {
    if (pushed_) {
      CUcontext popped;
      (void)d_->CtxPopCurrent(&popped);
    }
  }
  const absl::Status& status() const { return status_; }

 private:
  const CudaDriver* d_;
  absl::Status status_;
  bool pushed_ = false;
};

}  // namespace

// Here, where Loaded is complete (the members' cleanup needs its destructor).
TritonKernel::TritonKernel(KernelImage image, KernelMetadata metadata,
                           std::vector<ArgType> signature)
    : image_(std::move(image)), metadata_(std::move(metadata)), signature_(std::move(signature)) {}

TritonKernel::~TritonKernel() {
  if (loaded_ == nullptr) return;
  const CudaDriver* d = loaded_->driver;
  // Errors are ignored: at process exit the driver may already be shut down.
  if (loaded_->module != nullptr) {
    ScopedContext scope(d, loaded_->context);
    if (scope.status().ok()) (void)d->ModuleUnload(loaded_->module);
  }
  if (loaded_->context != nullptr) (void)d->DevicePrimaryCtxRelease(loaded_->device);
}

bool TritonKernel::loaded() const { return loaded_ != nullptr; }

const char* TritonKernel::loaded_code() const { return loaded_ ? loaded_->code : ""; }

namespace {

// cuModuleLoadDataEx with the JIT's error log captured (PTX), so failures say why.
absl::Status LoadModule(const CudaDriver* d, const std::string& code, const char* what,
                        CUmodule* module) {
  char log[8192] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof(log) - 1))};
  // std::string's buffer is NUL-terminated, as PTX text must be.
  absl::Status s = d->Check(d->ModuleLoadDataEx(module, code.c_str(), 2, options, values),
                            absl::StrCat("cuModuleLoadDataEx (", what, ")").c_str());
  if (!s.ok() && log[0] != '\0') {
    return absl::Status(s.code(), absl::StrCat(s.message(), ": ", log));
  }
  return s;
}

}  // namespace

absl::Status TritonKernel::Load(int device, CodeChoice choice) {
  if (loaded_ != nullptr) return absl::FailedPreconditionError(label() + ": already loaded");
  auto driver = GetCudaDriver();
  if (!driver.ok()) {
    return absl::Status(driver.status().code(),
                        absl::StrCat(label(), ": ", driver.status().message()));
  }
  const CudaDriver* d = *driver;
  auto fail = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(label(), ": ", s.message()));
  };

  auto l = std::make_unique<Loaded>();
  l->driver = d;
  if (device < 0) {
    CUcontext current = nullptr;
    absl::Status s = d->Check(d->CtxGetCurrent(&current), "cuCtxGetCurrent");
    if (!s.ok()) return fail(s);
    if (current != nullptr) {
      s = d->Check(d->CtxGetDevice(&l->device), "cuCtxGetDevice");
      if (!s.ok()) return fail(s);
    } else {
      s = d->Check(d->DeviceGet(&l->device, 0), "cuDeviceGet(0)");
      if (!s.ok()) return fail(s);
    }
  } else {
    absl::Status s = d->Check(d->DeviceGet(&l->device, device), "cuDeviceGet");
    if (!s.ok()) return fail(s);
  }
  int major = 0, minor = 0;
  absl::Status s = d->Check(
      d->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, l->device),
      "cuDeviceGetAttribute(compute capability)");
  if (s.ok()) {
    s = d->Check(
        d->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, l->device),
        "cuDeviceGetAttribute(compute capability)");
  }
  if (!s.ok()) return fail(s);
  const int cc = major * 10 + minor;
  s = CheckDeviceArch(cc, choice);
  if (!s.ok()) return s;

  s = d->Check(d->DevicePrimaryCtxRetain(&l->context, l->device), "cuDevicePrimaryCtxRetain");
  if (!s.ok()) return fail(s);
  auto release = [&] {
    if (l->module != nullptr) (void)d->ModuleUnload(l->module);
    (void)d->DevicePrimaryCtxRelease(l->device);
  };
  {
    ScopedContext scope(d, l->context);
    if (!scope.status().ok()) {
      release();
      return fail(scope.status());
    }
    // The cubin when it runs here (a cubin the driver refuses falls back to PTX), else PTX.
    std::vector<std::string> errors;
    const bool try_cubin = choice != CodeChoice::kPtxOnly && !image_.cubin.empty() &&
                           CheckDeviceArch(cc, CodeChoice::kCubinOnly).ok();
    const bool try_ptx = choice != CodeChoice::kCubinOnly && !image_.ptx.empty() &&
                         CheckDeviceArch(cc, CodeChoice::kPtxOnly).ok();
    for (const bool is_ptx : {false, true}) {
      if (l->module != nullptr || !(is_ptx ? try_ptx : try_cubin)) continue;
      s = LoadModule(d, is_ptx ? image_.ptx : image_.cubin, is_ptx ? "PTX" : "cubin", &l->module);
      if (s.ok()) {
        l->code = is_ptx ? "ptx" : "cubin";
      } else {
        errors.push_back(std::string(s.message()));
        l->module = nullptr;
      }
    }
    if (l->module == nullptr) {
      release();
      return absl::InternalError(
          absl::StrCat(label(), ": cannot load: ", absl::StrJoin(errors, "; ")));
    }
    s = d->Check(d->ModuleGetFunction(&l->function, l->module, metadata_.name.c_str()),
                 "cuModuleGetFunction");
    // Dynamic shared memory above 48 KB needs an opt-in, as Triton's loadBinary does
    // (triton/backends/nvidia/driver.c: shared > 49152 -> prefer shared, and allow
    // opt-in maximum minus the kernel's static shared memory).
    int max_threads = 0, shared_static = 0, optin = 0;
    if (s.ok()) {
      s = d->Check(d->FuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                       l->function),
                   "cuFuncGetAttribute(max threads)");
    }
    if (s.ok()) {
      s = d->Check(d->FuncGetAttribute(&shared_static, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                                       l->function),
                   "cuFuncGetAttribute(static shared)");
    }
    if (s.ok()) {
      s = d->Check(d->DeviceGetAttribute(
                       &optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, l->device),
                   "cuDeviceGetAttribute(shared opt-in)");
    }
    if (s.ok() && block_threads() > max_threads) {
      s = absl::FailedPreconditionError(absl::StrCat(
          "num_warps ", metadata_.num_warps, " needs ", block_threads(),
          " threads per block; the loaded kernel allows ", max_threads));
    }
    if (s.ok() && metadata_.shared + shared_static > optin) {
      s = absl::FailedPreconditionError(absl::StrCat(
          "the kernel needs ", metadata_.shared, " bytes of dynamic shared memory (+",
          shared_static, " static); this device allows ", optin, " per block"));
    }
    if (s.ok() && metadata_.shared > 49152) {
      s = d->Check(d->FuncSetCacheConfig(l->function, CU_FUNC_CACHE_PREFER_SHARED),
                   "cuFuncSetCacheConfig");
      if (s.ok()) {
        s = d->Check(d->FuncSetAttribute(l->function,
                                         CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         optin - shared_static),
                     "cuFuncSetAttribute(max dynamic shared memory)");
      }
    }
    if (s.ok() && metadata_.num_ctas == 16) {
      s = d->Check(d->FuncSetAttribute(l->function,
                                       CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                   "cuFuncSetAttribute(non-portable cluster size)");
    }
    if (!s.ok()) {
      release();
      return fail(s);
    }
  }
  loaded_ = std::move(l);
  return absl::OkStatus();
}

absl::Status TritonKernel::Launch(Grid grid, const KernelArgs& args, void* scratch,
                                  size_t scratch_bytes, cudaStream_t stream) const {
  absl::Status s = CheckArgs(args);
  if (!s.ok()) return s;
  s = CheckGrid(grid);
  if (!s.ok()) return s;
  const size_t needed = ScratchBytes(grid);
  if (needed > 0 && (scratch == nullptr || scratch_bytes < needed)) {
    return absl::InvalidArgumentError(absl::StrCat(label(), ": needs ", needed,
                                                   " bytes of scratch, ", scratch_bytes,
                                                   " given"));
  }
  if (loaded_ == nullptr) {
    return absl::FailedPreconditionError(label() + ": Launch before a successful Load");
  }
  // driver.py _launch (line 318): an empty grid launches nothing.
  if (uint64_t{grid.x} * grid.y * grid.z == 0) return absl::OkStatus();

  uint64_t global_scratch = 0, profile_scratch = 0;  // each passed as an 8-byte CUdeviceptr
  SliceScratch(grid, scratch, &global_scratch, &profile_scratch);

  // driver.py make_launcher: params = [&arg_i for non-constexpr i] + [&global_scratch,
  // &profile_scratch] (lines 260-262).
  std::vector<void*> params;
  params.reserve(args.size() + 2);
  for (const uint64_t& slot : args.slots_) params.push_back(const_cast<uint64_t*>(&slot));
  params.push_back(&global_scratch);
  params.push_back(&profile_scratch);

  // driver.py _launch (lines 316-377).
  CUlaunchAttribute attrs[4];
  unsigned num_attrs = 0;
  if (metadata_.launch_pdl) {
    attrs[num_attrs] = {};
    attrs[num_attrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[num_attrs].value.programmaticStreamSerializationAllowed = 1;
    ++num_attrs;
  }
  if (metadata_.launch_cooperative_grid) {
    attrs[num_attrs] = {};
    attrs[num_attrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[num_attrs].value.cooperative = 1;
    ++num_attrs;
  }
  if (metadata_.num_ctas != 1) {
    attrs[num_attrs] = {};
    attrs[num_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[num_attrs].value.clusterDim.x = static_cast<unsigned>(metadata_.num_ctas);
    attrs[num_attrs].value.clusterDim.y = 1;
    attrs[num_attrs].value.clusterDim.z = 1;
    ++num_attrs;
    attrs[num_attrs] = {};
    attrs[num_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    attrs[num_attrs].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
    ++num_attrs;
  }
  CUlaunchConfig config = {};
  config.gridDimX = grid.x * static_cast<unsigned>(metadata_.num_ctas);
  config.gridDimY = grid.y;
  config.gridDimZ = grid.z;
  config.blockDimX = static_cast<unsigned>(block_threads());
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = static_cast<unsigned>(metadata_.shared);
  config.hStream = reinterpret_cast<CUstream>(stream);
  config.attrs = num_attrs ? attrs : nullptr;
  config.numAttrs = num_attrs;

  const CudaDriver* d = loaded_->driver;
  ScopedContext scope(d, loaded_->context);
  if (!scope.status().ok()) {
    return absl::Status(scope.status().code(), absl::StrCat(label(), ": ", scope.status().message()));
  }
  s = d->Check(d->LaunchKernelEx(&config, loaded_->function, params.data(), nullptr),
               "cuLaunchKernelEx");
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(label(), ": ", s.message()));
  return absl::OkStatus();
}

}  // namespace triton
}  // namespace conv2d
