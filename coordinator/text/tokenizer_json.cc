// Field access for tokenizer.json sections with file- and field-naming errors.
// Tested through tests/tokenizer_test.cc.
#include "coordinator/text/tokenizer_json.h"

#include "absl/strings/str_cat.h"

namespace tpserve::tokenizer_internal {

JsonPath JsonPath::Field(std::string_view key) const {
  return JsonPath(source_,
                  path_.empty() ? std::string(key) : absl::StrCat(path_, ".", std::string(key)));
}

JsonPath JsonPath::Index(size_t i) const {
  return JsonPath(source_, absl::StrCat(path_, "[", i, "]"));
}

absl::Status JsonPath::Error(absl::string_view message) const {
  if (path_.empty()) return absl::InvalidArgumentError(absl::StrCat(source_, ": ", message));
  return absl::InvalidArgumentError(absl::StrCat(source_, ": ", path_, ": ", message));
}

absl::StatusOr<std::string> RequireString(const Json& j, std::string_view key, const JsonPath& at) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return at.Field(key).Error("missing required string field");
  if (!it->is_string())
    return at.Field(key).Error(absl::StrCat("expected a string, got ", it->type_name()));
  return it->get<std::string>();
}

absl::StatusOr<bool> BoolOr(const Json& j, std::string_view key, bool fallback,
                            const JsonPath& at) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    return at.Field(key).Error(absl::StrCat("expected true or false, got ", it->dump()));
  return it->get<bool>();
}

absl::StatusOr<int64_t> RequireIndex(const Json& j, std::string_view key, const JsonPath& at) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return at.Field(key).Error("missing required integer field");
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX) {
    return at.Field(key).Error(
        absl::StrCat("expected a non-negative 32-bit integer, got ", it->dump()));
  }
  return it->get<int64_t>();
}

absl::StatusOr<std::string> RequireType(const Json& j, const JsonPath& at) {
  if (!j.is_object()) return at.Error(absl::StrCat("expected an object, got ", j.type_name()));
  return RequireString(j, "type", at);
}

absl::StatusOr<const Json*> RequireArray(const Json& j, std::string_view key, const JsonPath& at) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) {
    return at.Field(key).Error(it == j.end()
                                   ? "missing required array field"
                                   : absl::StrCat("expected an array, got ", it->type_name()));
  }
  return &*it;
}

absl::StatusOr<PatternSpec> RequirePattern(const Json& j, std::string_view key,
                                           const JsonPath& at) {
  const JsonPath field = at.Field(key);
  const auto it = j.find(key);
  if (it == j.end() || !it->is_object()) {
    return field.Error(R"(expected {"String": ...} or {"Regex": ...})");
  }
  PatternSpec spec;
  if (const auto s = it->find("String"); s != it->end() && s->is_string()) {
    spec.text = s->get<std::string>();
    return spec;
  }
  if (const auto r = it->find("Regex"); r != it->end() && r->is_string()) {
    spec.is_regex = true;
    spec.text = r->get<std::string>();
    return spec;
  }
  return field.Error(
      absl::StrCat(R"(expected {"String": ...} or {"Regex": ...}, got )", it->dump()));
}

}  // namespace tpserve::tokenizer_internal
