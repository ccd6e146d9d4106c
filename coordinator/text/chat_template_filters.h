// Jinja2's built-in filters and tests (the ones chat templates use), with transformers'
// `tojson`. Tested by tests/chat_template_test.cc against outputs of Jinja itself.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "coordinator/text/chat_template_value.h"

namespace tpserve::chat_template_internal {

struct FilterDef {
  std::string_view name;
  absl::StatusOr<Value> (*apply)(const Value& operand, CallArgs args);
};

struct TestDef {
  std::string_view name;
  absl::StatusOr<bool> (*apply)(const Value& operand, CallArgs args);
};

// Null when Jinja has no such filter or this interpreter does not support it; the
// parser turns that into a syntax error naming the filter.
const FilterDef* FindFilter(std::string_view name);
const TestDef* FindTest(std::string_view name);

// Iterates a value as Jinja's `for` does: list/tuple items, dict keys, string characters;
// undefined iterates as empty. Errors for values that are not iterable.
absl::StatusOr<std::vector<Value>> IterateValue(const Value& value);

}  // namespace tpserve::chat_template_internal
