// tpbench's data model: what one request measured (RequestRecord, one JSON line each)
// and what one run was (RunRecord, run.json). Written by the load runner, read by the
// report. JSON round trips are tested by tests/tpbench_core_test.cc.
#ifndef TPSERVE_BENCH_TPBENCH_RECORD_H_
#define TPSERVE_BENCH_TPBENCH_RECORD_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tpserve::bench {

// What a target observed for one request, client side. Times are milliseconds from the
// moment the request was sent. A "chunk" is one streamed message that carried at least
// one token (an SSE event with text, a gRPC message with token ids).
struct RequestOutcome {
  bool success = false;
  bool timeout = false;        // the per-request timeout fired (success is then false)
  std::string error;           // empty on success: why it failed, for a person to read
  double ttft_ms = -1;         // first chunk; -1 when none arrived
  double latency_ms = 0;       // end to end: sent -> stream finished (or failed)
  std::vector<double> itl_ms;  // gaps between successive chunks (vLLM's ITL)
  int prompt_tokens = -1;      // the server's count (usage); -1 when not reported
  int completion_tokens = 0;   // the server's count when reported, else chunks seen
  std::string finish_reason;   // stop | length | ... as the server said; empty if none
  double server_queue_ms = -1; // server-side queue time when the target reports it
  // The backend that answered, as a router names it (`tpserve router`'s x-tpserve-backend
  // response header); empty when the response named none (a server answering directly).
  std::string backend;
  // The generated output, kept only when the target was asked to (tpbench compare): the text
  // (OpenAI targets) or the token ids (tpserve's gRPC target); nullopt = not kept.
  std::optional<std::string> output_text;
  std::optional<std::vector<int32_t>> output_token_ids;
};

// One request, as written to requests.jsonl.
struct RequestRecord {
  int64_t seq = 0;              // run-wide, in send order
  std::string timestamp;        // send time, RFC 3339 UTC with milliseconds
  double send_time_s = 0;       // send time, seconds since the run started
  std::string target;           // e.g. "grpc://localhost:50051", "http://localhost:8000/v1"
  int concurrency = 0;          // closed-loop level; 0 in open-loop mode
  double request_rate = 0;      // open-loop level in requests/s; 0 in closed-loop mode
  int round = 0;                // 0-based round within the level; -1 for warm-up requests
  int expected_prompt_tokens = -1;  // what the workload asked for, when known
  int max_tokens = 0;
  int prompt_index = -1;        // the workload's prompt this request sent (BenchRequest::seq); -1 unknown
  RequestOutcome outcome;
};

// Server-side counters read before and after a level (tpserve's Stats over gRPC).
struct ServerStepTime {
  bool available = false;
  int64_t steps = 0;            // engine steps during the level
  double compute_ms = 0;        // summed over the level's steps
  double allreduce_ms = 0;
  double scheduling_ms = 0;
  // With pipeline stages: rank 0 blocked on the transfers between stages (waiting for the
  // last stage's output and for its sends to be taken). Like allreduce_ms it is part of
  // rank 0's forward time and not in compute_ms.
  double pipeline_ms = 0;
  // Every stage's computing (all-reduces included), summed over the stages; 0 = not reported.
  double stages_busy_ms = 0;
  int64_t preemptions = 0;
  double prefix_cache_hit_rate = -1;
  int64_t peak_rss_bytes = 0;   // rank 0's process at the level's end; 0 = unknown
  // Speculative decoding during the level: sequence-steps that verified drafts, draft
  // tokens, accepted ones (0 without speculation).
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
};

// One load level of a run: closed-loop concurrency or open-loop rate.
struct LevelRecord {
  int concurrency = 0;
  double request_rate = 0;
  int rounds = 0;
  double start_s = 0, end_s = 0;  // seconds since the run started
  ServerStepTime server;
};

// One run: its environment, its settings and its levels (run.json).
struct RunRecord {
  std::string run_id;
  std::string target;
  std::string api;              // "tpserve-grpc" | "openai-completions" | "openai-chat"
  std::string model;
  std::string weights_source;   // checkpoint directory or "dummy"
  std::string engine_version;   // server's version string, plus git hash where known
  std::string tpbench_version;  // this client's version and git hash
  std::string dtype;            // the model's (activations') dtype
  std::string quantization;     // the weights as held, e.g. "q4_k+q6_k"; "" = unknown
  std::string kv_cache_dtype;   // e.g. "fp32", "fp8_e4m3"; "" = unknown
  std::string driver_version;   // GPU driver, or "none" (CPU), or "unknown"
  std::string cuda_version;
  std::string kernels;          // the server's kernel configuration, e.g. "cuda: tuned+pdl, CUDA graphs"
  std::string speculative_config;  // the server's --speculative-config; "" = none or unknown
  std::string gpu_model;        // or "none (CPU)"
  int gpu_count = 0;
  int nodes = 1;
  int tp_size = 0;
  int pp_size = 0;              // pipeline stages; 0 = unknown (records before pipelines: one)
  std::string pipeline_stages;  // the server's split, e.g. "layers 0-4 | 5"; "" = unknown
  int pipeline_micro_batches = 0;  // steps in flight at once with stages; 0 = unknown
  int64_t max_model_len = 0;
  int max_num_seqs = 0;
  std::string workload;         // e.g. "random in=128 out=64 range=0.0"
  bool ignore_eos = false;
  double load_time_s = -1;      // server start -> healthy, when tpbench started it
  double warmup_ms = -1;        // the first (warm-up) request's end-to-end latency
  std::string start_time, end_time;  // RFC 3339 UTC
  std::vector<LevelRecord> levels;
  std::map<std::string, std::string> extra;  // free-form: hostnames, netem settings, ...
};

nlohmann::json ToJson(const RequestRecord& r);
absl::StatusOr<RequestRecord> RequestRecordFromJson(const nlohmann::json& j);
nlohmann::json ToJson(const RunRecord& r);
absl::StatusOr<RunRecord> RunRecordFromJson(const nlohmann::json& j);

// Reads requests.jsonl; a malformed line is an error naming its line number.
absl::StatusOr<std::vector<RequestRecord>> ReadRequestRecords(const std::string& path);
absl::StatusOr<RunRecord> ReadRunRecord(const std::string& path);

}  // namespace tpserve::bench

#endif  // TPSERVE_BENCH_TPBENCH_RECORD_H_
