// Input classes beyond randn: the data on which fp32 convolution methods differ. Each class is
// drawn from the seeded generator (random.h) and shaped so that a method whose error grows with
// something other than each output's own terms shows it:
//   randn        x, w ~ N(0, 1), what KernelBot draws.
//   outlier_x    randn, with one element of x in 2^16 (at least one) set to +-1e6, no two in
//                one output's window (two there can cancel to far below their size, and then
//                no fp32 summation meets the bar: conv.h's contract, "outside"); in wgrad, whose
//                elements each sum a whole channel of x over the batch, no two in one channel.
//   outlier_w    randn, with one tap of w per output channel set to +-1e4.
//   large_mean   x = |N(0, 1)| + 10 (ReLU-like activations), every filter w[o, c] of zero sum:
//                outputs O(1) under inputs of mean 10.
//   sparse       randn with 99% of x and 90% of w set to zero.
//   huge         x, w ~ 1e17 N(0, 1): |y| up to ~1e36, still representable in fp32.
//   tiny         x, w ~ 1e-17 N(0, 1): |y| ~ 1e-33, normal in fp32.
//   nonfinite    randn with +Inf, -Inf and NaN at three elements of x and NaN at one tap of the
//                last output channel's filter: the outputs whose window holds one must be
//                non-finite, all others finite and within the bar.
// The backward: the same classes in the two tensors it reads (MakeInputs: dy takes x's part in
// dgrad and w's in wgrad).
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

// The tensors an operation reads (conv/shape.h): fprop x and w; dgrad dy and w; wgrad x and dy.
// The others stay empty.
struct Inputs {
  std::vector<float> x, w, dy;
};

namespace input_classes_internal {

// A third stream of the generator picks positions and signs, so that the tensors stay as drawn.
inline uint64_t Pick(uint64_t seed, uint64_t i) {
  constexpr uint32_t kPickTensor = 2;
  return SplitMix64(TensorKey(seed, kPickTensor) + i);
}

// The class applied to an activation-like tensor v [n, channels, h, w] whose outputs each see a
// window of span_h x span_w pixels (x in the forward, dy in dgrad), or, per_channel (x in wgrad,
// where a dw element sums a whole channel over every image), all of one channel.
inline void ApplyToImage(InputClass c, uint64_t seed, int64_t channels, int64_t h, int64_t w,
                         int64_t span_h, int64_t span_w, std::vector<float>& v,
                         bool per_channel = false) {
  auto pick = [&](uint64_t i) { return Pick(seed, i); };
  switch (c) {
    case InputClass::kOutlierX: {
      const int64_t n = static_cast<int64_t>(v.size());
      const int64_t count = std::max<int64_t>(1, n >> 16);
      const int64_t plane = h * w;
      struct At {
        int64_t b, ch, row, col;
      };
      std::vector<At> placed;
      for (int64_t k = 0; k < 4 * count && static_cast<int64_t>(placed.size()) < count; ++k) {
        const uint64_t hash = pick(static_cast<uint64_t>(k));
        const int64_t i = static_cast<int64_t>(hash % static_cast<uint64_t>(n));
        const At a{i / (channels * plane), (i / plane) % channels, (i % plane) / w, i % w};
        bool shares = false;
        for (const At& p : placed) {
          shares = shares || (per_channel ? p.ch == a.ch
                                          : p.b == a.b && std::abs(p.row - a.row) < span_h &&
                                                std::abs(p.col - a.col) < span_w);
        }
        if (shares) continue;
        placed.push_back(a);
        v[i] = (hash >> 63) ? 1e6f : -1e6f;
      }
      break;
    }
    case InputClass::kLargeMean:
      for (float& f : v) f = std::fabs(f) + 10.0f;
      break;
    case InputClass::kSparse:
      for (size_t i = 0; i < v.size(); ++i) {
        if (pick(i) % 100 != 0) v[i] = 0.0f;
      }
      break;
    case InputClass::kNonFinite: {
      const uint64_t n = v.size();
      const float values[3] = {INFINITY, -INFINITY, NAN};
      for (int k = 0; k < 3; ++k) v[pick(static_cast<uint64_t>(k)) % n] = values[k];
      break;
    }
    default:
      break;
  }
}

// The class applied to the other operand, seen as `blocks` blocks of `len` consecutive values
// per output channel o (block(o, k) is the flat index of value k of o's k-th block): the filter
// (one block of Cin/groups*Kh*Kw per o, zero-sum groups of Kh*Kw taps) or, in wgrad, dy (o's
// planes, one per image; zero-sum per plane). The sparse pattern's picks start at pick_offset
// (x's size: the image's picks come first).
template <class Index>
void ApplyToOther(InputClass c, uint64_t seed, int64_t outs, int64_t per_o, int64_t group,
                  uint64_t pick_offset, Index index, std::vector<float>& v) {
  auto pick = [&](uint64_t i) { return Pick(seed, i); };
  switch (c) {
    case InputClass::kOutlierW:
      for (int64_t o = 0; o < outs; ++o) {
        const uint64_t h = pick(static_cast<uint64_t>(o));
        v[index(o, static_cast<int64_t>(h % static_cast<uint64_t>(per_o)))] =
            (h >> 63) ? 1e4f : -1e4f;
      }
      break;
    case InputClass::kLargeMean:
      for (int64_t o = 0; o < outs; ++o) {
        for (int64_t k0 = 0; k0 < per_o; k0 += group) {
          double sum = 0;
          for (int64_t t = 0; t < group; ++t) sum += v[index(o, k0 + t)];
          const float mean = static_cast<float>(sum / static_cast<double>(group));
          for (int64_t t = 0; t < group; ++t) v[index(o, k0 + t)] -= mean;
        }
      }
      break;
    case InputClass::kSparse:
      for (size_t i = 0; i < v.size(); ++i) {
        if (pick(pick_offset + i) % 10 != 0) v[i] = 0.0f;
      }
      break;
    case InputClass::kNonFinite:
      v[index(outs - 1, static_cast<int64_t>(pick(7) % static_cast<uint64_t>(per_o)))] = NAN;
      break;
    default:
      break;
  }
}

}  // namespace input_classes_internal

