// A benchmark target: something that takes one generation request and streams tokens
// back (tpserve over gRPC, any OpenAI-compatible HTTP endpoint). Every target times the
// stream the same way, with StreamClock, client side.
#ifndef TPSERVE_BENCH_TPBENCH_TARGET_H_
#define TPSERVE_BENCH_TPBENCH_TARGET_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/tpbench/record.h"

namespace tpserve::bench {

struct BenchRequest {
  int64_t seq = 0;
  std::string text;                 // the prompt (the user message for chat APIs)
  std::vector<int32_t> token_ids;   // when set and the target AcceptsTokenIds(), sent instead of text
  int max_tokens = 16;
  bool ignore_eos = false;          // sent only when true (not every server knows it)
  std::optional<float> temperature; // unset: the server's default
  int expected_prompt_tokens = -1;
};

// What the server says about itself, where it can (tpserve's ModelInfo); otherwise empty.
struct ServerInfo {
  std::string model;
  std::string engine_version;
  std::string dtype;
  std::string weights;
  // How the weights are held, e.g. "q4_k+q6_k" (a Q4_K_M GGUF kept quantized) or "bfloat16",
  // and the KV cache's storage ("fp32", "bf16", "fp8_e4m3"; vLLM's cache_dtype, e.g. "auto",
  // "fp8"); empty where the server does not say.
  std::string quantization;
  std::string kv_cache_dtype;
  int tp_size = 0;
  int pp_size = 0;                 // pipeline stages; 0 = the server did not say (one stage)
  std::string pipeline_stages;     // each stage's layers, e.g. "layers 0-4 | 5"
  int pipeline_micro_batches = 0;  // steps in flight with stages; 0 = the server did not say
  int64_t max_model_len = 0;
  std::vector<std::string> hosts;  // one per rank
  std::string device;              // e.g. "NVIDIA H200", "CPU: <model>"
  int device_count = 0;            // GPUs across ranks
  std::string driver_version, cuda_version;
  int max_num_seqs = 0;
  std::string kernels;  // e.g. "cuda: tuned+pdl, CUDA graphs"
  std::string speculative_config;  // the server's --speculative-config; "" = none
};

// Cumulative server counters (tpserve's Stats); LevelRecord keeps the difference.
struct ServerCounters {
  int64_t steps = 0;
  double compute_ms = 0, allreduce_ms = 0, scheduling_ms = 0;
  double pipeline_ms = 0;  // rank 0 blocked on the transfers between pipeline stages
  double stages_busy_ms = 0;  // every stage's computing, summed over the stages
  int64_t preemptions = 0;
  double prefix_cache_hit_rate = 0;
  int64_t peak_rss_bytes = 0;  // rank 0's process
  // Speculative decoding: sequence-steps that verified drafts, draft tokens, accepted ones.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
};

class Target {
 public:
  virtual ~Target() = default;
  virtual std::string Name() const = 0;  // e.g. "grpc://localhost:50051"
  virtual bool AcceptsTokenIds() const = 0;
  // Thread-safe: called from many threads at once. Never throws; every failure (refused
  // connection, HTTP error, malformed stream, stall past `timeout`) is an outcome with
  // success = false and a reason in `error`.
  virtual RequestOutcome Send(const BenchRequest& request, absl::Duration timeout) = 0;
  // UNIMPLEMENTED where the target cannot tell.
  virtual absl::StatusOr<ServerInfo> Info() { return absl::UnimplementedError("no model info"); }
  virtual absl::StatusOr<ServerCounters> Counters() { return absl::UnimplementedError("no server stats"); }
};

// Times one stream: construct just before sending, call OnChunk for every message that
// carries tokens, Finish once the stream ended (successfully or not).
class StreamClock {
 public:
  StreamClock() : start_(std::chrono::steady_clock::now()), last_(start_) {}
  void OnChunk(int tokens) {
    if (tokens <= 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (chunks_ == 0) {
      ttft_ms_ = Ms(now - start_);
    } else {
      itl_ms_.push_back(Ms(now - last_));
    }
    last_ = now;
    ++chunks_;
    tokens_ += tokens;
  }
  int tokens_seen() const { return tokens_; }
  // Fills latency, TTFT and ITL; completion_tokens becomes the tokens seen unless the
  // server already reported a count (> 0).
  void Finish(RequestOutcome* out) const {
    out->latency_ms = Ms(std::chrono::steady_clock::now() - start_);
    out->ttft_ms = chunks_ > 0 ? ttft_ms_ : -1;
    out->itl_ms = itl_ms_;
    if (out->completion_tokens <= 0) out->completion_tokens = tokens_;
  }

 private:
  static double Ms(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  }
  std::chrono::steady_clock::time_point start_, last_;
  double ttft_ms_ = -1;
  std::vector<double> itl_ms_;
  int chunks_ = 0, tokens_ = 0;
};

}  // namespace tpserve::bench

#endif  // TPSERVE_BENCH_TPBENCH_TARGET_H_
