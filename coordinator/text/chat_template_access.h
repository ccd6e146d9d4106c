// Attribute and item access as Jinja's sandbox does it (x.attr, x[key], x[a:b:c]),
// including the Python str/list/dict methods templates call. Tested by
// tests/chat_template_test.cc.
#pragma once

#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "coordinator/text/chat_template_value.h"

namespace tpserve::chat_template_internal {

// obj.name: a method of str/list/dict first, then a dict key or namespace attribute.
// Missing attributes give an undefined value; errors only for undefined `obj`.
absl::StatusOr<Value> GetAttribute(const Value& obj, std::string_view name);

// obj[key]: dict key or list/str index first, then (for string keys) an attribute.
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);

// obj[start:stop:step] with Python's slice rules.
absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                               const Value& step);

// The message Jinja's undefined values carry, e.g. "'dict object' has no attribute 'x'".
std::string NoAttributeHint(const Value& obj, std::string_view name);

}  // namespace tpserve::chat_template_internal
