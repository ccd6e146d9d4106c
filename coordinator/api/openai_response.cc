// OpenAiResponseBuilder: OpenAI response bodies and SSE chunks. Tested by
// tests/openai_json_test.cc.
#include "coordinator/api/openai_response.h"

#include <algorithm>
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
    : OpenAiResponseBuilder(
          request, std::move(id), std::move(model), created,
          [&tokenizer](int32_t token) {
            const int32_t ids[1] = {token};
            return tokenizer.Decode(ids, /*skip_special_tokens=*/false);
          },
          tool_format, /*relay=*/false) {}

OpenAiResponseBuilder OpenAiResponseBuilder::ForRelay(const OpenAiRequest& request, std::string id, std::string model,
                                                      int64_t created, TokenTextFn token_text) {
  return OpenAiResponseBuilder(request, std::move(id), std::move(model), created, std::move(token_text),
                               ToolCallFormat::kNone, /*relay=*/true);
}

OpenAiResponseBuilder::OpenAiResponseBuilder(const OpenAiRequest& request, std::string id, std::string model,
                                             int64_t created, TokenTextFn token_text, ToolCallFormat tool_format,
                                             bool relay)
    : endpoint_(request.endpoint),
      logprobs_(request.logprobs),
      include_usage_(request.include_usage),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      token_text_(std::move(token_text)),
      tool_use_(request.input.tool_use),
      tool_format_(tool_format),
      relay_(relay),
      choices_(std::max(1, request.input.n)) {
  // Every chunk's envelope is the same: dumped once, up to its choices.
  std::string envelope = Dump(Envelope(/*chunk=*/true));
  envelope.pop_back();  // the closing brace
  chunk_prefix_ = absl::StrCat("data: ", envelope, ",\"choices\":[");
  if (endpoint_ != OpenAiEndpoint::kChatCompletions) return;
  for (int i = 0; i < num_choices(); ++i) {
    // Relayed text is content only: the backend took the calls out.
    choices_[i].tools.emplace(relay_ ? ToolUse() : tool_use_, tool_format_, id_, i, ChoiceToolCalls::Delivery::kStreamed);
  }
}

int OpenAiResponseBuilder::CallCount(const Choice& c) const {
  if (relay_) return static_cast<int>(c.relayed_calls.size());
  return c.tools ? c.tools->calls() : 0;
}

void OpenAiResponseBuilder::Record(const OutputEvent& e, Choice& c) {
  if (e.prompt_tokens > 0) prompt_tokens_ = e.prompt_tokens;
  if (e.completion_tokens > 0) c.completion_tokens = e.completion_tokens;
  if (e.finish == FinishReason::kNone || c.finish != FinishReason::kNone) return;
  c.finish = e.finish;
  if (!e.stop_string.empty()) c.stop_reason = e.stop_string;
  if (e.stop_token_id >= 0) c.stop_reason = e.stop_token_id;
  ++num_finished_;
  if (failed() || (e.finish != FinishReason::kError && e.finish != FinishReason::kCancelled)) return;
  // A cancel the client sees was the server's (a drain cut it): the client's own cancel
  // (a disconnect) leaves nobody to answer.
  if (e.finish == FinishReason::kCancelled) {
    failure_ = absl::UnavailableError(e.error.empty() ? "the server cancelled the request" : e.error);
    return;
  }
  // UNAVAILABLE (a rank died) or RESOURCE_EXHAUSTED (a later choice found the queue full):
  // the server's state, not the request's; retry later or elsewhere.
  const absl::StatusCode code = e.error_code == absl::StatusCode::kUnavailable ||
                                        e.error_code == absl::StatusCode::kResourceExhausted
                                    ? e.error_code
                                    : absl::StatusCode::kInternal;
  failure_ = absl::Status(code, e.error.empty() ? "the engine failed this request" : e.error);
}

bool OpenAiResponseBuilder::finished() const { return failed() || num_finished_ == num_choices(); }

absl::Status OpenAiResponseBuilder::status() const { return failure_; }

