// docs/tool_calls.md; tests/choice_tool_calls_test.cc.
#include "coordinator/api/choice_tool_calls.h"

#include <functional>
#include <utility>

namespace tpserve {

uint64_t ToolCallIdSeed(std::string_view response_id, int index) {
  return std::hash<std::string_view>()(response_id) + static_cast<uint64_t>(index);
}

ChoiceToolCalls::ChoiceToolCalls(const ToolUse& use, ToolCallFormat format, std::string_view response_id, int index,
                                 Delivery delivery)
    : choice_(use.choice), function_(use.function), delivery_(delivery), id_seed_(ToolCallIdSeed(response_id, index)) {
  if (choice_ == ToolUse::Choice::kAuto) {
    parser_ = std::make_unique<StreamingToolCallParser>(format, ToolCallContext{.id_seed = id_seed_, .tools = use.tools});
  }
}

ChoiceToolCalls::~ChoiceToolCalls() = default;
ChoiceToolCalls::ChoiceToolCalls(ChoiceToolCalls&&) noexcept = default;
ChoiceToolCalls& ChoiceToolCalls::operator=(ChoiceToolCalls&&) noexcept = default;

ToolStreamDelta ChoiceToolCalls::Feed(std::string_view text, bool final) {
  ToolStreamDelta out;
  switch (choice_) {
    case ToolUse::Choice::kNone:
      out.content = std::string(text);
      return out;
    case ToolUse::Choice::kAuto:
      out = parser_->FeedAndMaybeFinish(text, final);
      for (const ToolCallDelta& d : out.tool_calls) calls_ += d.id.empty() ? 0 : 1;
      return out;
    case ToolUse::Choice::kNamed:
      if (delivery_ == Delivery::kStreamed) {
        // The output is the function's arguments: sent as they come, the first piece with the
        // call's id and name.
        if (text.empty()) return out;
        const bool first = calls_ == 0;
        out.tool_calls.push_back({0, first ? ToolCallIdGenerator(id_seed_).Next() : "", first ? function_ : "",
                                  std::string(text)});
        calls_ = 1;
        return out;
      }
      [[fallthrough]];
    case ToolUse::Choice::kRequired: {
      constrained_.append(text);
      if (!final) return out;
      absl::StatusOr<std::vector<ToolCall>> parsed = ToolCallsFromConstrainedOutput(
          constrained_, choice_ == ToolUse::Choice::kNamed ? function_ : "", id_seed_);
      if (!parsed.ok()) {  // cut short (max_tokens): the text as it is
        out.content = std::move(constrained_);
        return out;
      }
      for (size_t i = 0; i < parsed->size(); ++i) {
        ToolCall& call = (*parsed)[i];
        out.tool_calls.push_back({static_cast<int>(i), std::move(call.id), std::move(call.name), std::move(call.arguments)});
      }
      calls_ = static_cast<int>(parsed->size());
      return out;
    }
  }
  return out;
}

}  // namespace tpserve
