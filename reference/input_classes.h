// Input classes beyond randn: the data on which fp32 convolution methods differ. Each class is
// drawn from the seeded generator (random.h) and shaped so that a method whose error grows with
// something other than each output's own terms shows it:
//   randn        x, w ~ N(0, 1), what KernelBot draws.
//   outlier_x    randn, with one element of x in 2^16 (at least one) set to +-1e6, no two in
//                one output's window (two there can cancel to far below their size, and then
//                no fp32 summation meets the bar: conv.h's contract, "outside").
//   outlier_w    randn, with one tap of w per output channel set to +-1e4.
//   large_mean   x = |N(0, 1)| + 10 (ReLU-like activations), every filter w[o, c] of zero sum:
//                outputs O(1) under inputs of mean 10.
//   sparse       randn with 99% of x and 90% of w set to zero.
//   huge         x, w ~ 1e17 N(0, 1): |y| up to ~1e36, still representable in fp32.
//   tiny         x, w ~ 1e-17 N(0, 1): |y| ~ 1e-33, normal in fp32.
//   nonfinite    randn with +Inf, -Inf and NaN at three elements of x and NaN at one tap of the
//                last output channel's filter: the outputs whose window holds one must be
//                non-finite, all others finite and within the bar.
// Every class but nonfinite is finite; scale() is the factor by which x and w were scaled, so that a check
// compares y / scale^2 with y64 / scale^2 (the bar is absolute at 1e-3, and fp32 summation's
// error scales with the data).
#ifndef CONV2D_REFERENCE_INPUT_CLASSES_H_
#define CONV2D_REFERENCE_INPUT_CLASSES_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "conv/shape.h"
#include "reference/random.h"

namespace conv2d {

enum class InputClass {
  kRandn, kOutlierX, kOutlierW, kLargeMean, kSparse, kHuge, kTiny, kNonFinite
};

inline std::vector<InputClass> AllInputClasses() {
  return {InputClass::kRandn,     InputClass::kOutlierX, InputClass::kOutlierW,
          InputClass::kLargeMean, InputClass::kSparse,   InputClass::kHuge,
          InputClass::kTiny,      InputClass::kNonFinite};
}

inline const char* InputClassName(InputClass c) {
  switch (c) {
    case InputClass::kRandn: return "randn";
    case InputClass::kOutlierX: return "outlier_x";
    case InputClass::kOutlierW: return "outlier_w";
    case InputClass::kLargeMean: return "large_mean";
    case InputClass::kSparse: return "sparse";
    case InputClass::kHuge: return "huge";
    case InputClass::kTiny: return "tiny";
    case InputClass::kNonFinite: return "nonfinite";
  }
  return "?";
}

// The class named `name` (InputClassName's), if any.
inline bool InputClassFromName(const std::string& name, InputClass* c) {
  for (InputClass k : AllInputClasses()) {
    if (name == InputClassName(k)) {
      *c = k;
      return true;
    }
  }
  return false;
}

// The factor by which the class scales x and w (1 for all but huge and tiny).
inline double InputClassScale(InputClass c) {
  return c == InputClass::kHuge ? 1e17 : c == InputClass::kTiny ? 1e-17 : 1.0;
}

struct Inputs {
  std::vector<float> x, w;
};

// x and w of `shape` in class `c`, for `seed`.
inline Inputs MakeInputs(const Shape& shape, uint64_t seed, InputClass c) {
  Inputs in;
  in.x = RandomTensor(seed, kInputTensor, shape.input_elements(), Distribution::kNormal);
  in.w = RandomTensor(seed, kFilterTensor, shape.filter_elements(), Distribution::kNormal);
  // A third stream of the generator picks positions and signs, so that x and w stay as drawn.
  constexpr uint32_t kPickTensor = 2;
  auto pick = [&](uint64_t i) { return SplitMix64(TensorKey(seed, kPickTensor) + i); };
  const int64_t taps = shape.kernel_h * shape.kernel_w;
  switch (c) {
    case InputClass::kRandn:
      break;
    case InputClass::kOutlierX: {
      const int64_t n = static_cast<int64_t>(in.x.size());
      const int64_t count = std::max<int64_t>(1, n >> 16);
      const int64_t plane = shape.height * shape.width;
      struct At {
        int64_t b, row, col;
      };
      std::vector<At> placed;
      for (int64_t k = 0; k < 4 * count && static_cast<int64_t>(placed.size()) < count; ++k) {
        const uint64_t h = pick(static_cast<uint64_t>(k));
        const int64_t i = static_cast<int64_t>(h % static_cast<uint64_t>(n));
        const At a{i / (shape.in_channels * plane), (i % plane) / shape.width, i % shape.width};
        bool shares = false;
        for (const At& p : placed) {
          shares = shares || (p.b == a.b && std::abs(p.row - a.row) < shape.span_h() &&
                              std::abs(p.col - a.col) < shape.span_w());
        }
        if (shares) continue;
        placed.push_back(a);
        in.x[i] = (h >> 63) ? 1e6f : -1e6f;
      }
      break;
    }
    case InputClass::kOutlierW: {
      const int64_t per_o = shape.reduction();
      for (int64_t o = 0; o < shape.out_channels; ++o) {
        const uint64_t h = pick(static_cast<uint64_t>(o));
        in.w[o * per_o + static_cast<int64_t>(h % static_cast<uint64_t>(per_o))] =
            (h >> 63) ? 1e4f : -1e4f;
      }
      break;
    }
    case InputClass::kLargeMean: {
      for (float& v : in.x) v = std::fabs(v) + 10.0f;
      for (int64_t f = 0; f < shape.out_channels * shape.in_per_group(); ++f) {
        double sum = 0;
        for (int64_t t = 0; t < taps; ++t) sum += in.w[f * taps + t];
        const float mean = static_cast<float>(sum / static_cast<double>(taps));
        for (int64_t t = 0; t < taps; ++t) in.w[f * taps + t] -= mean;
      }
      break;
    }
    case InputClass::kSparse: {
      for (size_t i = 0; i < in.x.size(); ++i) {
        if (pick(i) % 100 != 0) in.x[i] = 0.0f;
      }
      for (size_t i = 0; i < in.w.size(); ++i) {
        if (pick(in.x.size() + i) % 10 != 0) in.w[i] = 0.0f;
      }
      break;
    }
    case InputClass::kNonFinite: {
      const uint64_t n = in.x.size();
      const float values[3] = {INFINITY, -INFINITY, NAN};
      for (int k = 0; k < 3; ++k) in.x[pick(static_cast<uint64_t>(k)) % n] = values[k];
      const int64_t per_o = shape.reduction();
      in.w[(shape.out_channels - 1) * per_o + static_cast<int64_t>(pick(7) % per_o)] = NAN;
      break;
    }
    case InputClass::kHuge:
    case InputClass::kTiny: {
      const float s = static_cast<float>(InputClassScale(c));
      for (float& v : in.x) v *= s;
      for (float& v : in.w) v *= s;
      break;
    }
  }
  return in;
}

}  // namespace conv2d

#endif  // CONV2D_REFERENCE_INPUT_CLASSES_H_