Json OpenAiResponseBuilder::Envelope(bool chunk) const {
  const char* object = endpoint_ == OpenAiEndpoint::kCompletions ? "text_completion"
                       : chunk                                   ? "chat.completion.chunk"
                                                                 : "chat.completion";
  // system_fingerprint as vLLM sends it: null (no deployment fingerprint).
  return Json{{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}, {"system_fingerprint", nullptr}};
}

std::string OpenAiResponseBuilder::TokenText(int32_t id) const { return token_text_(id); }

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
    // The sampled token is always there, so up to logprobs + 1 entries (OpenAI's legacy
    // completions, and vLLM's).
    if (!top.contains(token)) top[token] = lp.logprob;
    top_logprobs.push_back(top);
    offsets.push_back(*text_offset);
    *text_offset += token.size();
  }
  return Json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs},
              {"text_offset", offsets}};
}

int64_t OpenAiResponseBuilder::completion_tokens() const {
  int64_t completion = 0;
  for (const Choice& c : choices_) completion += c.completion_tokens;
  return completion;
}

Json OpenAiResponseBuilder::UsageJson() const {
  const int64_t completion = completion_tokens();
  return Json{{"prompt_tokens", prompt_tokens_},
              {"completion_tokens", completion},
              {"total_tokens", prompt_tokens_ + completion}};
}

Json OpenAiResponseBuilder::ToolCallJson(const ToolCall& call, int index, bool with_type) {
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

Json OpenAiResponseBuilder::FinishJson(FinishReason finish, int tool_calls) {
  if (finish == FinishReason::kStop && tool_calls > 0) return "tool_calls";
  return FinishReasonJson(finish);
}

Json OpenAiResponseBuilder::ChatDelta(Choice& c, const std::string& text, bool final,
                                      const std::vector<ToolCall>& calls) const {
  Json delta = Json::object();
  ToolStreamDelta d = c.tools->Feed(text, final);
  for (const ToolCall& call : calls) {  // relayed: whole, numbered after the choice's earlier ones
    d.tool_calls.push_back({static_cast<int>(c.relayed_calls.size()), call.id, call.name, call.arguments});
    c.relayed_calls.push_back(call);
  }
  // Without tools every chunk but the last carries "content", even empty (as OpenAI's).
  if (!d.content.empty() || (tool_use_.choice == ToolUse::Choice::kNone && !final)) delta["content"] = d.content;
  if (!d.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCallDelta& t : d.tool_calls) {
      calls.push_back(ToolCallJson({t.id, t.name, t.arguments}, t.index, !t.id.empty()));
    }
    delta["tool_calls"] = calls;
  }
  return delta;
}

Json OpenAiResponseBuilder::ChoiceChunk(const OutputEvent& e, int index, const std::vector<ToolCall>& calls) {
  Choice& c = choices_[index];
  const bool final = e.finish != FinishReason::kNone;
  Json choice = Json{{"index", index}};
  if (endpoint_ == OpenAiEndpoint::kCompletions) {
    choice["text"] = c.sent_first_chunk ? e.text : echo_ + e.text;
  } else {
    choice["delta"] = ChatDelta(c, e.text, final, calls);
    // Text held back by a tool-call parser (or buffered) makes no chunk of its own.
    if (choice["delta"].empty() && !final && !(logprobs_ && !e.logprobs.empty())) return nullptr;
  }
  choice["logprobs"] = logprobs_ ? LogprobsJson(e.logprobs, &c.text_offset) : Json(nullptr);
  choice["finish_reason"] = final ? FinishJson(c.finish, CallCount(c)) : Json(nullptr);
  if (final) choice["stop_reason"] = c.stop_reason;  // vLLM's field
  return choice;
}

std::string OpenAiResponseBuilder::ChunkEvent(const Json& choice) const {
  return absl::StrCat(chunk_prefix_, Dump(choice), "]}\n\n");
}

