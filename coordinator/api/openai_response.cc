// OpenAiResponseBuilder: OpenAI response bodies and SSE chunks. Tested by
// tests/openai_json_test.cc.
#include "coordinator/api/openai_response.h"

#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

using Json = nlohmann::ordered_json;

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json Bytes(const std::string& s) {
  Json bytes = Json::array();
  for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

OpenAiResponseBuilder::OpenAiResponseBuilder(const OpenAiRequest& request, std::string id, std::string model,
                                             int64_t created, const Tokenizer& tokenizer, ToolCallFormat tool_format)
    : endpoint_(request.endpoint),
      logprobs_(request.logprobs),
      include_usage_(request.include_usage),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      tokenizer_(tokenizer),
      tool_choice_(request.tool_use.choice),
      tool_function_(request.tool_use.function),
      tool_format_(tool_format),
      tool_context_{.id_seed = std::hash<std::string>()(id_), .tools = request.tool_use.tools} {
  if (tool_choice_ == ToolUse::Choice::kAuto) {
    tool_parser_ = std::make_unique<StreamingToolCallParser>(tool_format_, tool_context_);
  }
}

Json OpenAiResponseBuilder::ToolCallJson(const ToolCall& call, int index, bool with_type) const {
  Json j = Json::object();
  if (index >= 0) j["index"] = index;
  if (!call.id.empty()) j["id"] = call.id;
  if (with_type) j["type"] = "function";
  Json function = Json::object();
  if (!call.name.empty()) function["name"] = call.name;
  function["arguments"] = call.arguments;
  j["function"] = function;
  return j;
}

Json OpenAiResponseBuilder::FinishJson(FinishReason finish) const {
  if (finish == FinishReason::kStop && tool_calls_ > 0) return "tool_calls";
  return FinishReasonJson(finish);
}

Json OpenAiResponseBuilder::ChatDelta(const std::string& text, bool final) {
  Json delta = Json::object();
  Json calls = Json::array();
  switch (tool_choice_) {
    case ToolUse::Choice::kNone:
      if (!text.empty() || !final) delta["content"] = text;
      break;
    case ToolUse::Choice::kAuto: {
      ToolStreamDelta d = tool_parser_->Feed(text);
      if (final) {
        ToolStreamDelta rest = tool_parser_->Finish();
        d.content += rest.content;
        d.tool_calls.insert(d.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
      }
      if (!d.content.empty()) delta["content"] = d.content;
      for (const ToolCallDelta& c : d.tool_calls) {
        calls.push_back(ToolCallJson({c.id, c.name, c.arguments}, c.index, !c.id.empty()));
        if (!c.id.empty()) ++tool_calls_;
      }
      break;
    }
    case ToolUse::Choice::kNamed:
      // The output is the function's arguments: streamed as they come.
      if (!text.empty()) {
        const bool first = tool_calls_ == 0;
        ToolCall call{first ? ToolCallIdGenerator(tool_context_.id_seed).Next() : "", first ? tool_function_ : "", text};
        calls.push_back(ToolCallJson(call, 0, first));
        tool_calls_ = 1;
      }
      break;
    case ToolUse::Choice::kRequired: {
      // A list of calls: parsed whole at the end (cut short, it stays text).
      constrained_ += text;
      if (!final) break;
      absl::StatusOr<std::vector<ToolCall>> parsed = ToolCallsFromConstrainedOutput(constrained_, "", tool_context_.id_seed);
      if (!parsed.ok()) {
        if (!constrained_.empty()) delta["content"] = constrained_;
        break;
      }
      for (size_t i = 0; i < parsed->size(); ++i) calls.push_back(ToolCallJson((*parsed)[i], static_cast<int>(i), true));
      tool_calls_ = static_cast<int>(parsed->size());
      break;
    }
  }
  if (!calls.empty()) delta["tool_calls"] = calls;
  return delta;
}

Json OpenAiResponseBuilder::Message() const {
  Json message = Json{{"role", "assistant"}, {"content", text_}};
  if (tool_choice_ == ToolUse::Choice::kNone) return message;
  std::vector<ToolCall> calls;
  if (tool_choice_ == ToolUse::Choice::kAuto) {
    ParsedToolOutput parsed = ParseToolCalls(tool_format_, text_, tool_context_);
    message["content"] = parsed.content;
    calls = std::move(parsed.calls);
  } else {
    absl::StatusOr<std::vector<ToolCall>> parsed = ToolCallsFromConstrainedOutput(text_, tool_function_, tool_context_.id_seed);
    if (!parsed.ok()) return message;  // cut short (max_tokens): the text as it is
    calls = *std::move(parsed);
  }
  tool_calls_ = static_cast<int>(calls.size());
  if (calls.empty()) return message;
  if (message["content"] == "") message["content"] = nullptr;
  Json list = Json::array();
  for (const ToolCall& call : calls) list.push_back(ToolCallJson(call, -1, true));
  message["tool_calls"] = list;
  return message;
}

void OpenAiResponseBuilder::Record(const OutputEvent& e) {
  if (e.prompt_tokens > 0) prompt_tokens_ = e.prompt_tokens;
  if (e.completion_tokens > 0) completion_tokens_ = e.completion_tokens;
  if (e.finish != FinishReason::kNone) {
    finish_ = e.finish;
    error_ = e.error;
    error_code_ = e.error_code;
  }
}

absl::Status OpenAiResponseBuilder::FailureStatus() const {
  // A cancel the client sees was the server's (a drain cut it): the client's own cancel
  // (a disconnect) leaves nobody to answer.
  if (finish_ == FinishReason::kCancelled) {
    return absl::UnavailableError(error_.empty() ? "the server cancelled the request" : error_);
  }
  // UNAVAILABLE (a rank died): the server's state, not the request's; retry elsewhere.
  const absl::StatusCode code =
      error_code_ == absl::StatusCode::kUnavailable ? absl::StatusCode::kUnavailable : absl::StatusCode::kInternal;
  return absl::Status(code, error_.empty() ? "the engine failed this request" : error_);
}

absl::Status OpenAiResponseBuilder::status() const { return failed() ? FailureStatus() : absl::OkStatus(); }

Json OpenAiResponseBuilder::Envelope(bool chunk) const {
  const char* object = endpoint_ == OpenAiEndpoint::kCompletions ? "text_completion"
                       : chunk                                   ? "chat.completion.chunk"
                                                                 : "chat.completion";
  return Json{{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

std::string OpenAiResponseBuilder::TokenText(int32_t id) const {
  const int32_t ids[1] = {id};
  return tokenizer_.Decode(ids, /*skip_special_tokens=*/false);
}

Json OpenAiResponseBuilder::LogprobsJson(const std::vector<TokenLogprob>& logprobs, size_t* text_offset) const {
  if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
    Json content = Json::array();
    for (const TokenLogprob& lp : logprobs) {
      const std::string token = TokenText(lp.token_id);
      Json top = Json::array();
      for (const auto& [id, logprob] : lp.top) {
        const std::string alt = TokenText(id);
        top.push_back(Json{{"token", alt}, {"logprob", logprob}, {"bytes", Bytes(alt)}});
      }
      content.push_back(
          Json{{"token", token}, {"logprob", lp.logprob}, {"bytes", Bytes(token)}, {"top_logprobs", top}});
    }
    return Json{{"content", content}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(),
       offsets = Json::array();
  for (const TokenLogprob& lp : logprobs) {
    const std::string token = TokenText(lp.token_id);
    tokens.push_back(token);
    token_logprobs.push_back(lp.logprob);
    Json top = Json::object();
    for (const auto& [id, logprob] : lp.top) top[TokenText(id)] = logprob;
    top_logprobs.push_back(top);
    offsets.push_back(*text_offset);
    *text_offset += token.size();
  }
  return Json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs},
              {"text_offset", offsets}};
}

Json OpenAiResponseBuilder::UsageJson() const {
  return Json{{"prompt_tokens", prompt_tokens_},
              {"completion_tokens", completion_tokens_},
              {"total_tokens", prompt_tokens_ + completion_tokens_}};
}

Json OpenAiResponseBuilder::ChoiceChunk(const OutputEvent& e) {
  const FinishReason finish = failed() ? FinishReason::kNone : e.finish;
  Json choice = Json{{"index", 0}};
  if (endpoint_ == OpenAiEndpoint::kCompletions) {
    choice["text"] = e.text;
  } else {
    choice["delta"] = ChatDelta(e.text, e.finish != FinishReason::kNone);
    // Text held back by a tool-call parser (or buffered) makes no chunk of its own.
    if (choice["delta"].empty() && finish == FinishReason::kNone && !(logprobs_ && !e.logprobs.empty())) return nullptr;
  }
  choice["logprobs"] = logprobs_ ? LogprobsJson(e.logprobs, &text_offset_) : Json(nullptr);
  choice["finish_reason"] = FinishJson(finish);
  Json chunk = Envelope(/*chunk=*/true);
  chunk["choices"] = Json::array({choice});
  return chunk;
}

std::string OpenAiResponseBuilder::Chunks(const OutputEvent& e) {
  Record(e);
  std::string out;
  if (endpoint_ == OpenAiEndpoint::kChatCompletions && !sent_first_chunk_ && !failed()) {
    Json chunk = Envelope(/*chunk=*/true);
    chunk["choices"] = Json::array({Json{{"index", 0},
                                        {"delta", Json{{"role", "assistant"}, {"content", ""}}},
                                        {"logprobs", nullptr},
                                        {"finish_reason", nullptr}}});
    absl::StrAppend(&out, SseEvent(Dump(chunk)));
  }
  sent_first_chunk_ = true;
  const bool has_content = !e.text.empty() || (logprobs_ && !e.logprobs.empty());
  if (has_content || (e.finish != FinishReason::kNone && !failed())) {
    if (Json chunk = ChoiceChunk(e); !chunk.is_null()) absl::StrAppend(&out, SseEvent(Dump(chunk)));
  }
  if (failed()) {
    absl::StrAppend(&out, SseEvent(Dump(ErrorJson(FailureStatus()))), kSseDone);
  } else if (finished()) {
    if (include_usage_) {
      Json chunk = Envelope(/*chunk=*/true);
      chunk["choices"] = Json::array();
      chunk["usage"] = UsageJson();
      absl::StrAppend(&out, SseEvent(Dump(chunk)));
    }
    absl::StrAppend(&out, kSseDone);
  }
  return out;
}

void OpenAiResponseBuilder::Accumulate(const OutputEvent& e) {
  Record(e);
  text_ += e.text;
  if (logprobs_) logprobs_seen_.insert(logprobs_seen_.end(), e.logprobs.begin(), e.logprobs.end());
}

std::string OpenAiResponseBuilder::Body() const {
  if (failed()) return Dump(ErrorJson(FailureStatus()));
  Json choice = Json{{"index", 0}};
  if (endpoint_ == OpenAiEndpoint::kCompletions) {
    choice["text"] = text_;
  } else {
    choice["message"] = Message();
  }
  size_t text_offset = 0;
  choice["logprobs"] = logprobs_ ? LogprobsJson(logprobs_seen_, &text_offset) : Json(nullptr);
  choice["finish_reason"] = FinishJson(finish_);
  Json body = Envelope(/*chunk=*/false);
  body["choices"] = Json::array({choice});
  body["usage"] = UsageJson();
  return Dump(body);
}

}  // namespace tpserve
