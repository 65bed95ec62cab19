#include "tools/cudnn_conv.h"

#include <cudnn.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "conv/core/status_macros.h"

namespace conv2d {

namespace {

absl::Status CudnnStatus(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cuDNN ", what, ": ", cudnnGetErrorString(st), " (",
                                          static_cast<int>(st), ")"));
}

const char* AlgoName(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "UNKNOWN";
  }
}

const char* AlgoName(cudnnConvolutionBwdDataAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return "BWD_DATA_ALGO_0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return "BWD_DATA_ALGO_1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return "BWD_DATA_FFT";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return "BWD_DATA_FFT_TILING";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return "BWD_DATA_WINOGRAD";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return "BWD_DATA_WINOGRAD_NONFUSED";
    default: return "BWD_DATA_UNKNOWN";
  }
}

const char* AlgoName(cudnnConvolutionBwdFilterAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return "BWD_FILTER_ALGO_0";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return "BWD_FILTER_ALGO_1";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return "BWD_FILTER_FFT";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return "BWD_FILTER_ALGO_3";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED:
      return "BWD_FILTER_WINOGRAD_NONFUSED";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: return "BWD_FILTER_FFT_TILING";
    default: return "BWD_FILTER_UNKNOWN";
  }
}

// cuDNN's search for one operation (`find`: its cudnnFind* over n entries; Find returns its
// results sorted by time): the fastest
// FMA-math entry's algorithm (stored as int: the three operations' enums differ), its name, its
// measured time and its workspace.
template <typename Perf, typename Find>
absl::Status FindFastest(int max_algos, const char* what, const Shape& s, int* algo,
                         std::string* name, float* ms, size_t* workspace, Find find) {
  std::vector<Perf> perf(std::max(max_algos, 1));
  int returned = 0;
  RETURN_IF_ERROR(CudnnStatus(find(static_cast<int>(perf.size()), &returned, perf.data()), what));
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType == CUDNN_FMA_MATH) {
      *algo = static_cast<int>(perf[i].algo);
      *name = AlgoName(perf[i].algo);
      *ms = perf[i].time;
      *workspace = perf[i].memory;
      return absl::OkStatus();
    }
  }
  return absl::UnimplementedError(absl::StrCat("cuDNN found no FMA-math ", OpName(s.op),
                                               " algorithm for ", s.ToString(), " (", returned,
                                               " tried)"));
}

absl::StatusOr<int> ToInt(int64_t v, const char* what) {
  if (v > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("cuDNN: ", what, " = ", v, " exceeds int"));
  }
  return static_cast<int>(v);
}

}  // namespace

struct CudnnConv::Handles {
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t x = nullptr;
  cudnnTensorDescriptor_t y = nullptr;
  cudnnTensorDescriptor_t bias = nullptr;  // [1, Cout, 1, 1], only when the shape has_bias
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;  // the operation's algorithm enum

  ~Handles() {
    // Teardown errors have nowhere to go; the process is usually about to exit anyway.
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
    if (handle) cudnnDestroy(handle);
  }
};

CudnnConv::CudnnConv(const Shape& shape) : shape_(shape), h_(new Handles) {}
CudnnConv::~CudnnConv() = default;

