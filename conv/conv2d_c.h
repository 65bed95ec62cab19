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
 */
#ifndef CONV2D_CONV_CONV2D_C_H_
#define CONV2D_CONV_CONV2D_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum conv2d_error {
  CONV2D_OK = 0,
  CONV2D_INVALID_ARGUMENT = 3,   /* bad shape; a pointer that is null, misaligned (x, w or y not on a
                                    4-byte boundary), pageable host memory or another
                                    device's memory; workspace too small; y overlapping x, w or
                                    the workspace */
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

/* x [batch, in_channels, height, width], w [out_channels, in_channels, kernel_h, kernel_w],
 * y [batch, out_channels, height-kernel_h+1, width-kernel_w+1], fp32. algorithm: "auto" or NULL
 * for automatic choice, else a name from conv2d_algorithm_name. */
int conv2d_plan_create(int64_t batch, int64_t in_channels, int64_t out_channels, int64_t height,
                       int64_t width, int64_t kernel_h, int64_t kernel_w, const char* algorithm,
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
