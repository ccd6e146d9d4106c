// Parses chat template source into a Program (chat_template_ast.h) with Jinja2's grammar
// and operator precedence. Tested by tests/chat_template_test.cc.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "coordinator/text/chat_template_ast.h"

namespace tpserve::chat_template_internal {

// Syntax errors, unknown tags, filters and tests are InvalidArgument errors that name
// the line and column.
absl::StatusOr<std::unique_ptr<Program>> ParseTemplate(std::string_view source);

}  // namespace tpserve::chat_template_internal
