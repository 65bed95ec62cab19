// Every bad input through the C ABI gives its code and message, never a crash, and leaves the
// caller's memory alone. With a GPU the run-time checks are exercised for real, and a problem
// with the whole geometry (padding, stride, dilation, groups, bias) runs through
// conv2d_plan_create_ex / conv2d_plan_run_ex against the CPU fp64 reference.
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <cstdint>
#include <vector>

#include "conv/conv2d_c.h"
#include "conv/shape.h"
#include "gtest/gtest.h"
#include "reference/random.h"
#include "reference/reference.h"

namespace {

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

bool Says(const char* text) { return std::strstr(conv2d_last_error(), text) != nullptr; }

// The workspace `plan` asks for, allocated with `extra` bytes more (none where it asks for none).
void AllocateWorkspace(const conv2d_plan* plan, size_t extra, void** ws, size_t* bytes) {
  *ws = nullptr;
  *bytes = 0;
  ASSERT_EQ(conv2d_plan_workspace_size(plan, bytes), CONV2D_OK);
  if (*bytes) ASSERT_EQ(cudaMalloc(ws, *bytes + extra), cudaSuccess);
}

TEST(CApiTest, BadShapes) {
  conv2d_plan* plan = reinterpret_cast<conv2d_plan*>(0x1);
  EXPECT_EQ(conv2d_plan_create(0, 3, 3, 8, 8, 3, 3, "auto", &plan), CONV2D_INVALID_ARGUMENT);
  EXPECT_EQ(plan, nullptr);
  EXPECT_TRUE(Says("batch must be positive")) << conv2d_last_error();
  EXPECT_EQ(conv2d_plan_create(1, -1, 3, 8, 8, 3, 3, "auto", &plan), CONV2D_INVALID_ARGUMENT);
  EXPECT_TRUE(Says("in_channels")) << conv2d_last_error();
  EXPECT_EQ(conv2d_plan_create(1, 3, 3, 8, 8, 9, 3, nullptr, &plan), CONV2D_INVALID_ARGUMENT);
  EXPECT_TRUE(Says("larger than the image")) << conv2d_last_error();
  EXPECT_EQ(conv2d_plan_create(1, 3, 3, 8, 8, 3, 3, "auto", nullptr), CONV2D_INVALID_ARGUMENT);
}

TEST(CApiTest, UnknownAlgorithm) {
  conv2d_plan* plan = nullptr;
  EXPECT_EQ(conv2d_plan_create(1, 3, 3, 8, 8, 3, 3, "fastest_ever", &plan), CONV2D_NOT_FOUND);
  EXPECT_TRUE(Says("fastest_ever")) << conv2d_last_error();
  EXPECT_EQ(plan, nullptr);
}

TEST(CApiTest, NullPlan) {
  size_t bytes = 7;
  EXPECT_EQ(conv2d_plan_workspace_size(nullptr, &bytes), CONV2D_INVALID_ARGUMENT);
  EXPECT_EQ(bytes, 7u);
  EXPECT_EQ(conv2d_plan_run(nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr),
            CONV2D_INVALID_ARGUMENT);
  EXPECT_EQ(conv2d_plan_algorithm(nullptr), nullptr);
  conv2d_plan_destroy(nullptr);
}

TEST(CApiTest, AlgorithmNames) {
  ASSERT_GE(conv2d_algorithm_count(), 2);
  EXPECT_STREQ(conv2d_algorithm_name(0), "direct");
  EXPECT_EQ(conv2d_algorithm_name(-1), nullptr);
  EXPECT_EQ(conv2d_algorithm_name(conv2d_algorithm_count()), nullptr);
}

TEST(CApiTest, NoDeviceOrRunTimeErrors) {
  conv2d_plan* plan = nullptr;
  if (!HaveGpu()) {
    std::printf("NOTE: no CUDA device here: checking the 'no CUDA device' error only. The "
                "run-time checks run in the GPU bundle.\n");
    EXPECT_EQ(conv2d_plan_create(1, 3, 3, 8, 8, 3, 3, "auto", &plan), CONV2D_FAILED_PRECONDITION);
    EXPECT_TRUE(Says("no CUDA device")) << conv2d_last_error();
    EXPECT_EQ(plan, nullptr);
    return;
  }
  // For every algorithm: null pointers and a short workspace are refused and y stays untouched.
  // 3x3: every variant of the basic form takes it (depthwise, grouped_direct and dot compute
  // other families; these checks are Plan::Run's, before any algorithm's code)
  const int64_t B = 1, C = 3, H = 40, K = 3, OH = H - K + 1;
  const size_t ny = B * C * OH * OH;
  float *x, *w, *y;
  ASSERT_EQ(cudaMalloc(&x, B * C * H * H * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&w, C * C * K * K * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&y, ny * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(x, 0, B * C * H * H * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(w, 0, C * C * K * K * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(y, 0x5A, ny * 4), cudaSuccess);
  int with_workspace = 0;
  for (int a = 0; a < conv2d_algorithm_count(); ++a) {
    const char* name = conv2d_algorithm_name(a);
    SCOPED_TRACE(name);
    // depthwise and fft_depthwise: Cin/groups = 1 only; grouped_direct: groups > 1 only; dot:
    // one output pixel only; depthwise_dgrad: no forward.
    const std::string n = name;
    if (n == "depthwise" || n == "fft_depthwise" || n == "grouped_direct" || n == "dot" ||
        n == "depthwise_dgrad") {
      continue;
    }
    ASSERT_EQ(conv2d_plan_create(B, C, C, H, H, K, K, name, &plan), CONV2D_OK)
        << conv2d_last_error();
    size_t ws_bytes = 0;
    void* ws = nullptr;
    ASSERT_NO_FATAL_FAILURE(AllocateWorkspace(plan, 16, &ws, &ws_bytes));  // 16: a misaligned copy
    EXPECT_EQ(conv2d_plan_run(plan, nullptr, w, y, ws, ws_bytes, nullptr), CONV2D_INVALID_ARGUMENT);
    EXPECT_TRUE(Says("x is null")) << conv2d_last_error();
    EXPECT_EQ(conv2d_plan_run(plan, x, nullptr, y, ws, ws_bytes, nullptr), CONV2D_INVALID_ARGUMENT);
    EXPECT_EQ(conv2d_plan_run(plan, x, w, nullptr, ws, ws_bytes, nullptr), CONV2D_INVALID_ARGUMENT);
    if (ws_bytes) {
      ++with_workspace;
      EXPECT_EQ(conv2d_plan_run(plan, x, w, y, ws, ws_bytes - 1, nullptr),
                CONV2D_INVALID_ARGUMENT);
      EXPECT_TRUE(Says("workspace too small")) << conv2d_last_error();
      EXPECT_EQ(conv2d_plan_run(plan, x, w, y, nullptr, ws_bytes, nullptr),
                CONV2D_INVALID_ARGUMENT);
    }
    // Pointers that would fault the kernel, and with it the caller's context, are refused:
    // misaligned for a float, or pageable host memory the GPU cannot read.
    auto shifted = [](const void* p) {
      return reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(p) + 1);
    };
    EXPECT_EQ(conv2d_plan_run(plan, shifted(x), w, y, ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    EXPECT_TRUE(Says("x") && Says("not aligned")) << conv2d_last_error();
    EXPECT_EQ(conv2d_plan_run(plan, x, shifted(w), y, ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    EXPECT_EQ(conv2d_plan_run(plan, x, w, shifted(y), ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    std::vector<float> pageable_x(B * C * H * H, 1.0f), pageable_y(ny, 7.0f);
    EXPECT_EQ(conv2d_plan_run(plan, pageable_x.data(), w, y, ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    EXPECT_TRUE(Says("pageable")) << conv2d_last_error();
    EXPECT_EQ(conv2d_plan_run(plan, x, w, pageable_y.data(), ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    for (float v : pageable_y) ASSERT_EQ(v, 7.0f) << "a refused host y was written";
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<unsigned> host(ny);
    ASSERT_EQ(cudaMemcpy(host.data(), y, ny * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (unsigned v : host) ASSERT_EQ(v, 0x5A5A5A5Au) << "y was written on error";
    // And a valid run succeeds.
    EXPECT_EQ(conv2d_plan_run(plan, x, w, y, ws, ws_bytes, nullptr), CONV2D_OK)
        << conv2d_last_error();
    // The workspace needs no alignment of its own: each runner aligns within it.
    if (ws_bytes) {
      EXPECT_EQ(conv2d_plan_run(plan, x, w, y, static_cast<char*>(ws) + 4, ws_bytes, nullptr),
                CONV2D_OK)
          << conv2d_last_error();
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemset(y, 0x5A, ny * 4), cudaSuccess);
    cudaFree(ws);
    conv2d_plan_destroy(plan);
  }
  EXPECT_GE(with_workspace, 1) << "no algorithm with a workspace: the short-workspace check "
                                  "was not exercised";
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
}

// What conv2d_plan_create_ex returns for a problem it accepts: OK with a GPU; without one, the
// "no CUDA device" error, which Plan::Create gives only once the shape has been validated.
int Accepted() { return HaveGpu() ? CONV2D_OK : CONV2D_FAILED_PRECONDITION; }

// Creates a plan for `p` with `algorithm`, destroys it, and returns the code.
int CreateEx(const conv2d_problem& p, const char* algorithm = "direct") {
  conv2d_plan* plan = reinterpret_cast<conv2d_plan*>(0x1);
  const int rc = conv2d_plan_create_ex(&p, algorithm, &plan);
  if (rc != CONV2D_OK) {
    EXPECT_EQ(plan, nullptr) << "a failed create must set *plan to NULL";
  }
  conv2d_plan_destroy(plan);
  return rc;
}

// A problem of the basic form (conv2d_problem_init's defaults past the sizes).
conv2d_problem Sizes(int64_t b, int64_t cin, int64_t cout, int64_t h, int64_t w, int64_t kh,
                     int64_t kw) {
  conv2d_problem p;
  conv2d_problem_init(&p);
  p.batch = b, p.in_channels = cin, p.out_channels = cout;
  p.height = h, p.width = w, p.kernel_h = kh, p.kernel_w = kw;
  return p;
}

conv2d_problem Basic() { return Sizes(1, 4, 6, 12, 10, 3, 3); }

TEST(CApiProblemTest, InitFillsTheDefaults) {
  conv2d_problem p;
  std::memset(&p, 0x7B, sizeof p);
  conv2d_problem_init(&p);
  EXPECT_EQ(p.struct_size, sizeof(conv2d_problem));
  EXPECT_EQ(offsetof(conv2d_problem, operation), 144u)
      << "the first version's layout (64-bit targets)";
  EXPECT_EQ(sizeof(conv2d_problem), 152u) << "version 2: operation appended";
  EXPECT_EQ(p.operation, CONV2D_FPROP);
  EXPECT_EQ(p.batch, 0);
  EXPECT_EQ(p.in_channels, 0);
  EXPECT_EQ(p.out_channels, 0);
  EXPECT_EQ(p.height, 0);
  EXPECT_EQ(p.width, 0);
  EXPECT_EQ(p.kernel_h, 0);
  EXPECT_EQ(p.kernel_w, 0);
  EXPECT_EQ(p.pad_top, 0);
  EXPECT_EQ(p.pad_bottom, 0);
  EXPECT_EQ(p.pad_left, 0);
  EXPECT_EQ(p.pad_right, 0);
  EXPECT_EQ(p.stride_h, 1);
  EXPECT_EQ(p.stride_w, 1);
  EXPECT_EQ(p.dilation_h, 1);
  EXPECT_EQ(p.dilation_w, 1);
  EXPECT_EQ(p.groups, 1);
  EXPECT_EQ(p.has_bias, 0);
  // The padding after has_bias is zeroed too (a newer library would see it as unknown bytes
  // only if a caller's struct_size covered it, but zero is the safe value).
  const unsigned char* b = reinterpret_cast<const unsigned char*>(&p);
  for (size_t i = offsetof(conv2d_problem, has_bias) + sizeof(int32_t);
       i < offsetof(conv2d_problem, operation); ++i) {
    EXPECT_EQ(b[i], 0) << "byte " << i;
  }
  conv2d_problem_init(nullptr);  // ignored
  // Sizes unset: the descriptor as init leaves it is refused with the first missing size.
  EXPECT_EQ(CreateEx(p), CONV2D_INVALID_ARGUMENT);
  EXPECT_TRUE(Says("batch must be positive")) << conv2d_last_error();
}

TEST(CApiProblemTest, DefaultsAreTheBasicForm) {
  // A problem with only the sizes set is what conv2d_plan_create makes: same acceptance, and
  // with a GPU the same algorithm and workspace.
  const conv2d_problem p = Basic();
  EXPECT_EQ(CreateEx(p, "auto"), Accepted()) << conv2d_last_error();
  if (!HaveGpu()) return;
  conv2d_plan *ex = nullptr, *old = nullptr;
  ASSERT_EQ(conv2d_plan_create_ex(&p, "auto", &ex), CONV2D_OK) << conv2d_last_error();
  ASSERT_EQ(conv2d_plan_create(1, 4, 6, 12, 10, 3, 3, "auto", &old), CONV2D_OK)
      << conv2d_last_error();
  EXPECT_STREQ(conv2d_plan_algorithm(ex), conv2d_plan_algorithm(old));
  size_t a = 0, b = 1;
  ASSERT_EQ(conv2d_plan_workspace_size(ex, &a), CONV2D_OK);
  ASSERT_EQ(conv2d_plan_workspace_size(old, &b), CONV2D_OK);
  EXPECT_EQ(a, b);
  conv2d_plan_destroy(ex);
  conv2d_plan_destroy(old);
}

TEST(CApiProblemTest, StructSize) {
  conv2d_plan* plan = reinterpret_cast<conv2d_plan*>(0x1);
  EXPECT_EQ(conv2d_plan_create_ex(nullptr, "auto", &plan), CONV2D_INVALID_ARGUMENT);
  EXPECT_EQ(plan, nullptr);
  EXPECT_TRUE(Says("problem is null")) << conv2d_last_error();
  conv2d_problem p = Basic();
  EXPECT_EQ(conv2d_plan_create_ex(&p, "auto", nullptr), CONV2D_INVALID_ARGUMENT);
  EXPECT_TRUE(Says("out-pointer is null")) << conv2d_last_error();

  // Smaller than the first version's: refused, whatever the fields say.
  for (size_t size : {size_t{0}, size_t{8}, offsetof(conv2d_problem, has_bias),
                      offsetof(conv2d_problem, operation) - 1}) {
    SCOPED_TRACE(size);
    p.struct_size = size;
    EXPECT_EQ(CreateEx(p), CONV2D_INVALID_ARGUMENT);
    EXPECT_TRUE(Says("struct_size") && Says("smaller than the first")) << conv2d_last_error();
  }
  p.struct_size = sizeof(conv2d_problem);
  EXPECT_EQ(CreateEx(p), Accepted()) << conv2d_last_error();

  // The padding after has_bias is never read: garbage there changes nothing.
  unsigned char* pad = reinterpret_cast<unsigned char*>(&p) +
                       offsetof(conv2d_problem, has_bias) + sizeof(int32_t);
  std::memset(pad, 0xEE, offsetof(conv2d_problem, operation) - offsetof(conv2d_problem, has_bias) - 4);
  EXPECT_EQ(CreateEx(p), Accepted()) << conv2d_last_error();

  // A first-version caller (144 bytes, no operation): whatever lies past its struct is not read,
  // and its problems are the forward's.
  p = Basic();
  p.struct_size = offsetof(conv2d_problem, operation);
  p.operation = 77;
  EXPECT_EQ(CreateEx(p), Accepted()) << conv2d_last_error();
  p.struct_size = sizeof(conv2d_problem);
  EXPECT_EQ(CreateEx(p), CONV2D_INVALID_ARGUMENT);
  EXPECT_TRUE(Says("operation must be")) << conv2d_last_error();

  // A caller compiled against a newer, larger descriptor: accepted when every field this library
  // does not know is zero (unset), refused when one is set.
  struct Newer {
    conv2d_problem v1;
    int64_t future_field;
    int32_t another;
    int32_t pad;
  };
  Newer n;
  std::memset(&n, 0, sizeof n);
  n.v1 = Basic();
  n.v1.struct_size = sizeof(Newer);
  conv2d_plan* made = nullptr;
  EXPECT_EQ(conv2d_plan_create_ex(&n.v1, "direct", &made), Accepted()) << conv2d_last_error();
  conv2d_plan_destroy(made);
  n.future_field = 1;
  EXPECT_EQ(conv2d_plan_create_ex(&n.v1, "direct", &made), CONV2D_INVALID_ARGUMENT);
  EXPECT_EQ(made, nullptr);
  EXPECT_TRUE(Says("byte 152 is nonzero")) << conv2d_last_error();
  n.future_field = 0;
  n.another = -1;
  EXPECT_EQ(conv2d_plan_create_ex(&n.v1, "direct", &made), CONV2D_INVALID_ARGUMENT);
  EXPECT_TRUE(Says("byte 160 is nonzero")) << conv2d_last_error();
  // Nonsense sizes are not read.
  p = Basic();
  p.struct_size = size_t{1} << 40;
  EXPECT_EQ(CreateEx(p), CONV2D_INVALID_ARGUMENT);
  EXPECT_TRUE(Says("not a conv2d_problem")) << conv2d_last_error();
}

TEST(CApiProblemTest, BadParametersGiveTheReason) {
  struct Bad {
    const char* what;
    void (*set)(conv2d_problem*);
    const char* says;
  };
  const Bad bad[] = {
      {"stride_h 0", [](conv2d_problem* p) { p->stride_h = 0; }, "stride_h must be positive"},
      {"stride_w -2", [](conv2d_problem* p) { p->stride_w = -2; }, "stride_w must be positive"},
      {"dilation_h 0", [](conv2d_problem* p) { p->dilation_h = 0; },
       "dilation_h must be positive"},
      {"dilation_w 0", [](conv2d_problem* p) { p->dilation_w = 0; },
       "dilation_w must be positive"},
      {"pad_top -1", [](conv2d_problem* p) { p->pad_top = -1; }, "pad_top must be >= 0"},
      {"pad_bottom -1", [](conv2d_problem* p) { p->pad_bottom = -1; }, "pad_bottom must be >= 0"},
      {"pad_left -3", [](conv2d_problem* p) { p->pad_left = -3; }, "pad_left must be >= 0"},
      {"pad_right -1", [](conv2d_problem* p) { p->pad_right = -1; }, "pad_right must be >= 0"},
      {"groups 0", [](conv2d_problem* p) { p->groups = 0; }, "groups must be positive"},
      {"groups 3 (Cin 4)", [](conv2d_problem* p) { p->groups = 3; }, "must divide in_channels"},
      {"groups 4 (Cout 6)", [](conv2d_problem* p) { p->groups = 4; },
       "must divide in_channels (4) and out_channels (6)"},
      {"dilated kernel larger than the padded input",
       [](conv2d_problem* p) {  // 3 taps dilated by 6: 13 rows on 12 + 0 padded
         p->dilation_h = 6;
       },
       "dilated to 13x3 is larger than the image 12x10"},
      {"dilated kernel larger than the padded input (padded)",
       [](conv2d_problem* p) {
         p->dilation_w = 5;  // 11 columns on 10 + 0 + 0
         p->pad_top = 1;
       },
       "dilated to 3x11 is larger than the padded image 13x10"},
      {"has_bias 2", [](conv2d_problem* p) { p->has_bias = 2; }, "has_bias must be 0 or 1"},
      {"has_bias -1", [](conv2d_problem* p) { p->has_bias = -1; }, "has_bias must be 0 or 1"},
      {"padding beyond 2^24", [](conv2d_problem* p) { p->pad_right = int64_t{1} << 30; },
       "pad_right = 1073741824 is beyond 2^24"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    conv2d_problem p = Basic();
    b.set(&p);
    EXPECT_EQ(CreateEx(p, "auto"), CONV2D_INVALID_ARGUMENT);
    EXPECT_TRUE(Says(b.says)) << "expected \"" << b.says << "\" in: " << conv2d_last_error();
  }
  // The boundary is accepted: the dilated kernel exactly the padded image (one output row).
  conv2d_problem p = Basic();
  p.dilation_h = 5;  // 11 rows
  p.pad_bottom = 0;
  p.height = 10;
  p.pad_top = 1;
  EXPECT_EQ(CreateEx(p), Accepted()) << conv2d_last_error();
}

TEST(CApiProblemTest, RefusedGeometryNamesTheAlgorithm) {
  // Every algorithm either takes a padded, strided problem or refuses it with a reason that names
  // it (its family); one without padding or stride says which part it lacks. "direct" takes
  // everything.
  conv2d_problem p = Basic();
  p.stride_h = 2;
  p.pad_left = 1;
  EXPECT_EQ(CreateEx(p, "direct"), Accepted()) << conv2d_last_error();
  if (!HaveGpu()) {
    std::printf("NOTE: no CUDA device here: which algorithms refuse which geometry is checked "
                "in the GPU bundle (Plan::Create reports 'no CUDA device' first here).\n");
    return;
  }
  for (int a = 0; a < conv2d_algorithm_count(); ++a) {
    const char* name = conv2d_algorithm_name(a);
    const std::string family = std::string(name).substr(0, std::string(name).find('_'));
    const int rc = CreateEx(p, name);
    if (rc == CONV2D_UNIMPLEMENTED || rc == CONV2D_OUT_OF_RANGE ||
        rc == CONV2D_RESOURCE_EXHAUSTED) {
      EXPECT_TRUE(Says(family.c_str())) << name << ": " << conv2d_last_error();
      std::printf("  %-24s refuses it: %s\n", name, conv2d_last_error());
    } else {
      EXPECT_EQ(rc, CONV2D_OK) << name << ": " << conv2d_last_error();
    }
  }
}

// The fp32 tensors of a problem on the device, from the seeded generator.
struct DeviceTensors {
  conv2d::Shape shape;
  std::vector<float> x, w, bias;
  float *dx = nullptr, *dw = nullptr, *dbias = nullptr, *dy = nullptr;
  explicit DeviceTensors(const conv2d::Shape& s, uint64_t seed) : shape(s) {
    x = conv2d::RandomTensor(seed, conv2d::kInputTensor, s.input_elements());
    w = conv2d::RandomTensor(seed, conv2d::kFilterTensor, s.filter_elements());
    bias = conv2d::RandomTensor(seed, conv2d::kBiasTensor, s.out_channels);
    Copy(x, &dx);
    Copy(w, &dw);
    Copy(bias, &dbias);
    EXPECT_EQ(cudaMalloc(&dy, s.output_elements() * 4), cudaSuccess);
    Poison();
  }
  ~DeviceTensors() {
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dbias);
    cudaFree(dy);
  }
  void Poison() { EXPECT_EQ(cudaMemset(dy, 0x5A, shape.output_elements() * 4), cudaSuccess); }
  std::vector<uint32_t> Output() const {
    std::vector<uint32_t> y(shape.output_elements());
    EXPECT_EQ(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return y;
  }
  static void Copy(const std::vector<float>& h, float** d) {
    ASSERT_EQ(cudaMalloc(d, h.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(*d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
};

conv2d::Shape ShapeOf(const conv2d_problem& p) {
  conv2d::Shape s{p.batch, p.in_channels, p.out_channels, p.height, p.width, p.kernel_h,
                  p.kernel_w};
  s.pad_top = p.pad_top;
  s.pad_bottom = p.pad_bottom;
  s.pad_left = p.pad_left;
  s.pad_right = p.pad_right;
  s.stride_h = p.stride_h;
  s.stride_w = p.stride_w;
  s.dilation_h = p.dilation_h;
  s.dilation_w = p.dilation_w;
  s.groups = p.groups;
  s.has_bias = p.has_bias != 0;
  return s;
}

// Padding (asymmetric), stride, dilation, groups (odd channels per group) and a bias through
// conv2d_plan_create_ex / conv2d_plan_run_ex, every algorithm that takes it and "auto" when any
// does, against the CPU fp64 reference at every output.
TEST(CApiProblemTest, GeometryWithBiasMatchesTheCpuReference) {
  if (!HaveGpu()) {
    std::printf("NOTE: no CUDA device here: SKIPPING the padded/strided/dilated/grouped/bias run "
                "through conv2d_plan_run_ex against the CPU reference. It runs in the GPU "
                "bundle.\n");
    GTEST_SKIP() << "needs a CUDA device";
  }
  conv2d_problem p = Sizes(2, 9, 6, 23, 19, 4, 3);
  p.pad_top = 2;
  p.pad_bottom = 0;
  p.pad_left = 1;
  p.pad_right = 3;
  p.stride_h = 2;
  p.stride_w = 3;
  p.dilation_h = 1;
  p.dilation_w = 2;
  p.groups = 3;
  p.has_bias = 1;
  const conv2d::Shape s = ShapeOf(p);
  ASSERT_EQ(s.out_h(), 11);  // (23 + 2 - 4) / 2 + 1, as F.conv2d
  ASSERT_EQ(s.out_w(), 7);   // (19 + 4 - 5) / 3 + 1
  DeviceTensors t(s, 77);
  const std::vector<double> want =
      conv2d::ReferenceConv(s, t.x.data(), t.w.data(), t.bias.data());
  std::vector<std::string> names = {"auto"};
  for (int a = 0; a < conv2d_algorithm_count(); ++a) names.push_back(conv2d_algorithm_name(a));
  int ran = 0;
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    conv2d_plan* plan = nullptr;
    const int rc = conv2d_plan_create_ex(&p, name.c_str(), &plan);
    if (rc == CONV2D_UNIMPLEMENTED || rc == CONV2D_OUT_OF_RANGE ||
        rc == CONV2D_RESOURCE_EXHAUSTED) {
      std::printf("  %-24s refuses it: %s\n", name.c_str(), conv2d_last_error());
      continue;
    }
    ASSERT_EQ(rc, CONV2D_OK) << conv2d_last_error();
    size_t ws_bytes = 0;
    void* ws = nullptr;
    ASSERT_NO_FATAL_FAILURE(AllocateWorkspace(plan, 0, &ws, &ws_bytes));
    t.Poison();
    // The bias is required: without it (either entry point) nothing is written.
    EXPECT_EQ(conv2d_plan_run_ex(plan, t.dx, t.dw, nullptr, t.dy, ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    EXPECT_TRUE(Says("has a bias but the bias pointer is null")) << conv2d_last_error();
    EXPECT_EQ(conv2d_plan_run(plan, t.dx, t.dw, t.dy, ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    // A bias that is misaligned, or host memory, is refused too.
    EXPECT_EQ(conv2d_plan_run_ex(plan, t.dx, t.dw,
                                 reinterpret_cast<const float*>(
                                     reinterpret_cast<uintptr_t>(t.dbias) + 2),
                                 t.dy, ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    EXPECT_EQ(conv2d_plan_run_ex(plan, t.dx, t.dw, t.bias.data(), t.dy, ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (uint32_t v : t.Output()) ASSERT_EQ(v, 0x5A5A5A5Au) << "y was written on error";
    ASSERT_EQ(conv2d_plan_run_ex(plan, t.dx, t.dw, t.dbias, t.dy, ws, ws_bytes, nullptr),
              CONV2D_OK)
        << conv2d_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint32_t> bits = t.Output();
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < bits.size(); ++i) {
      float got;
      std::memcpy(&got, &bits[i], 4);
      const bool ok = std::abs(got - want[i]) <= conv2d::kAbsTol + conv2d::kRelTol * std::abs(want[i]);
      if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
    }
    EXPECT_EQ(bad, 0) << conv2d_plan_algorithm(plan) << ": " << bad << " of " << bits.size()
                      << " outputs off the fp64 reference, first at " << first;
    std::printf("  %-24s (%s) matches the CPU reference at %zu outputs\n", name.c_str(),
                conv2d_plan_algorithm(plan), bits.size());
    ++ran;
    cudaFree(ws);
    conv2d_plan_destroy(plan);
  }
  EXPECT_GE(ran, 1) << "no algorithm took the problem (direct takes every geometry)";
}

// A bias given to a plan made without one is refused, and nothing is written.
TEST(CApiProblemTest, BiasGivenWithoutOneInThePlan) {
  if (!HaveGpu()) {
    std::printf("NOTE: no CUDA device here: SKIPPING 'bias given to a plan without one' (it runs "
                "in the GPU bundle).\n");
    GTEST_SKIP() << "needs a CUDA device";
  }
  conv2d_problem p = Basic();
  p.pad_top = 1;
  p.stride_w = 2;
  const conv2d::Shape s = ShapeOf(p);
  DeviceTensors t(s, 78);
  for (const char* name : {"direct", "auto"}) {
    SCOPED_TRACE(name);
    conv2d_plan* plan = nullptr;
    const int rc = conv2d_plan_create_ex(&p, name, &plan);
    if (rc == CONV2D_UNIMPLEMENTED && std::strcmp(name, "auto") == 0) {
      std::printf("  auto refuses it (no algorithm auto may pick takes it): %s\n",
                  conv2d_last_error());
      continue;
    }
    ASSERT_EQ(rc, CONV2D_OK) << conv2d_last_error();
    size_t ws_bytes = 0;
    void* ws = nullptr;
    ASSERT_NO_FATAL_FAILURE(AllocateWorkspace(plan, 0, &ws, &ws_bytes));
    t.Poison();
    EXPECT_EQ(conv2d_plan_run_ex(plan, t.dx, t.dw, t.dbias, t.dy, ws, ws_bytes, nullptr),
              CONV2D_INVALID_ARGUMENT);
    EXPECT_TRUE(Says("a bias was given") && Says("has_bias")) << conv2d_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (uint32_t v : t.Output()) ASSERT_EQ(v, 0x5A5A5A5Au) << "y was written on error";
    // Without the bias, both entry points run it.
    EXPECT_EQ(conv2d_plan_run_ex(plan, t.dx, t.dw, nullptr, t.dy, ws, ws_bytes, nullptr),
              CONV2D_OK)
        << conv2d_last_error();
    EXPECT_EQ(conv2d_plan_run(plan, t.dx, t.dw, t.dy, ws, ws_bytes, nullptr), CONV2D_OK)
        << conv2d_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(ws);
    conv2d_plan_destroy(plan);
  }
  EXPECT_EQ(conv2d_plan_run_ex(nullptr, t.dx, t.dw, nullptr, t.dy, nullptr, 0, nullptr),
            CONV2D_INVALID_ARGUMENT);
}

}  // namespace

namespace {

// The backward through the descriptor: its refusals need no GPU.
TEST(CApiBackwardTest, DescriptorRefusals) {
  conv2d_problem p = Basic();
  p.operation = CONV2D_DGRAD;
  p.has_bias = 1;
  EXPECT_EQ(CreateEx(p), CONV2D_INVALID_ARGUMENT);
  EXPECT_TRUE(Says("dgrad problem has no bias")) << conv2d_last_error();
  p.has_bias = 0;
  EXPECT_EQ(CreateEx(p, "direct"), Accepted()) << conv2d_last_error();
  p.operation = 3;
  EXPECT_EQ(CreateEx(p), CONV2D_INVALID_ARGUMENT);
  EXPECT_TRUE(Says("operation must be")) << conv2d_last_error();
  p.operation = CONV2D_WGRAD;
  p.has_bias = 1;
  EXPECT_EQ(CreateEx(p, "direct"), Accepted()) << conv2d_last_error();
  EXPECT_EQ(conv2d_plan_run_wgrad(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr),
            CONV2D_INVALID_ARGUMENT);
  EXPECT_TRUE(Says("plan is null")) << conv2d_last_error();
  EXPECT_EQ(conv2d_plan_run_dgrad(nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr),
            CONV2D_INVALID_ARGUMENT);
}

// dgrad and wgrad through conv2d_plan_run_dgrad / _wgrad with the whole geometry, against the
// CPU fp64 reference; the refusals that touch nothing (another operation's entry point, a
// written tensor overlapping a read one, db missing) with the outputs checked untouched.
TEST(CApiBackwardTest, GeometryMatchesTheCpuReference) {
  if (!HaveGpu()) {
    std::printf("NOTE: no CUDA device here: SKIPPING the backward's runs through the C ABI (they "
                "run in the GPU bundle).\n");
    GTEST_SKIP() << "needs a CUDA device";
  }
  conv2d_problem p = Basic();
  p.batch = 2, p.in_channels = 6, p.out_channels = 9, p.height = 21, p.width = 18;
  p.kernel_h = 3, p.kernel_w = 4;
  p.pad_top = 1, p.pad_bottom = 2, p.pad_left = 0, p.pad_right = 1;
  p.stride_h = 2, p.stride_w = 1, p.dilation_w = 2, p.groups = 3;
  for (int op : {CONV2D_DGRAD, CONV2D_WGRAD}) {
    p.operation = op;
    p.has_bias = op == CONV2D_WGRAD;
    conv2d::Shape s = ShapeOf(p);
    s.op = static_cast<conv2d::Op>(op);
    s.has_bias = p.has_bias == 1;
    // Host tensors: x, w, dy; device: x, w, dy and the written dx / dw / db.
    const auto x = conv2d::RandomTensor(91, conv2d::kInputTensor, s.input_elements());
    const auto w = conv2d::RandomTensor(91, conv2d::kFilterTensor, s.filter_elements());
    const auto dy = conv2d::RandomTensor(91, conv2d::kGradTensor, s.output_elements());
    conv2d::Tensors in;
    in.x = x.data(), in.w = w.data(), in.dy = dy.data();
    const std::vector<double> want = conv2d::Reference(s, in);
    float *dx = nullptr, *dwt = nullptr, *ddy = nullptr, *out = nullptr;
    DeviceTensors::Copy(op == CONV2D_DGRAD ? w : x, op == CONV2D_DGRAD ? &dwt : &dx);
    DeviceTensors::Copy(dy, &ddy);
    const size_t written = static_cast<size_t>(s.written_elements());
    ASSERT_EQ(cudaMalloc(&out, written * 4), cudaSuccess);
    std::vector<std::string> names = {"auto"};
    for (int a = 0; a < conv2d_algorithm_count(); ++a) names.push_back(conv2d_algorithm_name(a));
    int ran = 0;
    for (const std::string& name : names) {
      SCOPED_TRACE(name + " " + conv2d::OpName(s.op));
      conv2d_plan* plan = nullptr;
      const int rc = conv2d_plan_create_ex(&p, name.c_str(), &plan);
      if (rc == CONV2D_UNIMPLEMENTED || rc == CONV2D_OUT_OF_RANGE ||
          rc == CONV2D_RESOURCE_EXHAUSTED) {
        continue;
      }
      ASSERT_EQ(rc, CONV2D_OK) << conv2d_last_error();
      size_t ws_bytes = 0;
      void* ws = nullptr;
      ASSERT_NO_FATAL_FAILURE(AllocateWorkspace(plan, 0, &ws, &ws_bytes));
      ASSERT_EQ(cudaMemset(out, 0x5A, written * 4), cudaSuccess);
      float* db = op == CONV2D_WGRAD ? out + s.filter_elements() : nullptr;
      // Refused, nothing written: the forward's entry point, the other operation's, a written
      // tensor over dy, db missing.
      EXPECT_EQ(conv2d_plan_run(plan, dx, dwt, out, ws, ws_bytes, nullptr), CONV2D_INVALID_ARGUMENT);
      EXPECT_TRUE(Says("the plan is for")) << conv2d_last_error();
      if (op == CONV2D_DGRAD) {
        EXPECT_EQ(conv2d_plan_run_wgrad(plan, dx, ddy, out, nullptr, ws, ws_bytes, nullptr),
                  CONV2D_INVALID_ARGUMENT);
        EXPECT_EQ(conv2d_plan_run_dgrad(plan, ddy, dwt, ddy + 5, ws, ws_bytes, nullptr),
                  CONV2D_INVALID_ARGUMENT);
        EXPECT_TRUE(Says("overlap")) << conv2d_last_error();
      } else {
        EXPECT_EQ(conv2d_plan_run_dgrad(plan, ddy, dx, out, ws, ws_bytes, nullptr),
                  CONV2D_INVALID_ARGUMENT);
        EXPECT_EQ(conv2d_plan_run_wgrad(plan, dx, ddy, out, nullptr, ws, ws_bytes, nullptr),
                  CONV2D_INVALID_ARGUMENT);
        EXPECT_TRUE(Says("db pointer is null")) << conv2d_last_error();
        EXPECT_EQ(conv2d_plan_run_wgrad(plan, dx, ddy, out, out + 3, ws, ws_bytes, nullptr),
                  CONV2D_INVALID_ARGUMENT);
        EXPECT_TRUE(Says("overlap")) << conv2d_last_error();
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint32_t> bits(written);
      ASSERT_EQ(cudaMemcpy(bits.data(), out, written * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (uint32_t v : bits) ASSERT_EQ(v, 0x5A5A5A5Au) << "written on error";
      const int run = op == CONV2D_DGRAD
                          ? conv2d_plan_run_dgrad(plan, ddy, dwt, out, ws, ws_bytes, nullptr)
                          : conv2d_plan_run_wgrad(plan, dx, ddy, out, db, ws, ws_bytes, nullptr);
      ASSERT_EQ(run, CONV2D_OK) << conv2d_last_error();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> got(written);
      ASSERT_EQ(cudaMemcpy(got.data(), out, written * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      int64_t bad = 0;
      for (size_t i = 0; i < written; ++i) {
        bad += !(std::abs(got[i] - want[i]) <= conv2d::kAbsTol + conv2d::kRelTol * std::abs(want[i]));
      }
      EXPECT_EQ(bad, 0) << conv2d_plan_algorithm(plan);
      std::printf("  %-24s %s (%s) matches the CPU reference at %zu elements\n", name.c_str(),
                  conv2d::OpName(s.op), conv2d_plan_algorithm(plan), written);
      ++ran;
      cudaFree(ws);
      conv2d_plan_destroy(plan);
    }
    EXPECT_GE(ran, 2) << "direct and auto take every geometry";
    cudaFree(dx);
    cudaFree(dwt);
    cudaFree(ddy);
    cudaFree(out);
  }
}

}  // namespace
