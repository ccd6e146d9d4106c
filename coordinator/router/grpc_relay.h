// One OpenAI request relayed to a grpc:// backend (tpserve's gRPC API, proto/tpserve.proto): the
// client's JSON parsed as `serve` parses it (ParseOpenAiRequest) and sent as a GenerateRequest
// (GenerateRequestFromInput, which refuses what the proto cannot carry); the GenerateResponse
// stream turned back into the OpenAI body or SSE chunks by the HTTP front end's own
// OpenAiResponseBuilder, message by message; the call's final status into what the client
// gets. Pure (no I/O): tests/grpc_relay_test.cc; through the router, tests/router_grpc_test.cc and
// tests/router_grpc_test.sh.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/api/openai_json.h"
#include "coordinator/api/openai_response.h"
#include "proto/tpserve.pb.h"

namespace tpserve {

// The client's body for `endpoint` as a GenerateRequest for the backend's model `model`.
// INVALID_ARGUMENT (naming the field, for a 400) for what `serve` would refuse, and for what
// the gRPC API cannot carry: GenerateRequestFromInput's list, and echo of a token-id prompt
// (the router has no tokenizer to write the prompt's text).
struct GrpcRelayRequest {
  OpenAiRequest openai;
  v1::GenerateRequest proto;
};
absl::StatusOr<GrpcRelayRequest> BuildGrpcRelayRequest(OpenAiEndpoint endpoint, absl::string_view body,
                                                       const std::string& model);

// How a call's end reaches the client.
struct GrpcRelayEnding {
  // Not OK: the backend failed as a server that breaks or cannot be reached does
  // (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED or UNKNOWN from it): the router's failover, or
  // its error event once the stream started. The fields below are then unused.
  absl::Status failure;
  // Otherwise: the HTTP status of a response not started yet (a stream's is 200 from its first
  // message on), and the rest of the body: the whole body, or the stream's last events.
  int http_status = 200;
  std::string body;
  // The answer's token counts (the messages' usage, as the response's usage would report
  // them), where every choice finished without an error.
  std::optional<int64_t> prompt_tokens, completion_tokens;
};

// One call's responses -> the client's. Not copyable or movable (the builder names logprob
// tokens through it).
class GrpcRelay {
 public:
  // `request`: the parsed client request; `model`: the name responses carry (the backend's).
  GrpcRelay(const OpenAiRequest& request, std::string model, int64_t created);
  GrpcRelay(const GrpcRelay&) = delete;
  GrpcRelay& operator=(const GrpcRelay&) = delete;

  bool stream() const { return request_.stream; }
  // One GenerateResponse: streaming, the SSE events it adds (possibly none); otherwise "",
  // the body comes with End.
  std::string OnMessage(const v1::GenerateResponse& response);
  // The call ended with `status` (gRPC's code and message, as an absl::Status).
  GrpcRelayEnding End(const absl::Status& status);
  // A message arrived (a stream's head went out with it).
  bool started() const { return builder_.has_value(); }

 private:
  // The id serve's HTTP front end would give the request: its prefix, then the backend's
  // request id without its "gen-".
  std::string ResponseId(const std::string& backend_request_id) const;
  // Ends the response with `failure` as the builder writes a failed request: an error event
  // (streaming) or an error body.
  GrpcRelayEnding FailResponse(const absl::Status& failure);

  const OpenAiRequest request_;
  const std::string model_;
  const int64_t created_;
  std::optional<OpenAiResponseBuilder> builder_;  // from the first message (its request id)
  std::vector<bool> finished_;                    // by choice
  absl::flat_hash_map<int32_t, std::string> token_text_;  // logprob tokens, as the backend named them
};

}  // namespace tpserve
