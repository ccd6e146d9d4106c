// `tpserve client`: one request over gRPC or HTTP, text printed as it streams, then TTFT and
// tokens/s; the first smoke test after `tpserve serve`. Tested by tests/frontend_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tpserve {

struct ClientCommandOptions {
  std::string grpc_target;  // host:port; exactly one of grpc_target and http_url
  // gRPC over TLS (--grpc-tls): the server's certificate verified against grpc_tls_ca_file (PEM)
  // where set, else gRPC's default roots. A client certificate (grpc_tls_cert_file and its
  // grpc_tls_key_file) for a server that verifies clients (--grpc-tls-client-ca-file); empty:
  // none.
  bool grpc_tls = false;
  std::string grpc_tls_ca_file;
  std::string grpc_tls_cert_file;
  std::string grpc_tls_key_file;
  std::string http_url;     // e.g. http://127.0.0.1:8000 (a trailing /v1 is accepted)
  std::string model;        // a served model name; empty: the server's default
  std::string prompt;
  bool chat = false;  // send the prompt as one user message (the chat template applies)
  int32_t max_tokens = 16;
  std::optional<float> temperature;  // unset: the server's default
  std::string api_key;  // sent as "Authorization: Bearer <api_key>" (gRPC: metadata); empty: none
  absl::Duration timeout = absl::Minutes(10);
};

struct ClientResult {
  std::string text;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  std::string finish_reason;
  double ttft_ms = 0;        // request sent -> first token, as the client sees it
  double total_ms = 0;       // request sent -> last byte
  double decode_tokens_per_s = 0;  // tokens after the first / time after the first
  std::string server_timings;      // gRPC only: the server's own split
};

// Sends the request, writing text to `text_out` as it arrives. Errors carry the server's
// status and message (INVALID_ARGUMENT for bad options; HTTP 401: UNAUTHENTICATED).
absl::StatusOr<ClientResult> RunClientRequest(const ClientCommandOptions& options, std::ostream& text_out);

// The command: text to stdout, the summary to stderr. Returns the exit code (0 ok,
// 1 the request failed, 2 bad options).
int RunClient(const ClientCommandOptions& options);

}  // namespace tpserve
