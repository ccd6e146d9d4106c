// OpenAiResponseBuilder: OpenAI response bodies and SSE chunks. Tested by
// tests/openai_json_test.cc.
#include "coordinator/api/openai_response.h"

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
                                             int64_t created, const Tokenizer& tokenizer)
    : endpoint_(request.endpoint),
      logprobs_(request.logprobs),
      include_usage_(request.include_usage),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      tokenizer_(tokenizer) {}

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
    choice["delta"] = e.text.empty() && finish != FinishReason::kNone ? Json::object() : Json{{"content", e.text}};
  }
  choice["logprobs"] = logprobs_ ? LogprobsJson(e.logprobs, &text_offset_) : Json(nullptr);
  choice["finish_reason"] = FinishReasonJson(finish);
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
    absl::StrAppend(&out, SseEvent(Dump(ChoiceChunk(e))));
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
    choice["message"] = Json{{"role", "assistant"}, {"content", text_}};
  }
  size_t text_offset = 0;
  choice["logprobs"] = logprobs_ ? LogprobsJson(logprobs_seen_, &text_offset) : Json(nullptr);
  choice["finish_reason"] = FinishReasonJson(finish_);
  Json body = Envelope(/*chunk=*/false);
  body["choices"] = Json::array({choice});
  body["usage"] = UsageJson();
  return Dump(body);
}

}  // namespace tpserve