absl::Status CudnnConv::Supports(const Shape& s) {
  // The legacy descriptor has one pad per dimension, added on both sides. Asymmetric padding
  // would need the backend (graph) API's pre/post padding; no layer of the nets suite needs it.
  if (s.pad_top != s.pad_bottom || s.pad_left != s.pad_right) {
    return absl::UnimplementedError(absl::StrCat(
        "cuDNN's legacy API pads symmetrically; ", s.ToString(), " pads ", s.pad_top, ",",
        s.pad_bottom, " rows and ", s.pad_left, ",", s.pad_right, " columns"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudnnConv>> CudnnConv::Create(const Shape& s) {
  RETURN_IF_ERROR(ValidateShape(s));
  RETURN_IF_ERROR(Supports(s));
  ASSIGN_OR_RETURN(int b, ToInt(s.batch, "batch"));
  ASSIGN_OR_RETURN(int ci, ToInt(s.in_channels, "in_channels"));
  ASSIGN_OR_RETURN(int co, ToInt(s.out_channels, "out_channels"));
  ASSIGN_OR_RETURN(int hh, ToInt(s.height, "height"));
  ASSIGN_OR_RETURN(int ww, ToInt(s.width, "width"));
  ASSIGN_OR_RETURN(int kh, ToInt(s.kernel_h, "kernel_h"));
  ASSIGN_OR_RETURN(int kw, ToInt(s.kernel_w, "kernel_w"));
  ASSIGN_OR_RETURN(int ph, ToInt(s.pad_top, "pad_top"));
  ASSIGN_OR_RETURN(int pw, ToInt(s.pad_left, "pad_left"));
  ASSIGN_OR_RETURN(int sh, ToInt(s.stride_h, "stride_h"));
  ASSIGN_OR_RETURN(int sw, ToInt(s.stride_w, "stride_w"));
  ASSIGN_OR_RETURN(int dh, ToInt(s.dilation_h, "dilation_h"));
  ASSIGN_OR_RETURN(int dw, ToInt(s.dilation_w, "dilation_w"));
  ASSIGN_OR_RETURN(int groups, ToInt(s.groups, "groups"));

  std::unique_ptr<CudnnConv> c(new CudnnConv(s));
  Handles& h = *c->h_;
  RETURN_IF_ERROR(CudnnStatus(cudnnCreate(&h.handle), "cudnnCreate"));
  RETURN_IF_ERROR(CudnnStatus(cudnnCreateTensorDescriptor(&h.x), "create x descriptor"));
  RETURN_IF_ERROR(CudnnStatus(cudnnCreateTensorDescriptor(&h.y), "create y descriptor"));
  RETURN_IF_ERROR(CudnnStatus(cudnnCreateFilterDescriptor(&h.w), "create w descriptor"));
  RETURN_IF_ERROR(CudnnStatus(cudnnCreateConvolutionDescriptor(&h.conv), "create conv descriptor"));
  RETURN_IF_ERROR(CudnnStatus(
      cudnnSetTensor4dDescriptor(h.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, b, ci, hh, ww),
      "set x descriptor"));
  // OIHW with I = Cin / groups, as F.conv2d's weight and the library's filter.
  RETURN_IF_ERROR(CudnnStatus(cudnnSetFilter4dDescriptor(h.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                         co, ci / groups, kh, kw),
                              "set w descriptor"));
  // Cross-correlation is what F.conv2d and the library compute.
  RETURN_IF_ERROR(CudnnStatus(cudnnSetConvolution2dDescriptor(h.conv, ph, pw, sh, sw, dh, dw,
                                                              CUDNN_CROSS_CORRELATION,
                                                              CUDNN_DATA_FLOAT),
                              "set conv descriptor"));
  RETURN_IF_ERROR(CudnnStatus(cudnnSetConvolutionGroupCount(h.conv, groups), "set group count"));
  // FMA math forbids TF32 tensor cores, which miss the accuracy bar by 60-470x.
  RETURN_IF_ERROR(CudnnStatus(cudnnSetConvolutionMathType(h.conv, CUDNN_FMA_MATH),
                              "set math type"));
  int on = 0, oc = 0, oh = 0, ow = 0;
  RETURN_IF_ERROR(CudnnStatus(
      cudnnGetConvolution2dForwardOutputDim(h.conv, h.x, h.w, &on, &oc, &oh, &ow),
      "output dims"));
  if (on != s.batch || oc != s.out_channels || oh != s.out_h() || ow != s.out_w()) {
    return absl::InternalError(absl::StrCat("cuDNN output dims ", on, "x", oc, "x", oh, "x", ow,
                                            " disagree with ", s.ToString()));
  }
  RETURN_IF_ERROR(CudnnStatus(
      cudnnSetTensor4dDescriptor(h.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow),
      "set y descriptor"));
  if (s.has_bias) {
    RETURN_IF_ERROR(CudnnStatus(cudnnCreateTensorDescriptor(&h.bias), "create bias descriptor"));
    RETURN_IF_ERROR(CudnnStatus(
        cudnnSetTensor4dDescriptor(h.bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, co, 1, 1),
        "set bias descriptor"));
  }

  // The search over every algorithm of the operation, each with the workspace it asks for.
  int max_algos = 0;
  std::string name;
  float* ms = &c->search_ms_;
  size_t* ws = &c->workspace_bytes_;
  if (s.op == Op::kFprop) {
    RETURN_IF_ERROR(CudnnStatus(cudnnGetConvolutionForwardAlgorithmMaxCount(h.handle, &max_algos),
                                "algorithm count"));
    RETURN_IF_ERROR(FindFastest<cudnnConvolutionFwdAlgoPerf_t>(
        max_algos, "cudnnFindConvolutionForwardAlgorithm", s, &h.algo, &name, ms, ws,
        [&](int n, int* got, auto* p) {
          return cudnnFindConvolutionForwardAlgorithm(h.handle, h.x, h.w, h.conv, h.y, n, got, p);
        }));
  } else if (s.op == Op::kDgrad) {
    RETURN_IF_ERROR(CudnnStatus(
        cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h.handle, &max_algos), "algorithm count"));
    RETURN_IF_ERROR(FindFastest<cudnnConvolutionBwdDataAlgoPerf_t>(
        max_algos, "cudnnFindConvolutionBackwardDataAlgorithm", s, &h.algo, &name, ms, ws,
        [&](int n, int* got, auto* perf) {
          return cudnnFindConvolutionBackwardDataAlgorithm(h.handle, h.w, h.y, h.conv, h.x, n, got,
                                                           perf);
        }));
  } else {
    RETURN_IF_ERROR(CudnnStatus(
        cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h.handle, &max_algos),
        "algorithm count"));
    RETURN_IF_ERROR(FindFastest<cudnnConvolutionBwdFilterAlgoPerf_t>(
        max_algos, "cudnnFindConvolutionBackwardFilterAlgorithm", s, &h.algo, &name, ms, ws,
        [&](int n, int* got, auto* perf) {
          return cudnnFindConvolutionBackwardFilterAlgorithm(h.handle, h.x, h.y, h.conv, h.w, n,
                                                             got, perf);
        }));
  }
  c->algorithm_ = name;
  RETURN_IF_ERROR(CudnnStatus(cudnnSetConvolutionMathType(h.conv, CUDNN_FMA_MATH),
                              "set math type"));
  return c;
}

absl::Status CudnnConv::Run(const Tensors& t, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream) const {
  const Shape& s = shape_;
  const bool ok = s.op == Op::kFprop   ? t.x && t.w && t.y && (t.bias != nullptr) == s.has_bias
                  : s.op == Op::kDgrad ? t.dy && t.w && t.dx
                                       : t.x && t.dy && t.dw && (t.db != nullptr) == s.has_bias;
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuDNN: the tensors given are not ", OpName(s.op), "'s for ", s.ToString()));
  }
  if (workspace_bytes < workspace_bytes_ || (workspace_bytes_ > 0 && workspace == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("cuDNN: workspace of ", workspace_bytes,
                                                   " bytes, ", workspace_bytes_, " needed"));
  }
  RETURN_IF_ERROR(CudnnStatus(cudnnSetStream(h_->handle, stream), "set stream"));
  const float alpha = 1.0f, beta = 0.0f;  // beta 0: the output is not read, so poison is fine
  const float one = 1.0f;
  switch (s.op) {
    case Op::kDgrad:
      return CudnnStatus(
          cudnnConvolutionBackwardData(h_->handle, &alpha, h_->w, t.w, h_->y, t.dy, h_->conv,
                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(h_->algo),
                                       workspace, workspace_bytes_, &beta, h_->x, t.dx),
          "cudnnConvolutionBackwardData");
    case Op::kWgrad:
      RETURN_IF_ERROR(CudnnStatus(
          cudnnConvolutionBackwardFilter(h_->handle, &alpha, h_->x, t.x, h_->y, t.dy, h_->conv,
                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(h_->algo),
                                         workspace, workspace_bytes_, &beta, h_->w, t.dw),
          "cudnnConvolutionBackwardFilter"));
      if (t.db == nullptr) return absl::OkStatus();
      return CudnnStatus(
          cudnnConvolutionBackwardBias(h_->handle, &alpha, h_->y, t.dy, &beta, h_->bias, t.db),
          "cudnnConvolutionBackwardBias");
    case Op::kFprop:
      break;
  }
  RETURN_IF_ERROR(CudnnStatus(
      cudnnConvolutionForward(h_->handle, &alpha, h_->x, t.x, h_->w, t.w, h_->conv,
                              static_cast<cudnnConvolutionFwdAlgo_t>(h_->algo), workspace,
                              workspace_bytes_, &beta, h_->y, t.y),
      "cudnnConvolutionForward"));
  if (t.bias == nullptr) return absl::OkStatus();
  // The bias as one more pass over y (y = 1 * bias broadcast + 1 * y), not
  // cudnnConvolutionBiasActivationForward: that call's identity activation is supported only
  // with IMPLICIT_PRECOMP_GEMM, which would override the algorithm search above.
  return CudnnStatus(cudnnAddTensor(h_->handle, &one, h_->bias, t.bias, &one, h_->y, t.y),
                     "cudnnAddTensor bias");
}

std::string CudnnVersion() {
  const size_t v = cudnnGetVersion();
  // cuDNN 9 encodes major*10000 + minor*100 + patch.
  return absl::StrCat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

}  // namespace conv2d
