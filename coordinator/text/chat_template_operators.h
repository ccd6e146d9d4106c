// Python's operators as Jinja applies them to template values: arithmetic, `~`,
// comparisons, `in` and printf-style `str % args`. Tested by tests/chat_template_test.cc.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/text/chat_template_ast.h"
#include "coordinator/text/chat_template_value.h"

namespace tpserve::chat_template_internal {

absl::StatusOr<Value> ApplyBinary(BinaryOp op, const Value& a, const Value& b);
// Unary - and +.
absl::StatusOr<Value> ApplyUnaryNumber(UnaryOp op, const Value& operand);
absl::StatusOr<bool> ApplyCompare(CompareOp op, const Value& a, const Value& b);
// `item in container`.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
// Python's `format % args` (a tuple supplies several arguments, a dict named ones).
absl::StatusOr<Value> FormatPercent(const std::string& format, const Value& args);

}  // namespace tpserve::chat_template_internal
