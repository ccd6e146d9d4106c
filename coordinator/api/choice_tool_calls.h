// What one choice's output text becomes under its request's tool_choice, for both front ends:
// the OpenAI HTTP API streams call deltas, gRPC and non-streamed bodies take calls whole.
// "none": all content; "auto": the model's own call syntax, parsed as the text streams
// (StreamingToolCallParser); a named function: the text is that function's arguments;
// "required": the text is a JSON list of calls, parsed at the end (cut short, it stays
// content). Call ids are seeded by the response's id and the choice's index, the same way in
// both front ends. docs/tool_calls.md; tests/choice_tool_calls_test.cc.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "coordinator/api/request_builder.h"
#include "coordinator/text/tool_calls.h"

namespace tpserve {

// The seed of choice `index`'s call ids in the response `response_id`.
uint64_t ToolCallIdSeed(std::string_view response_id, int index);

class ChoiceToolCalls {
 public:
  enum class Delivery {
    kStreamed,  // a named function's arguments as they come (OpenAI's streamed deltas)
    kWhole,     // every call in one delta, id, name and all its arguments (gRPC, response bodies)
  };
  ChoiceToolCalls(const ToolUse& use, ToolCallFormat format, std::string_view response_id, int index,
                  Delivery delivery);
  ~ChoiceToolCalls();
  ChoiceToolCalls(ChoiceToolCalls&&) noexcept;
  ChoiceToolCalls& operator=(ChoiceToolCalls&&) noexcept;

  // The choice's next piece of text; `final` on its last piece (which may be empty): what of
  // it is content and which calls (or pieces of one) it completes.
  ToolStreamDelta Feed(std::string_view text, bool final);
  // Calls begun so far.
  int calls() const { return calls_; }

 private:
  ToolUse::Choice choice_;
  std::string function_;  // kNamed
  Delivery delivery_;
  uint64_t id_seed_;
  std::unique_ptr<StreamingToolCallParser> parser_;  // kAuto
  std::string constrained_;  // kRequired, and kNamed delivered whole: the output so far
  int calls_ = 0;
};

}  // namespace tpserve
