// Python's json.dumps for chat template values, as transformers' `tojson` filter calls
// it (ensure_ascii=False, insertion-ordered keys). Tested by tests/chat_template_test.cc.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/text/chat_template_value.h"

namespace tpserve::chat_template_internal {

// Options of json.dumps as transformers' `tojson` filter passes them.
struct JsonDumpOptions {
  std::optional<std::string> indent;  // absent: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python's json.dumps(value, ...); an error for values JSON cannot hold.
absl::StatusOr<std::string> PyJsonDumps(const Value& value, const JsonDumpOptions& options);

}  // namespace tpserve::chat_template_internal
