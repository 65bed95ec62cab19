/* conv2d C ABI: the same plan and run as conv/conv.h, for C callers and Python ctypes.
 *
 * Every function returns 0 on success or an error code (the absl::StatusCode values below);
 * conv2d_last_error() then gives this thread's message. On error nothing the caller owns is
 * written, except *plan set to NULL by conv2d_plan_create.
 *
 *   conv2d_plan* plan;
 *   if (conv2d_plan_create(4, 64, 64, 128, 128, 8, 8, "auto", &plan)) puts(conv2d_last_error());
 *   size_t ws_bytes; conv2d_plan_workspace_size(plan, &ws_bytes);
 *   conv2d_plan_run(plan, x, w, y, ws, ws_bytes, stream);  // device pointers, cudaStream_t
 *   conv2d_plan_destroy(plan);
 *
 * The whole geometry of torch.nn.functional.conv2d (padding per side, stride, dilation, groups,
 * bias; conv/shape.h) through an extensible descriptor:
 *
 *   conv2d_problem p;
 *   conv2d_problem_init(&p);                 // defaults, and struct_size = sizeof(p)
 *   p.batch = 8; p.in_channels = 3; p.out_channels = 64; p.height = p.width = 224;
 *   p.kernel_h = p.kernel_w = 7;
 *   p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 3; p.stride_h = p.stride_w = 2;
 *   p.has_bias = 1;
 *   if (conv2d_plan_create_ex(&p, "auto", &plan)) puts(conv2d_last_error());
 *   conv2d_plan_run_ex(plan, x, w, bias, y, ws, ws_bytes, stream);
 *
 * The backward of training through the same descriptor (p.operation) and the same plan cycle:
 *
 *   p.operation = CONV2D_DGRAD;   p.has_bias = 0;     // dx from dy and w
 *   conv2d_plan_create_ex(&p, "auto", &plan);
 *   conv2d_plan_run_dgrad(plan, dy, w, dx, ws, ws_bytes, stream);
 *   p.operation = CONV2D_WGRAD;   p.has_bias = 1;     // dw (and db) from x and dy
 *   conv2d_plan_create_ex(&p, "auto", &plan);
 *   conv2d_plan_run_wgrad(plan, x, dy, dw, db, ws, ws_bytes, stream);
 */
#ifndef CONV2D_CONV_CONV2D_C_H_
#define CONV2D_CONV_CONV2D_C_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

enum conv2d_error {
  CONV2D_OK = 0,
  CONV2D_INVALID_ARGUMENT = 3,   /* bad shape or problem descriptor (the message says which
                                    field and why); a pointer that is null, misaligned (x, w, y
                                    or bias not on a 4-byte boundary), pageable host memory or
                                    another device's memory; workspace too small; y overlapping
                                    x, w, bias or the workspace; a bias given to a plan without
                                    one, or missing for a plan with one */
  CONV2D_NOT_FOUND = 5,          /* unknown algorithm name */
  CONV2D_RESOURCE_EXHAUSTED = 8, /* the chosen algorithm's workspace is over its cap, or host
                                    memory ran out */
  CONV2D_FAILED_PRECONDITION = 9, /* no CUDA device; the chosen algorithm needs another GPU
                                     (e.g. sm_90 for implicit_gemm_wgmma); or a run with another
                                     device current than the plan's */
  CONV2D_OUT_OF_RANGE = 11,      /* shape too large for the chosen kernel's 32-bit indices */
  CONV2D_UNIMPLEMENTED = 12,     /* the chosen algorithm does not take this shape */
  CONV2D_INTERNAL = 13,          /* a CUDA, cuFFT or cuBLAS error, or an unexpected C++ exception */
};

typedef struct conv2d_plan conv2d_plan;

/* Which convolution of training a problem is (conv/shape.h): the forward y = conv(x, w) + bias,
 * the data gradient dx from dy and w, or the weight gradient dw (and the bias gradient db) from x
 * and dy; dy is shaped as y, dx as x, dw as w, db as the bias. */
enum conv2d_operation {
  CONV2D_FPROP = 0,
  CONV2D_DGRAD = 1,
  CONV2D_WGRAD = 2,
};

/* One convolution, exactly as torch.nn.functional.conv2d computes it (conv/shape.h):
 *   x [batch, in_channels, height, width], w [out_channels, in_channels / groups, kernel_h,
 *   kernel_w], bias [out_channels] (when has_bias), y [batch, out_channels, out_h, out_w] with
 *   out_h = (height + pad_top + pad_bottom - dilation_h * (kernel_h - 1) - 1) / stride_h + 1
 *   (floor; out_w likewise); fp32, dense, NCHW / OIHW.
 *
 * Extensible: struct_size is sizeof(conv2d_problem) as the caller compiled it (conv2d_problem_init
 * sets it). A library newer than the caller gives the fields past a smaller struct_size their
 * defaults; a library older than the caller accepts a larger struct_size only when every byte it
 * does not know is zero. A struct_size smaller than this first version's sizeof (144 bytes on
 * 64-bit targets), or larger with a nonzero byte unknown to the library (or beyond 4096):
 * CONV2D_INVALID_ARGUMENT. Fields added later start at offset sizeof(the version before); the
 * padding after has_bias is never read, so it may hold anything. Version 2 (152 bytes) added
 * `operation`. */
