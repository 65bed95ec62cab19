// ParseJson: nlohmann/json's parser with the loader's extra refusals, its exceptions turned into
// absl::Status at this boundary.
#include "conv/triton/json.h"

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace conv2d {
namespace triton {

namespace {

// Deep enough for any metadata: a value may have 32 containers around it.
constexpr int kMaxDepth = 32;

// nlohmann's message without its "[json.exception.parse_error.101] parse error at ...: " head,
// which ParseJson replaces by its own position.
absl::string_view Reason(absl::string_view what) {
  const size_t tag = what.find("] ");
  if (tag != absl::string_view::npos) what.remove_prefix(tag + 2);
  if (what.rfind("parse error", 0) == 0) {
    const size_t colon = what.find(": ");
    if (colon != absl::string_view::npos) what.remove_prefix(colon + 2);
  }
  return what;
}

// Line and column (from 1) of the byte at `offset`: where the parser stopped. (nlohmann counts
// the bytes it has read, so a newline it stopped at would show as column 0 of the next line.)
std::string Position(absl::string_view text, size_t offset) {
  if (offset > text.size()) offset = text.size();
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return absl::StrCat("line ", line, ", column ", offset - line_start + 1);
}

}  // namespace

absl::StatusOr<Json> ParseJson(absl::string_view text) {
  // What nlohmann would accept and RFC 8259 leaves open, refused here: the keys of each open
  // object, and the depth.
  std::vector<std::set<std::string>> keys;
  std::string refusal;
  auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (!refusal.empty()) return true;
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
      case Json::parse_event_t::value:  // `depth` counts the containers around it
        if (depth > kMaxDepth) refusal = absl::StrCat("nesting deeper than ", kMaxDepth);
        if (event == Json::parse_event_t::object_start) keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second) {
          refusal = absl::StrCat("duplicate key \"", parsed.get<std::string>(), "\"");
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    Json doc = Json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true,
                           /*ignore_comments=*/false);
    if (!refusal.empty()) return absl::InvalidArgumentError(absl::StrCat("JSON: ", refusal));
    return doc;
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "JSON: ", Reason(e.what()), " at ", Position(text, e.byte > 0 ? e.byte - 1 : 0)));
  } catch (const Json::exception& e) {  // e.g. out_of_range: a number too large for a double
    return absl::InvalidArgumentError(absl::StrCat("JSON: ", Reason(e.what())));
  }
}

bool IsJsonInteger(const Json& value) {
  if (value.is_number_unsigned()) {
    return value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  }
  return value.is_number_integer();
}

const char* JsonKindName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "?";
  }
}

}  // namespace triton
}  // namespace conv2d
