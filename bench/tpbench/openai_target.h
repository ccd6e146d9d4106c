// Any OpenAI-compatible HTTP(S) endpoint (tpserve, vLLM, Groq) as a tpbench target: streams
// /completions or /chat/completions over libcurl and times the Server-Sent Events. Records
// the backend a router names in its x-tpserve-backend response header.
// Tested by tests/tpbench_http_test.cc against an in-process cpp-httplib server.
#ifndef TPSERVE_BENCH_TPBENCH_OPENAI_TARGET_H_
#define TPSERVE_BENCH_TPBENCH_OPENAI_TARGET_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "bench/tpbench/target.h"

namespace tpserve::bench {

struct OpenAiTargetOptions {
  // e.g. "http://localhost:8000/v1" or "https://api.groq.com/openai/v1"; a trailing '/' is
  // dropped. Must be http:// or https://.
  std::string base_url;
  // true: POST {base}/chat/completions with one user message; false: {base}/completions.
  bool chat = false;
  // The "model" field, sent only when non-empty (for servers with a default model).
  std::string model;
  // Sent as "Authorization: Bearer <api_key>" when non-empty. The caller reads it (e.g.
  // from an environment variable in main); it never appears in errors.
  std::string api_key;
  // Keep connections open between requests (an idle libcurl handle per finished request),
  // as vLLM's client and real applications do, so that TTFT does not include a TCP (and
  // TLS) handshake per request. false: a new connection every request.
  bool reuse_connections = true;
  // Completions API: send the prompt as an array of token ids when the request has them
  // (vLLM and tpserve accept this; many hosted APIs do not).
  bool send_token_ids = true;
  // stream_options.include_usage: the server's own token counts in the last chunk.
  bool include_usage = true;
  // Keep each response's generated text (RequestOutcome::output_text), for tpbench compare's
  // output agreement; off for load runs, whose records stay small.
  bool capture_output = false;
};

// Fails with InvalidArgument when base_url is not an http(s) URL with a host.
absl::StatusOr<std::unique_ptr<Target>> MakeOpenAiTarget(OpenAiTargetOptions options);

}  // namespace tpserve::bench

#endif  // TPSERVE_BENCH_TPBENCH_OPENAI_TARGET_H_
