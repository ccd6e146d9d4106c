// `tpserve serve`: rank 0 runs the API front ends (gRPC, OpenAI HTTP) and the coordinator
// loop; every rank, rank 0 included, executes its shard in lockstep. SIGTERM, SIGINT and
// SIGUSR1 (the one mpirun forwards: launch/tpserve-mpirun) drain. Tested by tests/serve_test.sh
// (curl and the gRPC client against a 2-rank server) and tests/serve_signal_test.sh.
#pragma once

#include <signal.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/api/grpc_server_start.h"
#include "coordinator/api/http_transport.h"
#include "launch/engine_setup.h"
#include "launch/ranks.h"
#include "worker/communicator.h"

namespace tpserve {

struct ServeCommandOptions {
  EngineOptions engine;
  ParallelSizes parallel;  // --tensor-parallel-size, --pipeline-parallel-size (launch/ranks.h)
  std::string tokenizer;         // tokenizer.json; default MODEL/tokenizer.json
  // The HTTP server's transport (coordinator/api/http_transport.h): host (the gRPC server's
  // too), port (< 0: no HTTP server), connections open at most, deadlines, I/O threads, the
  // body limit (gRPC's message limit too). main fills it from the flags `router` reads too.
  HttpTransportOptions http;
  int grpc_port = 50051;         // < 0: no gRPC server
  GrpcServerTlsOptions grpc_tls;  // TLS on the gRPC port (--grpc-tls-*); default: plaintext
  // Ports 0: the kernel picks free ones. Both are logged ("tpserve: HTTP listening on
  // HOST:PORT") and, where port_file is set, written there as {"http": P, "grpc": Q} once
  // both listen (launch/port_file.h).
  std::string port_file;
  std::vector<std::string> served_model_names;  // default: the --model argument
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_queue = 1024;
  // With pipeline stages: steps (micro-batches) in flight at once, 1 to the stages; 0: one
  // per stage; 1: the stages run one step at a time (the bubble's baseline).
  int32_t pipeline_micro_batches = 0;
  bool enable_prefix_caching = true;
  double shutdown_timeout_s = 30;
  // The pool that renders and tokenizes requests (coordinator/api/frontend_options.h).
  int render_threads = 2;
  int max_pending_renders = 1024;
  std::optional<uint64_t> seed;  // --seed: seeds of requests without one (a run repeats)
  // Sampling defaults for requests that leave fields unset: auto | vllm | a folder holding
  // generation_config.json (coordinator/engine/generation_defaults.h). Rank 0 reads it.
  std::string generation_config = "auto";
  // --tool-call-parser: a ToolCallFormat name (coordinator/text/tool_calls.h); empty: the chat
  // template's.
  std::string tool_call_parser;
  // --api-key (or TPSERVE_API_KEY, or VLLM_API_KEY: main reads them): with any set, HTTP routes
  // but /health answer 401 and tpserve.v1 calls UNAUTHENTICATED unless the request presents
  // "Bearer K" with K one of them. Never logged.
  std::vector<std::string> api_keys;
};

// The signals on which `serve` drains: SIGTERM, SIGINT, and SIGUSR1, which Open MPI's mpirun
// forwards to every rank (it kills its ranks on SIGTERM/SIGINT and will not forward them).
sigset_t DrainSignals();

// Blocks DrainSignals() in the calling thread. Call it before MPI or anything else starts
// threads, so that every thread inherits the mask and only RunServe's watcher receives them
// (a worker rank must not die of its own signal while rank 0 drains). Threads that libraries
// started before main() do not block them: a handler installed here catches what lands
// there, for the watcher to take.
void BlockDrainSignals();
// A drain signal that BlockDrainSignals' handler caught (delivered to a thread that did not
// block it) since the last call, or 0. A signal watcher polls it beside sigtimedwait.
int TakeStraySignal();

// INVALID_ARGUMENT naming the flag for a value out of range.
absl::Status ValidateServeOptions(const ServeCommandOptions& options);
// The same for the HTTP transport flags `serve` and `router` share (--http-threads,
// --max-connections, --max-body-bytes and the timeouts).
absl::Status ValidateHttpTransportFlags(const HttpTransportOptions& http);

// Runs on every rank; returns the process exit code.
int RunServe(const ServeCommandOptions& options, const WorldConfig& mpi_world);

}  // namespace tpserve