// The tensors `shape.op` reads, in class `c`, for `seed`: x, w and dy drawn from N(0, 1), then the
// activation-like one (x; dy in dgrad) given the class's image form and the other (w; dy in wgrad)
// its filter form. In dgrad the filter's outliers are one per input channel (a dx element sums
// over every output channel's filter at its channel). In wgrad: outliers in dy are one per output
// channel, large_mean makes each of dy's planes zero-sum under x of mean 10, non-finite puts a NaN
// in the last channel's dy.
inline Inputs MakeInputs(const Shape& shape, uint64_t seed, InputClass c) {
  using namespace input_classes_internal;
  Inputs in;
  const bool fprop = shape.op == Op::kFprop, dgrad = shape.op == Op::kDgrad;
  if (!dgrad) {
    in.x = RandomTensor(seed, kInputTensor, shape.input_elements(), Distribution::kNormal);
  }
  if (fprop || dgrad) {
    in.w = RandomTensor(seed, kFilterTensor, shape.filter_elements(), Distribution::kNormal);
  }
  if (!fprop) {
    in.dy = RandomTensor(seed, kGradTensor, shape.output_elements(), Distribution::kNormal);
  }
  const int64_t oh = shape.out_h(), ow = shape.out_w(), plane = oh * ow;
  if (dgrad) {
    // A dx element sees about span / stride rows and columns of dy.
    ApplyToImage(c, seed, shape.out_channels, oh, ow,
                 (shape.span_h() + shape.stride_h - 1) / shape.stride_h,
                 (shape.span_w() + shape.stride_w - 1) / shape.stride_w, in.dy);
  } else {
    ApplyToImage(c, seed, shape.in_channels, shape.height, shape.width, shape.span_h(),
                 shape.span_w(), in.x, /*per_channel=*/shape.op == Op::kWgrad);
  }
  if (dgrad) {
    // A dx element meets every output channel's filter at its input channel: the outliers (and
    // the non-finite tap) go one per input channel c, over the filters of c's group.
    const int64_t taps = shape.kernel_h * shape.kernel_w, og = shape.out_per_group();
    const int64_t cg = shape.in_per_group();
    ApplyToOther(c, seed, shape.in_channels, og * taps, taps, shape.input_elements(),
                 [&](int64_t ci, int64_t k) {
                   const int64_t o = ci / cg * og + k / taps;
                   return (o * cg + ci % cg) * taps + k % taps;
                 },
                 in.w);
  } else if (shape.op == Op::kWgrad) {
    // o's values: plane b of channel o, for every image b.
    const int64_t cout = shape.out_channels;
    ApplyToOther(c, seed, cout, shape.batch * plane, plane, shape.input_elements(),
                 [&](int64_t o, int64_t k) { return (k / plane * cout + o) * plane + k % plane; },
                 in.dy);
  } else {
    const int64_t per_o = shape.reduction();
    ApplyToOther(c, seed, shape.out_channels, per_o, shape.kernel_h * shape.kernel_w,
                 shape.input_elements(), [&](int64_t o, int64_t k) { return o * per_o + k; }, in.w);
  }
  if (c == InputClass::kHuge || c == InputClass::kTiny) {
    const float scale = static_cast<float>(InputClassScale(c));
    for (std::vector<float>* v : {&in.x, &in.w, &in.dy}) {
      for (float& f : *v) f *= scale;
    }
  }
  return in;
}

}  // namespace conv2d

#endif  // CONV2D_REFERENCE_INPUT_CLASSES_H_
