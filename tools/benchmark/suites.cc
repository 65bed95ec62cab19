#include "tools/benchmark/suites.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "conv/testing/shapes.h"

namespace conv2d {
namespace bench {
namespace {

// The nets suite: real networks' convolutions. Each row is one distinct Conv2d layer of one
// network (torchvision's builders, batch 32 on 224x224 images, fp32) and how many of the network's
// Conv2d modules are exactly it; a forward pass's convolution time is then the sum of count x
// time. Written down rather than derived at run time, so that the benchmark needs no torchvision;
// tools/nets_layers.py rebuilds the rows from the real models (forward hooks) and diffs them with
// this table (run it where torchvision is installed after editing a row).
struct NetLayer {
  const char* net;     // torchvision's builder (resnet50, convnext_tiny, efficientnet_b0), or a set
  const char* module;  // the network's first module of this geometry, in forward order
  int count;           // the network's Conv2d modules of exactly this geometry and input size
  // Every layer listed is square: H = W, Kh = Kw, one stride, padding and dilation for both axes
  // and both sides (so cuDNN's symmetric-padding API takes all of them).
  int64_t in, out, size, kernel, stride, pad, dilation, groups;
  bool bias;
};

// {net, first module, count, Cin, Cout, H = W, K, stride, pad, dilation, groups, bias}
constexpr NetLayer kNetLayers[] = {
    // ResNet-50 (torchvision v1.5: the bottleneck's stride on its 3x3; downsample 1x1/s2 on the
    // block's input; no conv bias, BatchNorm follows): 53 Conv2d, 23 distinct. The 1x1 64->256 at
    // 56x56 is both layer1's conv3 (x3) and layer1.0's downsample (stride 1 there), hence x4.
    {"resnet50", "conv1", 1, 3, 64, 224, 7, 2, 3, 1, 1, false},
    {"resnet50", "layer1.0.conv1", 1, 64, 64, 56, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer1.0.conv2", 3, 64, 64, 56, 3, 1, 1, 1, 1, false},
    {"resnet50", "layer1.0.conv3", 4, 64, 256, 56, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer1.1.conv1", 2, 256, 64, 56, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer2.0.conv1", 1, 256, 128, 56, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer2.0.conv2", 1, 128, 128, 56, 3, 2, 1, 1, 1, false},
    {"resnet50", "layer2.0.conv3", 4, 128, 512, 28, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer2.0.downsample.0", 1, 256, 512, 56, 1, 2, 0, 1, 1, false},
    {"resnet50", "layer2.1.conv1", 3, 512, 128, 28, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer2.1.conv2", 3, 128, 128, 28, 3, 1, 1, 1, 1, false},
    {"resnet50", "layer3.0.conv1", 1, 512, 256, 28, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer3.0.conv2", 1, 256, 256, 28, 3, 2, 1, 1, 1, false},
    {"resnet50", "layer3.0.conv3", 6, 256, 1024, 14, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer3.0.downsample.0", 1, 512, 1024, 28, 1, 2, 0, 1, 1, false},
    {"resnet50", "layer3.1.conv1", 5, 1024, 256, 14, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer3.1.conv2", 5, 256, 256, 14, 3, 1, 1, 1, 1, false},
    {"resnet50", "layer4.0.conv1", 1, 1024, 512, 14, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer4.0.conv2", 1, 512, 512, 14, 3, 2, 1, 1, 1, false},
    {"resnet50", "layer4.0.conv3", 3, 512, 2048, 7, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer4.0.downsample.0", 1, 1024, 2048, 14, 1, 2, 0, 1, 1, false},
    {"resnet50", "layer4.1.conv1", 2, 2048, 512, 7, 1, 1, 0, 1, 1, false},
    {"resnet50", "layer4.1.conv2", 2, 512, 512, 7, 3, 1, 1, 1, 1, false},
    // ConvNeXt-T: stem 4x4/s4 (3->96), per stage a 7x7 depthwise (padding 3, groups = C, bias)
    // per block (depths 3, 3, 9, 3), 2x2/s2 downsamples with bias between stages; the blocks'
    // pointwise layers are nn.Linear, not Conv2d. 22 Conv2d, 8 distinct.
    {"convnext_tiny", "features.0.0", 1, 3, 96, 224, 4, 4, 0, 1, 1, true},
    {"convnext_tiny", "features.1.0.block.0", 3, 96, 96, 56, 7, 1, 3, 1, 96, true},
    {"convnext_tiny", "features.2.1", 1, 96, 192, 56, 2, 2, 0, 1, 1, true},
    {"convnext_tiny", "features.3.0.block.0", 3, 192, 192, 28, 7, 1, 3, 1, 192, true},
    {"convnext_tiny", "features.4.1", 1, 192, 384, 28, 2, 2, 0, 1, 1, true},
    {"convnext_tiny", "features.5.0.block.0", 9, 384, 384, 14, 7, 1, 3, 1, 384, true},
    {"convnext_tiny", "features.6.1", 1, 384, 768, 14, 2, 2, 0, 1, 1, true},
    {"convnext_tiny", "features.7.0.block.0", 3, 768, 768, 7, 7, 1, 3, 1, 768, true},
    // EfficientNet-B0: stem 3x3/s2 (3->32); 16 MBConv blocks, each an expand 1x1 (not in the
    // first, whose expand ratio is 1), a kxk depthwise (padding (k-1)/2) carrying the stride, the
    // squeeze-excitation's two 1x1 convs on the pooled 1x1 image (the only ones with bias:
    // torchvision's SqueezeExcitation keeps nn.Conv2d's default), a project 1x1; head 1x1
    // 320->1280. 81 Conv2d, 46 distinct.
    {"efficientnet_b0", "features.0.0", 1, 3, 32, 224, 3, 2, 1, 1, 1, false},
    {"efficientnet_b0", "features.1.0.block.0.0", 1, 32, 32, 112, 3, 1, 1, 1, 32, false},
    {"efficientnet_b0", "features.1.0.block.1.fc1", 1, 32, 8, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.1.0.block.1.fc2", 1, 8, 32, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.1.0.block.2.0", 1, 32, 16, 112, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.2.0.block.0.0", 1, 16, 96, 112, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.2.0.block.1.0", 1, 96, 96, 112, 3, 2, 1, 1, 96, false},
    {"efficientnet_b0", "features.2.0.block.2.fc1", 1, 96, 4, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.2.0.block.2.fc2", 1, 4, 96, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.2.0.block.3.0", 1, 96, 24, 56, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.2.1.block.0.0", 2, 24, 144, 56, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.2.1.block.1.0", 1, 144, 144, 56, 3, 1, 1, 1, 144, false},
    {"efficientnet_b0", "features.2.1.block.2.fc1", 2, 144, 6, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.2.1.block.2.fc2", 2, 6, 144, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.2.1.block.3.0", 1, 144, 24, 56, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.3.0.block.1.0", 1, 144, 144, 56, 5, 2, 2, 1, 144, false},
    {"efficientnet_b0", "features.3.0.block.3.0", 1, 144, 40, 28, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.3.1.block.0.0", 2, 40, 240, 28, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.3.1.block.1.0", 1, 240, 240, 28, 5, 1, 2, 1, 240, false},
    {"efficientnet_b0", "features.3.1.block.2.fc1", 2, 240, 10, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.3.1.block.2.fc2", 2, 10, 240, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.3.1.block.3.0", 1, 240, 40, 28, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.4.0.block.1.0", 1, 240, 240, 28, 3, 2, 1, 1, 240, false},
    {"efficientnet_b0", "features.4.0.block.3.0", 1, 240, 80, 14, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.4.1.block.0.0", 3, 80, 480, 14, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.4.1.block.1.0", 2, 480, 480, 14, 3, 1, 1, 1, 480, false},
    {"efficientnet_b0", "features.4.1.block.2.fc1", 3, 480, 20, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.4.1.block.2.fc2", 3, 20, 480, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.4.1.block.3.0", 2, 480, 80, 14, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.5.0.block.1.0", 1, 480, 480, 14, 5, 1, 2, 1, 480, false},
    {"efficientnet_b0", "features.5.0.block.3.0", 1, 480, 112, 14, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.5.1.block.0.0", 3, 112, 672, 14, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.5.1.block.1.0", 2, 672, 672, 14, 5, 1, 2, 1, 672, false},
    {"efficientnet_b0", "features.5.1.block.2.fc1", 3, 672, 28, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.5.1.block.2.fc2", 3, 28, 672, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.5.1.block.3.0", 2, 672, 112, 14, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.6.0.block.1.0", 1, 672, 672, 14, 5, 2, 2, 1, 672, false},
    {"efficientnet_b0", "features.6.0.block.3.0", 1, 672, 192, 7, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.6.1.block.0.0", 4, 192, 1152, 7, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.6.1.block.1.0", 3, 1152, 1152, 7, 5, 1, 2, 1, 1152, false},
    {"efficientnet_b0", "features.6.1.block.2.fc1", 4, 1152, 48, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.6.1.block.2.fc2", 4, 48, 1152, 1, 1, 1, 0, 1, 1, true},
    {"efficientnet_b0", "features.6.1.block.3.0", 3, 1152, 192, 7, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.7.0.block.1.0", 1, 1152, 1152, 7, 3, 1, 1, 1, 1152, false},
    {"efficientnet_b0", "features.7.0.block.3.0", 1, 1152, 320, 7, 1, 1, 0, 1, 1, false},
    {"efficientnet_b0", "features.8.0", 1, 320, 1280, 7, 1, 1, 0, 1, 1, false},
    // Large-kernel depthwise (RepLKNet-like 31x31 at 56x56; a 13x13 at 7x7 with many channels):
    // not a torchvision model, its own group; no bias (BatchNorm follows in such nets).
    {"large_kernel_dw", "dw31x31", 1, 128, 128, 56, 31, 1, 15, 1, 128, false},
    {"large_kernel_dw", "dw13x13", 1, 1024, 1024, 7, 13, 1, 6, 1, 1024, false},
};

Shape NetLayerShape(const NetLayer& l) {
  Shape s{kNetsBatch, l.in, l.out, l.size, l.size, l.kernel, l.kernel};
  s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = l.pad;
  s.stride_h = s.stride_w = l.stride;
  s.dilation_h = s.dilation_w = l.dilation;
  s.groups = l.groups;
  s.has_bias = l.bias;
  return s;
}

// One case per distinct shape of kNetLayers, in table order; a shape that two networks share is
// timed once and counted in both.
std::vector<Case> NetsCases() {
  std::vector<Case> cases;
  for (const NetLayer& l : kNetLayers) {
    const Shape s = NetLayerShape(l);
    auto it = std::find_if(cases.begin(), cases.end(),
                           [&](const Case& c) { return c.shape == s; });
    if (it == cases.end()) it = cases.insert(cases.end(), Case{s, {}});
    it->uses.push_back(NetUse{l.net, l.module, l.count, l.in == 3});
  }
  return cases;
}

std::vector<Case> FromShapes(const std::vector<Shape>& shapes) {
  std::vector<Case> cases;
  for (const Shape& s : shapes) cases.push_back(Case{s, {}});
  return cases;
}

struct Suite {
  const char* name;
  std::vector<Case> (*cases)();
};

// KernelBot's five (its repeated case included) first, the default; cnn: common CNN layers, from
// tiny to large channel counts.
const Suite kSuites[] = {
    {"kernelbot", [] { return FromShapes(KernelBotBenchmarkShapes()); }},
    {"cnn", [] { return FromShapes(CnnShapes()); }},
    {"nets", NetsCases},
};

}  // namespace

const std::vector<std::string>& SuiteNames() {
  static const std::vector<std::string>* names = [] {
    auto* n = new std::vector<std::string>;
    for (const Suite& s : kSuites) n->push_back(s.name);
    return n;
  }();
  return *names;
}

absl::StatusOr<std::vector<Case>> SuiteCases(const std::string& name) {
  for (const Suite& s : kSuites) {
    if (name == s.name) return s.cases();
  }
  const std::vector<std::string>& names = SuiteNames();
  return absl::InvalidArgumentError(absl::StrCat(
      "--suite is ", absl::StrJoin(names.begin(), names.end() - 1, ", "), " or ", names.back(),
      ": ", name));
}

void AssignSeeds(uint64_t first, std::vector<Case>* cases) {
  for (size_t i = 0; i < cases->size(); ++i) (*cases)[i].seed = first + i;
}

absl::StatusOr<std::vector<Op>> OpsFromFlag(const std::string& op) {
  if (op == "train") return std::vector<Op>{Op::kFprop, Op::kDgrad, Op::kWgrad};
  for (Op o : kAllOps) {
    if (op == OpName(o)) return std::vector<Op>{o};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--op=", op, ": expected fprop, dgrad, wgrad or train"));
}

std::vector<Case> ForOps(const std::vector<Case>& cases, const std::vector<Op>& ops) {
  std::vector<Case> out;
  for (const Case& c : cases) {
    for (Op op : ops) {
      Case k = c;
      k.shape.op = op;
      if (op == Op::kDgrad) k.shape.has_bias = false;
      out.push_back(k);
    }
  }
  return out;
}

}  // namespace bench
}  // namespace conv2d
