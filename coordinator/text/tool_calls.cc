// Tool-call formats by name and by chat template, and the parsers over them (tool_calls.h).
// Tested by tests/tool_call_test.cc.
#include "coordinator/text/tool_calls.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "coordinator/text/tool_call_syntax.h"

namespace tpserve {
namespace {

using tool_call_internal::BlockStart;
using tool_call_internal::kNoPos;
using tool_call_internal::ParsedCall;

constexpr std::pair<ToolCallFormat, std::string_view> kFormatNames[] = {
    {ToolCallFormat::kNone, "none"},
    {ToolCallFormat::kGemma4, "gemma4"},
    {ToolCallFormat::kLlama3Json, "llama3_json"},
    {ToolCallFormat::kHermes, "hermes"},
    {ToolCallFormat::kQwen3Coder, "qwen3_coder"},
};

}  // namespace

// By the text each template writes around an assistant's tool calls.
ToolCallFormat DetectToolCallFormat(std::string_view source) {
  auto has = [source](std::string_view text) { return source.find(text) != std::string_view::npos; };
  if (has("<|tool_call>call:")) return ToolCallFormat::kGemma4;
  if (has("<tool_call>") && has("<function=") && has("<parameter=")) return ToolCallFormat::kQwen3Coder;
  if (has("<tool_call>")) return ToolCallFormat::kHermes;
  if (has("<|start_header_id|>") && has("\"parameters\": ")) return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kNone;
}

std::string_view ToolCallFormatName(ToolCallFormat format) {
  for (const auto& [each, name] : kFormatNames) {
    if (each == format) return name;
  }
  return "none";
}

absl::StatusOr<ToolCallFormat> ParseToolCallFormatName(std::string_view name) {
  std::string known;
  for (const auto& [format, each] : kFormatNames) {
    if (each == name) return format;
    known += (known.empty() ? "" : ", ") + std::string(each);
  }
  return absl::InvalidArgumentError("tool call parser '" + std::string(name) + "' is not known; use one of " + known);
}

std::string ToolCallIdGenerator::Next() {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[engine_() % kAlphabet.size()];
  return id;
}

ParsedToolOutput ParseToolCalls(ToolCallFormat format, std::string_view text, const ToolCallContext& context) {
  StreamingToolCallParser parser(format, context);
  ParsedToolOutput parsed;
  for (const ToolStreamDelta& delta : {parser.Feed(text), parser.Finish()}) {
    parsed.content += delta.content;
    for (const ToolCallDelta& call : delta.tool_calls) {
      if (call.index == static_cast<int>(parsed.calls.size())) parsed.calls.push_back({call.id, call.name, ""});
      parsed.calls[call.index].arguments += call.arguments;
    }
  }
  return parsed;
}

StreamingToolCallParser::StreamingToolCallParser(ToolCallFormat format, const ToolCallContext& context)
    : syntax_(tool_call_internal::MakeToolCallSyntax(format, context.tools)), ids_(context.id_seed) {}

StreamingToolCallParser::~StreamingToolCallParser() = default;

ToolStreamDelta StreamingToolCallParser::Feed(std::string_view text_delta) {
  if (!syntax_) return {std::string(text_delta), {}};
  pending_ += text_delta;
  return Drain(/*final=*/false);
}

ToolStreamDelta StreamingToolCallParser::Finish() {
  if (!syntax_) return {};
  return Drain(/*final=*/true);
}

ToolStreamDelta StreamingToolCallParser::FeedAndMaybeFinish(std::string_view text_delta, bool last) {
  ToolStreamDelta d = Feed(text_delta);
  if (!last) return d;
  ToolStreamDelta rest = Finish();
  d.content += rest.content;
  d.tool_calls.insert(d.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
  return d;
}

// Reports what pending_ has decided, block by block; holds the rest unless `final`.
ToolStreamDelta StreamingToolCallParser::Drain(bool final) {
  ToolStreamDelta out;
  while (true) {
    if (after_call_) {
      pending_.erase(0, std::min(pending_.find_first_not_of(syntax_->separators()), pending_.size()));
      if (pending_.empty()) break;
      after_call_ = false;
    }
    const BlockStart start = syntax_->FindStart(pending_, at_boundary_);
    const size_t end = start.complete ? syntax_->FindEnd(pending_, start.pos, scan_) : kNoPos;
    if (!final && end == kNoPos) {
      // Undecided from the start of a (perhaps) call, and the separators that may touch it.
      const size_t decided = WithoutTrailingSeparators(std::min(start.pos, pending_.size()));
      Consume(decided, decided, out);
      break;
    }
    if (!start.complete) {
      Consume(pending_.size(), pending_.size(), out);
      break;
    }
    // A call block from start.pos to `end` (at the end of the output, perhaps to its end).
    const size_t block_end = std::min(end, pending_.size());
    scan_ = {};
    std::optional<ParsedCall> call =
        syntax_->ParseBlock(std::string_view(pending_).substr(start.pos, block_end - start.pos));
    if (!call) {
      Consume(block_end, block_end, out);
      continue;
    }
    Consume(WithoutTrailingSeparators(start.pos), block_end, out);
    out.tool_calls.push_back({calls_++, ids_.Next(), std::move(call->name), std::move(call->arguments)});
    after_call_ = true;
    at_boundary_ = true;
  }
  return out;
}

// Reports pending_[0, content_end) as content and drops pending_[0, consumed).
void StreamingToolCallParser::Consume(size_t content_end, size_t consumed, ToolStreamDelta& out) {
  std::string_view content = std::string_view(pending_).substr(0, content_end);
  if (content.find_first_not_of(syntax_->separators()) != kNoPos) at_boundary_ = false;
  out.content += content;
  pending_.erase(0, consumed);
}

// `end`, less the separators just before it.
size_t StreamingToolCallParser::WithoutTrailingSeparators(size_t end) const {
  size_t last = std::string_view(pending_).substr(0, end).find_last_not_of(syntax_->separators());
  return last == kNoPos ? 0 : last + 1;
}

}  // namespace tpserve
