#include "tools/golden.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "reference/reference.h"

namespace conv2d {

std::string GoldenFileName(const Golden& g) {
  return absl::StrCat(g.shape.ToString(), "_s", g.seed,
                      g.input_class == InputClass::kRandn
                          ? ""
                          : absl::StrCat("_", InputClassName(g.input_class)),
                      ".golden");
}

GoldenTensors GoldenInputs(const Golden& g) {
  const Shape& s = g.shape;
  GoldenTensors t;
  if (g.input_class != InputClass::kRandn) {
    Inputs in = MakeInputs(s, g.seed, g.input_class);
    t.x = std::move(in.x);
    t.w = std::move(in.w);
    t.dy = std::move(in.dy);
    // As the testbed's MakeClassProblem: the classes are classes of the tensors read, and a zero
    // bias keeps each class's output (and the bar's scaling by the class's scale) as it is.
    if (s.op == Op::kFprop) t.bias.assign(s.bias_elements(), 0.0f);
    return t;
  }
  const bool fprop = s.op == Op::kFprop, dgrad = s.op == Op::kDgrad;
  if (!dgrad) t.x = RandomTensor(g.seed, kInputTensor, s.input_elements(), g.inputs);
  if (fprop || dgrad) t.w = RandomTensor(g.seed, kFilterTensor, s.filter_elements(), g.inputs);
  if (fprop) t.bias = RandomTensor(g.seed, kBiasTensor, s.bias_elements(), g.inputs);
  if (!fprop) t.dy = RandomTensor(g.seed, kGradTensor, s.output_elements(), g.inputs);
  return t;
}

Tensors GoldenTensors::inputs() const { return HostInputs(x, w, bias, dy); }

absl::Status WriteGolden(const Golden& g, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot write ", path));
  const Shape& s = g.shape;
  f << "conv2d-golden 1\n"
    << "shape " << s.batch << " " << s.in_channels << " " << s.out_channels << " " << s.height
    << " " << s.width << " " << s.kernel_h << " " << s.kernel_w << "\n";
  if (!s.basic() || s.has_bias) {
    f << "geometry " << s.pad_top << " " << s.pad_bottom << " " << s.pad_left << " "
      << s.pad_right << " " << s.stride_h << " " << s.stride_w << " " << s.dilation_h << " "
      << s.dilation_w << " " << s.groups << " " << (s.has_bias ? 1 : 0) << "\n";
  }
  if (s.op != Op::kFprop) f << "operation " << OpName(s.op) << "\n";
  f << "seed " << g.seed << "\n"
    << "inputs " << DistributionName(g.inputs) << "\n";
  if (g.input_class != InputClass::kRandn) f << "class " << InputClassName(g.input_class) << "\n";
  f << "tolerance " << g.atol << " " << g.rtol << "\n"
    << "positions " << (g.positions.empty() ? std::string("all") : std::to_string(g.positions.size()))
    << "\n"
    << "values " << (g.store_f64 ? "f64" : "f32") << "\n"
    << "data\n";
  f.write(reinterpret_cast<const char*>(g.positions.data()), g.positions.size() * sizeof(int64_t));
  if (g.store_f64) {
    f.write(reinterpret_cast<const char*>(g.values.data()), g.values.size() * sizeof(double));
  } else {
    std::vector<float> v(g.values.begin(), g.values.end());
    f.write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  if (!f) return absl::DataLossError(absl::StrCat("write failed: ", path));
  return absl::OkStatus();
}

absl::StatusOr<Golden> ReadGolden(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(path, ": ", why));
  };
  Golden g;
  std::string line, key, count, type;
  if (!std::getline(f, line) || line != "conv2d-golden 1") return bad("not a conv2d-golden v1 file");
  bool have_shape = false, have_seed = false, have_positions = false, have_geometry = false;
  int64_t npos = 0;
  while (std::getline(f, line) && line != "data") {
    std::istringstream in(line);
    in >> key;
    if (key == "shape") {
      Shape& s = g.shape;
      in >> s.batch >> s.in_channels >> s.out_channels >> s.height >> s.width >> s.kernel_h >>
          s.kernel_w;
      have_shape = !in.fail();
    } else if (key == "geometry") {
      if (have_geometry) return bad("two geometry lines");
      Shape& s = g.shape;
      int bias = -1;
      in >> s.pad_top >> s.pad_bottom >> s.pad_left >> s.pad_right >> s.stride_h >> s.stride_w >>
          s.dilation_h >> s.dilation_w >> s.groups >> bias;
      if (in.fail() || (bias != 0 && bias != 1)) {
        return bad("geometry must be <pad_top> <pad_bottom> <pad_left> <pad_right> <stride_h> "
                   "<stride_w> <dilation_h> <dilation_w> <groups> <bias 0|1>");
      }
      s.has_bias = bias == 1;
      have_geometry = true;
    } else if (key == "operation") {
      in >> type;
      if (type == "dgrad") {
        g.shape.op = Op::kDgrad;
      } else if (type == "wgrad") {
        g.shape.op = Op::kWgrad;
      } else {
        return bad("operation must be dgrad or wgrad (absent: fprop)");
      }
    } else if (key == "seed") {
      in >> g.seed;
      have_seed = !in.fail();
    } else if (key == "inputs") {
      in >> type;
      if (type != "uniform" && type != "normal") return bad("inputs must be uniform or normal");
      g.inputs = type == "normal" ? Distribution::kNormal : Distribution::kUniform;
    } else if (key == "class") {
      in >> type;
      if (!InputClassFromName(type, &g.input_class) || g.input_class == InputClass::kRandn) {
        return bad(absl::StrCat("unknown input class '", type, "'"));
      }
    } else if (key == "tolerance") {
      in >> g.atol >> g.rtol;
      if (in.fail() || !(g.atol >= 0) || !(g.rtol >= 0)) return bad("bad tolerance");
    } else if (key == "positions") {
      in >> count;
      if (count != "all") {
        npos = std::atoll(count.c_str());
        if (npos <= 0) return bad("bad position count");
      }
      have_positions = true;
    } else if (key == "values") {
      in >> type;
      if (type != "f32" && type != "f64") return bad("values must be f32 or f64");
      g.store_f64 = type == "f64";
    } else {
      return bad(absl::StrCat("unknown header line '", line, "'"));
    }
  }
  if (line != "data" || !have_shape || !have_seed || !have_positions) {
    return bad("incomplete header");
  }
  absl::Status valid = ValidateShape(g.shape);
  if (!valid.ok()) return bad(std::string(valid.message()));
  const int64_t total = g.shape.written_elements();
  if (npos > total) return bad("more positions than written elements");
  g.positions.resize(npos);
  f.read(reinterpret_cast<char*>(g.positions.data()), npos * sizeof(int64_t));
  for (int64_t p : g.positions) {
    if (p < 0 || p >= total) return bad("position out of range");
  }
  const int64_t nvals = npos ? npos : total;
  g.values.resize(nvals);
  if (g.store_f64) {
    f.read(reinterpret_cast<char*>(g.values.data()), nvals * sizeof(double));
  } else {
    std::vector<float> v(nvals);
    f.read(reinterpret_cast<char*>(v.data()), nvals * sizeof(float));
    for (int64_t i = 0; i < nvals; ++i) g.values[i] = v[i];
  }
  if (!f) return bad("truncated data");
  if (f.peek() != EOF) return bad("trailing bytes after data");
  return g;
}

}  // namespace conv2d
