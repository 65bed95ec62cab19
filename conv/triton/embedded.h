// Files compiled into the binary by the triton_artifacts() rule (conv/triton/defs.bzl), so that
// a program built here carries its Triton kernels and needs no files beside it on the GPU host.
#ifndef CONV2D_CONV_TRITON_EMBEDDED_H_
#define CONV2D_CONV_TRITON_EMBEDDED_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace conv2d {
namespace triton {

struct EmbeddedFile {
  const char* name;  // the source file's base name, e.g. "igemm_conv_m128_n64.cubin"
  const unsigned char* data;
  size_t size;
};

class EmbeddedFiles {
 public:
  constexpr EmbeddedFiles(const EmbeddedFile* files, size_t count)
      : files_(files), count_(count) {}
  // The file called `name` (base name), or nullptr.
  const EmbeddedFile* Find(absl::string_view name) const {
    for (size_t i = 0; i < count_; ++i) {
      if (name == files_[i].name) return &files_[i];
    }
    return nullptr;
  }
  const EmbeddedFile* begin() const { return files_; }
  const EmbeddedFile* end() const { return files_ + count_; }

 private:
  const EmbeddedFile* files_;
  size_t count_;
};

}  // namespace triton
}  // namespace conv2d

#endif  // CONV2D_CONV_TRITON_EMBEDDED_H_
