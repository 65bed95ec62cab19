// A small, strict JSON reader (RFC 8259) for Triton's kernel metadata. No JSON library is
// available to this build, and the metadata is a small object, so strictness is worth more
// than speed: trailing commas, comments, duplicate keys, NaN/Infinity, leading zeros, control
// characters in strings and trailing content are all errors, reported with line and column.
#ifndef CONV2D_CONV_TRITON_JSON_H_
#define CONV2D_CONV_TRITON_JSON_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace conv2d {
namespace triton {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_number() const { return kind_ == Kind::kNumber; }
  // A number written without fraction or exponent that fits int64.
  bool is_integer() const { return kind_ == Kind::kNumber && is_integer_; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }

  bool bool_value() const { return bool_; }
  double number() const { return number_; }
  int64_t integer() const { return integer_; }
  const std::string& string() const { return string_; }
  const std::vector<JsonValue>& array() const { return array_; }
  const std::vector<std::pair<std::string, JsonValue>>& object() const { return object_; }
  // The member named `key` of an object; nullptr if absent or not an object.
  const JsonValue* Find(absl::string_view key) const;

  static const char* KindName(Kind kind);

 private:
  friend class JsonParser;
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  bool is_integer_ = false;
  double number_ = 0;
  int64_t integer_ = 0;
  std::string string_;
  std::vector<JsonValue> array_;
  std::vector<std::pair<std::string, JsonValue>> object_;
};

// Parses one JSON document (whitespace around it allowed, nothing else).
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

}  // namespace triton
}  // namespace conv2d

#endif  // CONV2D_CONV_TRITON_JSON_H_