std::string OpenAiResponseBuilder::Chunks(const OutputEvent& e, int index, const std::vector<ToolCall>& calls) {
  std::string out;
  if (sent_done_) return out;  // a choice failed: the stream ended
  Choice& c = choices_[index];
  Record(e, c);
  if (endpoint_ == OpenAiEndpoint::kChatCompletions && !c.sent_first_chunk && !failed()) {
    absl::StrAppend(&out, ChunkEvent(Json{{"index", index},
                                          {"delta", Json{{"role", "assistant"}, {"content", ""}}},
                                          {"logprobs", nullptr},
                                          {"finish_reason", nullptr}}));
  }
  if (endpoint_ == OpenAiEndpoint::kChatCompletions) c.sent_first_chunk = true;
  const bool has_content = !e.text.empty() || (logprobs_ && !e.logprobs.empty()) ||
                           (!c.sent_first_chunk && !echo_.empty()) || !calls.empty();
  if (has_content || (e.finish != FinishReason::kNone && !failed())) {
    if (Json choice = ChoiceChunk(e, index, calls); !choice.is_null()) absl::StrAppend(&out, ChunkEvent(choice));
  }
  c.sent_first_chunk = true;
  if (failed()) {
    absl::StrAppend(&out, SseEvent(Dump(ErrorJson(failure_))), kSseDone);
    sent_done_ = true;
  } else if (finished()) {
    if (include_usage_) {
      Json chunk = Envelope(/*chunk=*/true);
      chunk["choices"] = Json::array();
      chunk["usage"] = UsageJson();
      absl::StrAppend(&out, SseEvent(Dump(chunk)));
    }
    absl::StrAppend(&out, kSseDone);
    sent_done_ = true;
  }
  return out;
}

void OpenAiResponseBuilder::Accumulate(const OutputEvent& e, int index, const std::vector<ToolCall>& calls) {
  Choice& c = choices_[index];
  Record(e, c);
  c.text += e.text;
  c.relayed_calls.insert(c.relayed_calls.end(), calls.begin(), calls.end());
  if (logprobs_) c.logprobs.insert(c.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
}

Json OpenAiResponseBuilder::BodyChoice(int index) const {
  const Choice& c = choices_[index];
  Json choice = Json{{"index", index}};
  int tool_calls = 0;  // found in the text now
  if (endpoint_ == OpenAiEndpoint::kCompletions) {
    choice["text"] = echo_ + c.text;
  } else {
    // The whole text at once, the calls whole (the same ids as when streamed); relayed: the
    // text is content, the calls came whole.
    ToolStreamDelta d;
    if (relay_) {
      d.content = c.text;
      for (const ToolCall& call : c.relayed_calls) d.tool_calls.push_back({0, call.id, call.name, call.arguments});
    } else {
      d = ChoiceToolCalls(tool_use_, tool_format_, id_, index, ChoiceToolCalls::Delivery::kWhole).Feed(c.text, true);
    }
    Json message = Json{{"role", "assistant"}, {"content", d.content}};
    tool_calls = static_cast<int>(d.tool_calls.size());
    if (!d.tool_calls.empty()) {
      if (d.content.empty()) message["content"] = nullptr;
      Json list = Json::array();
      for (const ToolCallDelta& t : d.tool_calls) list.push_back(ToolCallJson({t.id, t.name, t.arguments}, -1, true));
      message["tool_calls"] = list;
    }
    choice["message"] = message;
  }
  size_t text_offset = 0;
  choice["logprobs"] = logprobs_ ? LogprobsJson(c.logprobs, &text_offset) : Json(nullptr);
  choice["finish_reason"] = FinishJson(c.finish, tool_calls);
  choice["stop_reason"] = c.stop_reason;
  return choice;
}

std::string OpenAiResponseBuilder::Body() const {
  if (failed()) return Dump(ErrorJson(failure_));
  Json choices = Json::array();
  for (int i = 0; i < num_choices(); ++i) choices.push_back(BodyChoice(i));
  Json body = Envelope(/*chunk=*/false);
  body["choices"] = choices;
  body["usage"] = UsageJson();
  return Dump(body);
}

}  // namespace tpserve
