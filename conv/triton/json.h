// Triton's kernel metadata as JSON, read with nlohmann/json, as strictly as the loader wants: on
// top of what nlohmann refuses (trailing commas, comments, NaN/Infinity, leading zeros, control
// characters in strings, numbers out of range, trailing content) duplicate keys and nesting
// deeper than 32 are errors too, and every error is an absl::Status naming the line and column:
// no exception leaves ParseJson.
#ifndef CONV2D_CONV_TRITON_JSON_H_
#define CONV2D_CONV_TRITON_JSON_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace conv2d {
namespace triton {

// Members keep the document's order.
using Json = nlohmann::ordered_json;

// One JSON document (whitespace around it allowed, nothing else).
absl::StatusOr<Json> ParseJson(absl::string_view text);

// A number written without fraction or exponent that fits int64.
bool IsJsonInteger(const Json& value);

// "a string", "an object", ... for error messages.
const char* JsonKindName(const Json& value);

}  // namespace triton
}  // namespace conv2d

#endif  // CONV2D_CONV_TRITON_JSON_H_
