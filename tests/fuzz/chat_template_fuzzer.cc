// Fuzz target: chat template source (a model directory's file, so untrusted) through
// ChatTemplate::Parse and, when it parses, Render against a small fixed conversation with
// tools. Every outcome must be a value or a Status. Replayed by ctest as chat_template_replay.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "coordinator/text/chat_template.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_fixtures.h"

namespace tpserve::fuzz {
namespace {

using Json = nlohmann::ordered_json;

// What apply_chat_template passes: messages of every role (a tool call, reasoning), a
// tool schema, the special tokens and the generation flag.
const Json& Context() {
  static const auto* context = new Json(Json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "What's the weather in Paris? \u00e9\u4e2d\ud83d\ude00"},
      {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"},
      {"role": "assistant", "content": "It is 21 degrees."},
      {"role": "user", "content": ["part one", {"type": "text", "text": "part two"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                               "days": {"type": "integer", "enum": [1, 2]}},
                              "required": ["city"]}}}],
    "documents": null,
    "add_generation_prompt": true,
    "enable_thinking": false,
    "bos_token": "<bos>",
    "eos_token": "<eos>"
  })"));
  return *context;
}

void FuzzOne(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ChatTemplate> parsed = ChatTemplate::Parse(source);
  if (!parsed.ok()) return;
  ChatTemplateRenderOptions options;
  options.time_zone = absl::UTCTimeZone();
  options.now = absl::FromCivil(absl::CivilSecond(2024, 7, 26, 12, 0, 0), absl::UTCTimeZone());
  absl::StatusOr<std::string> rendered = parsed->Render(Context(), options);
  (void)rendered;
}

}  // namespace
}  // namespace tpserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tpserve::fuzz::FuzzOne(data, size);
  return 0;
}
