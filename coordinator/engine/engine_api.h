// The serving engine as the API front ends (gRPC, OpenAI HTTP) see it: submit a request,
// read its stream, read stats and model info, drain. The real implementation is the
// coordinator loop (coordinator/engine/serving_engine.h); tests use fakes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/engine/request.h"

namespace tpserve {

struct RankInfo {
  int rank = 0;
  std::string host;
};

struct ModelInfo {
  std::string served_model_name;  // what clients put in "model"
  std::string architecture;       // e.g. gemma4
  int64_t parameter_count = 0;
  std::string dtype;              // weight dtype (of the matrices not kept quantized)
  std::string quantization;       // storage dtypes, most bytes first (ModelInfoResponse.quantization)
  std::string weight_formats;     // ModelInfoResponse.weight_formats
  std::string kv_cache_dtype;     // ModelInfoResponse.kv_cache_dtype
  int32_t tensor_parallel_size = 1;
  int32_t pipeline_parallel_size = 1;
  std::string pipeline_stages;  // each stage's layers, e.g. "layers 0-29 | 30-59"
  int32_t pipeline_micro_batches = 1;  // steps in flight at once (SchedulerConfig::max_steps_in_flight)
  std::vector<RankInfo> ranks;
  int64_t max_model_len = 0;
  int32_t block_size = 16;
  std::vector<int64_t> kv_blocks;  // per KV cache group
  std::vector<int64_t> kv_bytes_per_block;  // per KV cache group, rank 0's (Model::KvBytesPerBlock)
  std::string weights;             // source description
  std::string engine_version;     // version and git hash
  std::string device;             // rank 0's device, e.g. "NVIDIA H200" or "CPU: <model>"
  int32_t device_count = 0;       // GPUs across all ranks; 0 on the CPU backend
  std::string driver_version = "none";
  std::string cuda_version = "none";
  int32_t max_num_seqs = 0;
  int32_t max_num_batched_tokens = 0;
  std::string kernels = "cpu";  // see ModelInfoResponse.kernels
  std::string cpu_gemm;         // see ModelInfoResponse.cpu_gemm; "" on cuda
  std::string speculative_config;  // --speculative-config with defaults filled in; "" = off
  int32_t num_speculative_tokens = 0;  // its K; 0 = off
  // Rank 0's process: the weights it holds (all its ranks') and its peak resident set right
  // after load (StatsResponse.weight_bytes, load_peak_rss_bytes).
  int64_t weight_bytes = 0;
  int64_t load_peak_rss_bytes = 0;
};

struct EngineStats {
  int32_t running = 0;
  int32_t waiting = 0;
  double kv_usage = 0;  // fraction of KV blocks in use (the fullest group)
  // Bytes of rank 0's KV cache that blocks ever used cover (ModelInfo::kv_bytes_per_block x
  // distinct blocks touched, summed over groups): what the cache holds resident so far. Free
  // blocks are used before cached ones are evicted, so with prefix caching it grows towards
  // the whole reservation.
  int64_t kv_bytes_touched = 0;
  int64_t preemptions = 0;
  double prefix_cache_hit_rate = 0;  // prefix_cache_hits / prefix_cache_queries
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache, since start
  int64_t prefix_cache_hits = 0;     // of those, tokens found cached
  int64_t prompt_tokens = 0;         // totals since start
  int64_t generation_tokens = 0;
  int64_t requests_finished = 0;
  int64_t steps = 0;
  // Cancels (a client gone, a drain) and stop-string matches the engine applied, and the
  // engine steps completed between each one's arrival and its application: the engine
  // checks for them at every step boundary, so at most 1 each.
  int64_t aborts = 0;
  int64_t abort_delay_steps = 0;      // summed
  int64_t abort_delay_steps_max = 0;  // the most for one request
  // Per-step time split, cumulative milliseconds since start.
  double compute_ms = 0;     // forward pass excluding all-reduce and stage transfers
  double allreduce_ms = 0;
  // Rank 0 blocked on the pipeline stages' transfers: waiting for the last stage's output
  // and for its sends to be taken (with steps in flight, the bubble as stage 0 sees it).
  double pipeline_ms = 0;
  // Every stage's computing (all-reduces included), summed over the stages
  // (StepSummary::stages_busy_ms).
  double stages_busy_ms = 0;
  // Everything else the coordinator thread does while requests are active: admission,
  // scheduling, plan building and broadcast, sampling, detokenizing, stop checks, streaming.
  double scheduling_ms = 0;
  // Speculative decoding's proposing (StepSummary::draft_ms): n-gram lookup on rank 0, or
  // the MTP drafter's pass on every rank. Not in scheduling_ms.
  double draft_ms = 0;
  // Speculative decoding since start (vLLM's spec_decode_* metrics).
  int64_t spec_num_drafts = 0;  // sequence-steps that verified draft tokens
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;  // [i]: drafts whose token i was accepted
};

class EngineApi {
 public:
  virtual ~EngineApi() = default;
  // Thread-safe. INVALID_ARGUMENT (message names the field) for bad parameters or a prompt
  // that does not fit max_model_len; RESOURCE_EXHAUSTED when the waiting queue is full;
  // UNAVAILABLE while loading or draining. On success the stream ends with a finish reason.
  virtual absl::StatusOr<std::shared_ptr<RequestStream>> Submit(ServeRequest request) = 0;
  virtual EngineStats Stats() const = 0;
  virtual const ModelInfo& Info() const = 0;
  virtual bool Ready() const = 0;  // false while loading or draining
  // OK when Ready(); else UNAVAILABLE saying why (/health's body).
  virtual absl::Status Health() const {
    return Ready() ? absl::OkStatus() : absl::UnavailableError("the engine is not ready (loading or draining)");
  }
};

}  // namespace tpserve
