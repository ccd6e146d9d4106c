// GrpcRelay: OpenAI JSON <-> tpserve.v1 for a grpc:// backend. Tested by tests/grpc_relay_test.cc.
#include "coordinator/router/grpc_relay.h"

#include <algorithm>
#include <utility>
#include <variant>

#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "coordinator/api/generate_proto.h"
#include "coordinator/engine/field_error.h"
#include "coordinator/router/grpc_generate_call.h"

namespace tpserve {
namespace {

FinishReason FromProto(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_STOP:
    case v1::FINISH_REASON_TOOL_CALLS:  // the builder says "tool_calls" for a stop with calls
      return FinishReason::kStop;
    case v1::FINISH_REASON_LENGTH:
      return FinishReason::kLength;
    default:
      return FinishReason::kNone;
  }
}

}  // namespace

absl::StatusOr<GrpcRelayRequest> BuildGrpcRelayRequest(OpenAiEndpoint endpoint, absl::string_view body,
                                                       const std::string& model) {
  absl::StatusOr<OpenAiRequest> openai = ParseOpenAiRequest(endpoint, body);
  if (!openai.ok()) return openai.status();
  if (openai->echo && !std::holds_alternative<std::string>(openai->input.prompt)) {
    return FieldError("echo", "'echo' of a token-id prompt cannot be relayed to a gRPC backend (the router has no "
                              "tokenizer to write the prompt's text); send the prompt as text, or route the model to "
                              "an http:// backend");
  }
  openai->input.model = model;
  absl::StatusOr<v1::GenerateRequest> proto = GenerateRequestFromInput(openai->input);
  if (!proto.ok()) return proto.status();
  return GrpcRelayRequest{*std::move(openai), *std::move(proto)};
}

GrpcRelay::GrpcRelay(const OpenAiRequest& request, std::string model, int64_t created)
    : request_(request),
      model_(std::move(model)),
      created_(created),
      finished_(static_cast<size_t>(std::max(1, request.input.n)), false) {}

std::string GrpcRelay::ResponseId(const std::string& backend_request_id) const {
  absl::string_view suffix = backend_request_id;
  absl::ConsumePrefix(&suffix, "gen-");
  return absl::StrCat(request_.endpoint == OpenAiEndpoint::kCompletions ? "cmpl-" : "chatcmpl-", suffix);
}

std::string GrpcRelay::OnMessage(const v1::GenerateResponse& response) {
  if (!builder_.has_value()) {
    builder_.emplace(OpenAiResponseBuilder::ForRelay(request_, ResponseId(response.request_id()), model_, created_,
                                                     [this](int32_t id) {
                                                       auto it = token_text_.find(id);
                                                       return it == token_text_.end() ? std::string() : it->second;
                                                     }));
    if (request_.echo) builder_->SetEcho(std::get<std::string>(request_.input.prompt));
  }
  const int index = response.index();
  if (index < 0 || index >= static_cast<int>(finished_.size()) || builder_->finished()) return "";
  OutputEvent e;
  e.token_ids.assign(response.token_ids().begin(), response.token_ids().end());
  e.text = response.text();
  for (const v1::TokenLogprob& lp : response.logprobs()) {
    token_text_.try_emplace(lp.token_id(), lp.token());
    TokenLogprob out;
    out.token_id = lp.token_id();
    out.logprob = lp.logprob();
    for (const v1::TopLogprob& top : lp.top()) {
      token_text_.try_emplace(top.token_id(), top.token());
      out.top.emplace_back(top.token_id(), top.logprob());
    }
    e.logprobs.push_back(std::move(out));
  }
  e.finish = FromProto(response.finish_reason());
  e.stop_string = response.stop_string();
  e.stop_token_id = response.has_stop_token_id() ? response.stop_token_id() : -1;
  e.prompt_tokens = response.usage().prompt_tokens();
  e.completion_tokens = response.usage().completion_tokens();
  std::vector<ToolCall> calls;
  for (const v1::ToolCall& call : response.tool_calls()) calls.push_back({call.id(), call.name(), call.arguments()});
  if (e.finish != FinishReason::kNone) finished_[index] = true;
  if (!request_.stream) {
    builder_->Accumulate(e, index, calls);
    return "";
  }
  return builder_->Chunks(e, index, calls);
}

GrpcRelayEnding GrpcRelay::FailResponse(const absl::Status& failure) {
  // The failure as the engine's own for an unfinished choice: the builder then writes it as
  // serve's HTTP front end writes a request the engine failed.
  size_t index = 0;
  while (index + 1 < finished_.size() && finished_[index]) ++index;
  OutputEvent e;
  e.finish = FinishReason::kError;
  e.error = std::string(failure.message());
  e.error_code = failure.code();
  GrpcRelayEnding out;
  if (request_.stream) {
    out.body = builder_->Chunks(e, static_cast<int>(index));
    return out;
  }
  builder_->Accumulate(e, static_cast<int>(index));
  out.http_status = ToHttpError(builder_->status()).status;
  out.body = builder_->Body();
  return out;
}

GrpcRelayEnding GrpcRelay::End(const absl::Status& status) {
  GrpcRelayEnding out;
  if (!status.ok() && GrpcBackendBroke(status.code())) {
    out.failure = status;
    return out;
  }
  if (!builder_.has_value()) {
    if (status.ok()) {
      out.failure = absl::UnavailableError("the backend ended the call without a response");
      return out;
    }
    // Refused before anything was generated: the HTTP error serve would answer (400, 401,
    // 404, 429, 500; the router fails over on the last and moves on at a 429).
    HttpError e = ToHttpError(status);
    out.http_status = e.status;
    out.body = std::move(e.body);
    return out;
  }
  if (!status.ok()) return FailResponse(status);
  if (!builder_->finished()) {
    out.failure = absl::UnavailableError("the backend ended the call before every choice finished");
    return out;
  }
  if (builder_->status().ok()) {
    out.prompt_tokens = builder_->prompt_tokens();
    out.completion_tokens = builder_->completion_tokens();
  }
  if (!request_.stream) {
    out.http_status = builder_->status().ok() ? 200 : ToHttpError(builder_->status()).status;
    out.body = builder_->Body();
  }
  return out;
}

}  // namespace tpserve
