// Renders a parsed chat template (chat_template_ast.h) against a context of variables,
// with Jinja2's scoping: {% for %} iterations and macro calls get their own frames,
// {% if %} does not. Tested by tests/chat_template_test.cc.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/text/chat_template_ast.h"
#include "coordinator/text/chat_template_value.h"

namespace tpserve::chat_template_internal {

struct EvalOptions {
  absl::Time now;  // what strftime_now() formats
  absl::TimeZone time_zone;
  int max_call_depth = 200;  // nested macro calls before giving up
  size_t max_output_bytes = kMaxStringBytes;
};

// `context` must be a dict; its entries become the template's top-level variables.
// Errors are InvalidArgument and name the line and column of the failing expression.
absl::StatusOr<std::string> RenderProgram(const Program& program, const Value& context,
                                          const EvalOptions& options);

}  // namespace tpserve::chat_template_internal
