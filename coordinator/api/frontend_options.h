// What the gRPC and the HTTP front ends share, as one block: `serve` fills it once and hands
// the same block to both (launch/serve_command.cc), so that the served names, the render
// budget, the metrics, the sampling defaults, the tool-call syntax and the API keys cannot
// differ between them. Tested through tests/frontend_test.cc (both servers on one block).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/api/frontend_metrics.h"
#include "coordinator/api/task_pool.h"
#include "coordinator/engine/generation_defaults.h"
#include "coordinator/text/tool_calls.h"

namespace tpserve {

struct FrontendOptions {
  // Names clients may put in "model"; the first is the default and the one responses name.
  // Empty: the engine's Info().served_model_name.
  std::vector<std::string> served_model_names;
  // Where requests are parsed, rendered (chat template) and tokenized before submission, and
  // how many may wait (one more is refused: 429 / RESOURCE_EXHAUSTED). One pool for both front
  // ends is one budget; null: each server makes its own of render_threads threads and
  // max_pending_renders waiting requests.
  std::shared_ptr<TaskPool> render_pool;
  int render_threads = 2;
  int max_pending_renders = 1024;
  // Where request latencies are recorded; the HTTP server's /metrics reads them. Null: the
  // HTTP server keeps its own, gRPC records none. Must outlive the servers.
  FrontendMetrics* metrics = nullptr;
  // What requests that leave a sampling field unset get (--generation-config); empty: the
  // neutral SamplingParams defaults.
  GenerationDefaults generation_defaults;
  // How the model writes tool calls (vLLM's --tool-call-parser); unset: read off the chat
  // template (DetectToolCallFormat). Chat requests with tools and tool_choice "auto" need one
  // other than kNone.
  std::optional<ToolCallFormat> tool_call_parser;
  // --api-key: requests need "Authorization: Bearer K" (HTTP; gRPC metadata "authorization")
  // with K one of these, else 401 / UNAUTHENTICATED. HTTP /health, grpc.health.v1 and server
  // reflection stay open. Empty: no key needed.
  std::vector<std::string> api_keys;
};

}  // namespace tpserve
