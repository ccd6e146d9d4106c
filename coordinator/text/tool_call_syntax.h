// The syntax of each tool-call format, for the parsers of tool_calls.h: where a call block
// starts and ends in the output text, and the call one block writes. Tested through
// tests/tool_call_test.cc.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "coordinator/text/tool_calls.h"
#include "nlohmann/json.hpp"

namespace tpserve::tool_call_internal {

inline constexpr size_t kNoPos = std::string_view::npos;

struct BlockStart {
  size_t pos = kNoPos;    // kNoPos: no call starts in the text
  bool complete = false;  // false: text[pos..] is only the beginning of a start marker
};

struct ParsedCall {
  std::string name;
  std::string arguments;  // compact JSON object
};

class ToolCallSyntax {
 public:
  virtual ~ToolCallSyntax() = default;
  // The first call block in `text`. at_boundary: nothing but separators has been seen since the
  // output's start or the last call (kLlama3Json calls start only there).
  virtual BlockStart FindStart(std::string_view text, bool at_boundary) const = 0;
  // Just past the end of the block that starts at text[start], or kNoPos while it is open. Called
  // again as the text grows, with the same `scan` until the block is decided.
  virtual size_t FindEnd(std::string_view text, size_t start, EndScan& scan) const = 0;
  // The call a block writes (from its start to its end, or to the end of the output when it
  // never closed), or nullopt when it is not well-formed.
  virtual std::optional<ParsedCall> ParseBlock(std::string_view block) const = 0;
  // What may separate calls; dropped next to one.
  virtual std::string_view separators() const { return " \t\r\n"; }
};

// Null for kNone.
std::unique_ptr<ToolCallSyntax> MakeToolCallSyntax(ToolCallFormat format, const nlohmann::ordered_json& tools);

// Shared by the formats and tool_choice.

// JSON text parsed, or nullopt when it is not JSON or nests deeper than a model's output
// plausibly does (deep nesting would recurse deep when dumped).
std::optional<nlohmann::ordered_json> ParseJson(std::string_view text);
// Compact, with invalid UTF-8 replaced rather than thrown on.
std::string DumpJson(const nlohmann::ordered_json& value);
// {"name": NAME, "arguments" or "parameters": {...} or a string holding one (or neither: {})}.
std::optional<ParsedCall> CallFromJson(const nlohmann::ordered_json& call);

}  // namespace tpserve::tool_call_internal
