// Splits Jinja2 template source into tokens the way Jinja's lexer does with
// transformers' settings (trim_blocks, lstrip_blocks, no trailing newline kept).
// Tested by tests/chat_template_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve::chat_template_internal {

struct SourcePos {
  int line = 1;
  int column = 1;  // in code points, 1-based
};

enum class TokenType {
  kData,           // literal template text, whitespace control already applied
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,  // value: the unescaped contents
  kInteger,
  kFloat,
  kOperator,  // value: the operator text, e.g. "//" or "("
  kEof,
};

struct Token {
  TokenType type;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0;
  SourcePos pos;
};

// Comments are dropped and {% raw %} blocks become data. Errors name line:column.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

// "line 3, column 7" style prefix used by every template error.
std::string FormatPos(SourcePos pos);

}  // namespace tpserve::chat_template_internal
