// Field access for tokenizer.json sections with errors that name the file and the
// field path (e.g. `tokenizer.json: normalizer.normalizers[1].content: ...`).
// Tested through tests/tokenizer_test.cc.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tpserve::tokenizer_internal {

using Json = nlohmann::json;

// Where a JSON value sits: the file (or caller-given source name) and the field path.
class JsonPath {
 public:
  JsonPath(std::string source, std::string path)
      : source_(std::move(source)), path_(std::move(path)) {}

  JsonPath Field(std::string_view key) const;
  JsonPath Index(size_t i) const;
  absl::Status Error(absl::string_view message) const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::string path_;
};

// `j[key]` as a string; an error when absent or not a string.
absl::StatusOr<std::string> RequireString(const Json& j, std::string_view key, const JsonPath& at);
// `j[key]` as a bool; `fallback` when absent or null.
absl::StatusOr<bool> BoolOr(const Json& j, std::string_view key, bool fallback, const JsonPath& at);
// `j[key]` as a non-negative integer; an error when absent.
absl::StatusOr<int64_t> RequireIndex(const Json& j, std::string_view key, const JsonPath& at);
// `j["type"]`, requiring `j` to be an object.
absl::StatusOr<std::string> RequireType(const Json& j, const JsonPath& at);
// `j[key]` as an array; an error when absent or not an array.
absl::StatusOr<const Json*> RequireArray(const Json& j, std::string_view key, const JsonPath& at);

// A pattern object as Split/Replace use: {"String": "..."} or {"Regex": "..."}.
struct PatternSpec {
  bool is_regex = false;
  std::string text;
};
absl::StatusOr<PatternSpec> RequirePattern(const Json& j, std::string_view key, const JsonPath& at);

}  // namespace tpserve::tokenizer_internal
