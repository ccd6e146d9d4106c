// OpenAI tool calls: the model's output text turned back into `tool_calls`, whole or streamed,
// in the syntax each model family's chat template writes; and the checks and JSON schemas
// behind `tools` and `tool_choice`. docs/tool_calls.md; tests/tool_call_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// How a model writes a tool call (vLLM's --tool-call-parser names in quotes).
enum class ToolCallFormat {
  kNone,        // "none": no tool-call syntax; all output is content
  kGemma4,      // "gemma4": <|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|>
  kLlama3Json,  // "llama3_json": {"name": NAME, "parameters": {...}} as the whole output; ';' between calls
  kHermes,      // "hermes": <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call> (Qwen 2.5, Qwen 3)
  kQwen3Coder,  // "qwen3_coder": <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n
                //   </function>\n</tool_call> (Qwen 3.5)
};

// The format a chat template writes assistants' tool calls in; kNone when it writes none that
// is supported (docs/tool_calls.md lists what is not).
ToolCallFormat DetectToolCallFormat(std::string_view chat_template_source);

std::string_view ToolCallFormatName(ToolCallFormat format);
// For a --tool-call-parser style flag: the names above.
absl::StatusOr<ToolCallFormat> ParseToolCallFormatName(std::string_view name);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object, compact
};

// Call ids as vLLM writes them: "call_" and 24 random alphanumerics. Seeded, so that a test
// repeats; the server seeds one generator per request.
class ToolCallIdGenerator {
 public:
  explicit ToolCallIdGenerator(uint64_t seed) : engine_(seed) {}
  std::string Next();

 private:
  std::mt19937_64 engine_;
};

// What a request adds to the format.
struct ToolCallContext {
  // Seeds the request's call ids (ToolCallIdGenerator).
  uint64_t id_seed = 0;
  // The request's `tools`. Only kQwen3Coder reads them: its values are bare text, typed by the
  // function's parameter schema.
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
};

struct ParsedToolOutput {
  // The text outside calls, byte for byte, less the whitespace (and for kLlama3Json the ';')
  // that touches a call. A call that is not well-formed stays here, markers and all.
  std::string content;
  std::vector<ToolCall> calls;
};

// Never fails: what is not a well-formed call is content.
ParsedToolOutput ParseToolCalls(ToolCallFormat format, std::string_view text, const ToolCallContext& context = {});

// One entry of OpenAI's `delta.tool_calls`.
struct ToolCallDelta {
  int index = 0;
  std::string id;         // on a call's first delta only
  std::string name;       // on a call's first delta only
  std::string arguments;  // the next piece of the call's arguments
};

struct ToolStreamDelta {
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
};

namespace tool_call_internal {
class ToolCallSyntax;
// How far the search for an open call's end has got, kept across Feeds so that a long call is
// scanned once: offsets count from the call's start.
struct EndScan {
  size_t resume = 0;
  int depth = 0;  // the JSON formats' bracket nesting
  bool in_string = false;
  bool escaped = false;
};
}  // namespace tool_call_internal

// ParseToolCalls over a stream of text deltas: for any split of a text, the content deltas
// concatenate to ParseToolCalls' content and the calls are the same (same ids too).
//
// Text that may still become part of a call is held back until that is decided: the start of
// a call marker, an open call, and whitespace that a call may yet follow. A call is reported
// once its closing marker arrives, whole, in one delta (id, name and all its arguments): a
// call that turns out malformed becomes content, and a name already sent could not be taken
// back. Finish() decides what is left: an open call whose text parses without its closing
// marker (the model stopped right after the arguments) is a call, otherwise it is content.
class StreamingToolCallParser {
 public:
  explicit StreamingToolCallParser(ToolCallFormat format, const ToolCallContext& context = {});
  ~StreamingToolCallParser();

  ToolStreamDelta Feed(std::string_view text_delta);
  // Call once, after the last Feed.
  ToolStreamDelta Finish();
  // Feed, then (when `last`) Finish, as one delta.
  ToolStreamDelta FeedAndMaybeFinish(std::string_view text_delta, bool last);

 private:
  ToolStreamDelta Drain(bool final);
  void Consume(size_t content_end, size_t consumed, ToolStreamDelta& out);
  size_t WithoutTrailingSeparators(size_t end) const;

  std::unique_ptr<tool_call_internal::ToolCallSyntax> syntax_;  // null for kNone
  tool_call_internal::EndScan scan_;                            // of the open call, if any
  ToolCallIdGenerator ids_;
  std::string pending_;      // text not yet reported as content or consumed by a call
  bool after_call_ = false;  // separators at the front of pending_ touch a call: drop them
  bool at_boundary_ = true;  // no content yet since the start or the last call
  int calls_ = 0;
};

// ---- tool_choice: "required" or a named function (vLLM's approach): the whole output is
// constrained by a JSON schema, and that JSON, not the model's native syntax, is the calls.

// OpenAI's shape: [{"type": "function", "function": {"name": ..., "description"?, "parameters"?}}],
// names unique. The error names the index and field, e.g. "tools[1].function.name: ...".
absl::Status ValidateTools(const nlohmann::ordered_json& tools);

// tool_choice {"type": "function", "function": {"name": NAME}}: the schema of the output, which
// is the function's arguments: its `parameters` ({"type":"object","properties":{}} when absent).
absl::StatusOr<std::string> NamedToolSchema(const nlohmann::ordered_json& tools, std::string_view name);

// tool_choice "required": an array of one or more {"name": NAME, "parameters": {...}}, each
// NAME one of the tools' with its own parameters.
absl::StatusOr<std::string> RequiredToolsSchema(const nlohmann::ordered_json& tools);

// The calls in an output constrained by NamedToolSchema(tools, named_function), or by
// RequiredToolsSchema when named_function is empty. An error when the output is not such
// JSON (it was cut short, e.g. by max_tokens).
absl::StatusOr<std::vector<ToolCall>> ToolCallsFromConstrainedOutput(std::string_view output,
                                                                     std::string_view named_function, uint64_t id_seed);

}  // namespace tpserve
