/* conv2d_c.h from C: it compiles as C99 (-pedantic -Werror), conv2d_problem_init is usable
 * from C, and the descriptor's errors come back as codes with reasons. Runs anywhere: a valid
 * descriptor reaches Plan::Create's device check (OK with a GPU, "no CUDA device" without). */
#include <stdio.h>
#include <string.h>

#include "conv/conv2d_c.h"

static int failures = 0;

#define CHECK(cond)                                                               \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "FAILED at line %d: %s (last error: %s)\n", __LINE__, #cond, \
              conv2d_last_error());                                               \
      ++failures;                                                                 \
    }                                                                             \
  } while (0)

static int says(const char* text) { return strstr(conv2d_last_error(), text) != NULL; }

int main(void) {
  conv2d_problem p;
  conv2d_plan* plan = NULL;
  int rc;
  conv2d_problem_init(&p);
  CHECK(p.struct_size == sizeof(conv2d_problem));
  CHECK(p.stride_h == 1 && p.stride_w == 1 && p.dilation_h == 1 && p.dilation_w == 1);
  CHECK(p.groups == 1 && p.has_bias == 0 && p.pad_top == 0 && p.pad_right == 0);
  p.batch = 2;
  p.in_channels = 6;
  p.out_channels = 4;
  p.height = 16;
  p.width = 15;
  p.kernel_h = 3;
  p.kernel_w = 5;
  p.pad_top = 1;
  p.pad_right = 2;
  p.stride_w = 2;
  p.groups = 2;
  p.has_bias = 1;
  rc = conv2d_plan_create_ex(&p, "direct", &plan);
  CHECK(rc == CONV2D_OK || (rc == CONV2D_FAILED_PRECONDITION && says("no CUDA device")));
  if (rc == CONV2D_OK) {
    CHECK(strcmp(conv2d_plan_algorithm(plan), "direct") == 0);
    conv2d_plan_destroy(plan);
  } else {
    CHECK(plan == NULL);
    printf("NOTE: no CUDA device here: the descriptor's errors only (runs are tested by "
           "c_api_test in the GPU bundle)\n");
  }
  p.groups = 4; /* divides 4 but not 6 */
  CHECK(conv2d_plan_create_ex(&p, "direct", &plan) == CONV2D_INVALID_ARGUMENT);
  CHECK(says("must divide in_channels"));
  p.groups = 2;
  p.dilation_h = 0;
  CHECK(conv2d_plan_create_ex(&p, "direct", &plan) == CONV2D_INVALID_ARGUMENT);
  CHECK(says("dilation_h must be positive"));
  p.dilation_h = 1;
  p.struct_size = offsetof(conv2d_problem, operation) - 1; /* below the first version */
  CHECK(conv2d_plan_create_ex(&p, "direct", &plan) == CONV2D_INVALID_ARGUMENT);
  CHECK(says("struct_size"));
  CHECK(plan == NULL);
  if (failures == 0) printf("c_header_test: PASS\n");
  return failures != 0;
}