typedef struct conv2d_problem {
  size_t struct_size;
  int64_t batch, in_channels, out_channels, height, width, kernel_h, kernel_w; /* required */
  int64_t pad_top, pad_bottom, pad_left, pad_right; /* default 0; >= 0 */
  int64_t stride_h, stride_w;                       /* default 1; >= 1 */
  int64_t dilation_h, dilation_w;                   /* default 1; >= 1 */
  int64_t groups;   /* default 1; divides in_channels and out_channels (= in_channels: depthwise) */
  int32_t has_bias; /* default 0; 0 or 1: whether conv2d_plan_run_ex takes a bias (the forward)
                       or conv2d_plan_run_wgrad writes db; a dgrad problem has none */
  int64_t operation; /* version 2; default CONV2D_FPROP: a conv2d_operation */
} conv2d_problem;

/* The defaults above, every size 0 (to be set), and struct_size = sizeof(conv2d_problem) as this
 * header declares it. Inline, so that the size is the caller's, never the library's (a library
 * built from a newer header must not write past the caller's struct). Ignores NULL. Bindings
 * that cannot call it (ctypes) mirror it: zero the struct, set struct_size to their size of it,
 * stride, dilation and groups to 1. */
static inline void conv2d_problem_init(conv2d_problem* problem) {
  if (problem == NULL) return;
  memset(problem, 0, sizeof *problem);
  problem->struct_size = sizeof *problem;
  problem->stride_h = problem->stride_w = 1;
  problem->dilation_h = problem->dilation_w = 1;
  problem->groups = 1;
}

/* The basic form: no padding, stride 1, no dilation, one group, no bias.
 * x [batch, in_channels, height, width], w [out_channels, in_channels, kernel_h, kernel_w],
 * y [batch, out_channels, height-kernel_h+1, width-kernel_w+1], fp32. algorithm: "auto" or NULL
 * for automatic choice, else a name from conv2d_algorithm_name. */
int conv2d_plan_create(int64_t batch, int64_t in_channels, int64_t out_channels, int64_t height,
                       int64_t width, int64_t kernel_h, int64_t kernel_w, const char* algorithm,
                       conv2d_plan** plan);
/* Any problem (see conv2d_problem). Errors as conv2d_plan_create; CONV2D_INVALID_ARGUMENT for a
 * NULL problem, a bad struct_size, has_bias other than 0 or 1, an unknown operation, a bias on a
 * dgrad problem, or a field the shape's
 * validation refuses (the message names it: "stride_h must be positive, got 0"). An algorithm
 * that does not compute a part of the geometry gives CONV2D_UNIMPLEMENTED naming the part. */
int conv2d_plan_create_ex(const conv2d_problem* problem, const char* algorithm,
                          conv2d_plan** plan);
int conv2d_plan_workspace_size(const conv2d_plan* plan, size_t* bytes);
/* The algorithm the plan runs; valid until the plan is destroyed. NULL for a NULL plan. */
const char* conv2d_plan_algorithm(const conv2d_plan* plan);
/* x, w, y, workspace: memory the plan's device can read (the device that was current at
 * conv2d_plan_create must be current). stream: a cudaStream_t, or NULL for the default stream.
 * Safe to call from several threads on one plan: calls are enqueued one at a time; each
 * concurrent call needs its own workspace. */
int conv2d_plan_run(const conv2d_plan* plan, const float* x, const float* w, float* y,
                    void* workspace, size_t workspace_bytes, void* stream);
/* The same with a bias: `bias` ([out_channels] fp32, readable by the plan's device as x is) is
 * given exactly when the plan's problem has_bias, else NULL; a bias given to a plan without one,
 * or missing for one with one, is CONV2D_INVALID_ARGUMENT and nothing is written.
 * conv2d_plan_run is conv2d_plan_run_ex with bias NULL. */
int conv2d_plan_run_ex(const conv2d_plan* plan, const float* x, const float* w,
                       const float* bias, float* y, void* workspace, size_t workspace_bytes,
                       void* stream);
/* The data gradient of a CONV2D_DGRAD plan: dx (written, shaped as x) from dy (shaped as y) and
 * w. The weight gradient of a CONV2D_WGRAD plan: dw (written, shaped as w) from x and dy, and db
 * ([out_channels], written) exactly when the problem has_bias, else NULL. As conv2d_plan_run_ex
 * otherwise: a written tensor overlapping any other, or a plan of another operation, is
 * CONV2D_INVALID_ARGUMENT and nothing is written. The results are bitwise the same on every call
 * with the same inputs. */
int conv2d_plan_run_dgrad(const conv2d_plan* plan, const float* dy, const float* w, float* dx,
                          void* workspace, size_t workspace_bytes, void* stream);
int conv2d_plan_run_wgrad(const conv2d_plan* plan, const float* x, const float* dy, float* dw,
                          float* db, void* workspace, size_t workspace_bytes, void* stream);
void conv2d_plan_destroy(conv2d_plan* plan);

/* Registered algorithm names: index 0..count-1, NULL past the end. */
int conv2d_algorithm_count(void);
const char* conv2d_algorithm_name(int index);

/* This thread's message for the last error, "" if none. */
const char* conv2d_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* CONV2D_CONV_CONV2D_C_H_ */
