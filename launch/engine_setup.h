// Start-up shared by `tpserve generate`, `tpserve serve` and the engine benchmark: resolve
// the model (directory or built-in preset), pick the device (CPU or CUDA) and the
// tensor-parallel communicator, load this rank's shard, agree on the KV cache size across
// ranks. Every failure is agreed on by all ranks, so none is left waiting. Tested by
// tests/model_test.cc, tests/device_choice_test.cc, tests/cli_test.sh and (GPU)
// tests/cuda_engine_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/engine/speculative.h"
#include "launch/device_choice.h"
#include "worker/backend.h"
#include "worker/communicator.h"
#include "worker/gguf_file.h"
#include "worker/model.h"
#include "worker/mtp_drafter.h"
#include "worker/pipeline.h"
#include "worker/weight_source.h"

namespace tpserve {

struct EngineOptions {
  // A checkpoint directory, a GGUF file (or a directory holding one and no config.json), or
  // a built-in preset name.
  std::string model;
  std::string load_format = "auto";  // auto | safetensors | gguf | dummy
  // The GGUF file `model` names, when the command opened it already (OpenGgufModel) for its
  // tokenizer and defaults; null: start-up opens it itself where the model is GGUF.
  std::shared_ptr<const GgufFile> gguf;
  std::string dtype = "auto";        // auto (checkpoint's) | bfloat16 | float16 | float32
  // A GGUF file's block-quantized matrices stay quantized in memory where the backend has
  // kernels for their type (ModelOptions::keep_quantized); true widens them all to `dtype`
  // at load (3-4x the memory of a Q4_K_M file; for A/B runs).
  bool dequantize_weights = false;
  // vLLM's --quantization: "" / "none" (the weights as the model holds them) | "int8": float
  // matrices quantized at load to int8 Q8_0 blocks (an fp16 scale per 32 weights, ~1.06 bytes a
  // weight) | "fp8": to FP8 E4M3 with an fp32 scale per 128 weights (~1.03 bytes a weight,
  // fp32 activations); CPU backend.
  std::string quantization;
  // auto | cpu | cuda. auto: cuda where tpserve is built with CUDA and a GPU is visible.
  // On cuda, the rank with node-local index i runs on GPU i % (GPUs on the node).
  std::string device = "auto";
  int threads = 0;                   // CPU threads per rank; 0 = cores / local ranks
  // CPU: the matmul path, auto | sgemm | onednn-bf16 | amx-bf16 (cpu::ChooseGemmPath): fp32
  // activations, or activations rounded to bf16 for oneDNN's (or, amx-bf16, our own AMX) bf16
  // prefill matmul and AVX512-BF16 decode dot products. auto: onednn-bf16 where the CPU has AMX-BF16 or AVX512-BF16, sgemm elsewhere
  // (on an AVX512-BF16 EPYC: 2.8-3.1x sgemm's prefill, docs/cpu_backend.md).
  std::string cpu_gemm = "auto";
  // CPU: how prefill multiplies block-quantized weights, auto | widen | int8 (cpu::QuantPrefill,
  // chosen with the path by cpu::ChooseGemmPath).
  std::string cpu_quant_prefill = "auto";
  // CPU: weights (not the KV cache) on transparent huge pages (BackendOptions::cpu_huge_pages);
  // where the kernel's THP policy is "never" it has no effect (Engine::cpu_huge_pages says so).
  bool cpu_huge_pages = true;
  int64_t kv_cache_bytes = int64_t{1} << 30;  // per rank, CPU only (on cuda the planner sizes it)
  // vLLM's --kv-cache-dtype: auto (as the activations: fp32 on the CPU, bf16 on cuda) |
  // bfloat16 | fp8 / fp8_e4m3 (FP8 E4M3 with a scale per slot and KV head; CPU only).
  std::string kv_cache_dtype = "auto";
  // cuda: the fraction of each GPU's memory that the ranks on it may hold in all (weights,
  // activations, KV cache), in (0, 1]; the KV cache gets what the rest leaves.
  double gpu_memory_utilization = 0.9;
  int64_t max_model_len = 0;         // 0 = the model's max_position_embeddings
  int32_t block_size = 16;
  int32_t max_num_batched_tokens = 2048;  // the scheduler's tokens per step (sizes sliding KV groups)
  // Sequences per step at most; on cuda with max_num_batched_tokens it sizes the warm-up
  // step whose activations the KV planning leaves room for.
  int32_t max_num_seqs = 256;
  // true: the KV budget is split between KV groups by what max-length sequences need
  // (SplitKvBlocks; the scheduler frees blocks that left a sliding window). false: every
  // group gets the same number of blocks (benchmarks whose hand-made plans assume it).
  bool split_kv_by_need = true;
  uint64_t dummy_seed = 0;
  // --speculative-config (coordinator/engine/speculative.h): off by default.
  SpeculativeConfig speculative;
  // cuda: decode steps replay CUDA graphs of these batch sizes (empty: the default,
  // DefaultCudaGraphBatchSizes(max_num_seqs)); sizes above max_num_batched_tokens are
  // dropped. Captured at start-up before the KV cache is sized (their memory is measured),
  // then again on first use over the real KV cache. No effect on the CPU.
  std::vector<int32_t> cuda_graph_batch_sizes;
  // --enforce-eager: no CUDA graphs, every step eager. On by default until the graph path
  // has run on a GPU (written 2026-11-30 when no GPU was left to run it; docs/gpu_backend.md):
  // --enforce-eager=false captures.
  bool enforce_eager = true;
  // cuda: kernel choices (engine_bench --kernels compares them on one engine). The
  // defaults until the others are measured on a GPU (written 2026-11-30 without one).
  KernelOptions kernels;
  // cuda: measure the kernel candidates for every weight's products at start-up
  // (Model::TuneKernels, after loading, before the KV cache is planned) even where
  // kernels.tuned is off, so that a benchmark can switch to the tuned kernels later.
  // kernels.tuned always tunes.
  bool tune_kernels = false;
  // A decorator put around the backend as soon as it exists (engine_bench --op_profile).
  // On cuda at TP > 1 the device communicators need the CUDA backend itself: TP 1 only.
  std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)> wrap_backend;
};

// The CUDA graph batch sizes the engine captures for these options on `device` (empty:
// none, e.g. on the CPU or with enforce_eager). Pure; tested by tests/decode_graphs_test.cc.
std::vector<int32_t> EngineCudaGraphBatchSizes(const EngineOptions& options, DeviceKind device);

// --kv-cache-dtype (auto | bfloat16 | fp8 | fp8_e4m3) on `device`: how the model's KV cache holds
// K and V; INVALID_ARGUMENT for a value not implemented there (fp8 on cuda, fp8_e5m2).
absl::StatusOr<cpu::KvCacheDType> KvCacheDTypeFor(const std::string& spec, DeviceKind device);

// One rank's host memory at start-up (issue 21: a loaded rank holds its weights once).
// Ranks that are threads of one process (--tensor-parallel-size without mpirun) see the same
// process numbers, compared with the weights of all of them (process_weight_bytes).
struct RankMemory {
  int64_t weight_bytes = 0;               // the rank's weights in backend memory (model + drafter)
  int64_t process_weight_bytes = 0;       // the weights of every rank in this rank's process
  int64_t rss_before_load_bytes = 0;      // the process's resident set when StartEngine began
  int64_t peak_rss_after_load_bytes = 0;  // its peak resident set (VmHWM) when StartEngine returned
  uint64_t process_key = 0;               // equal for ranks in one process: node name hash ^ pid
};

struct Engine {
  ModelConfig config;
  std::unique_ptr<WeightSource> source;
  std::unique_ptr<Backend> backend;
  // With pipeline stages (world.pp_size > 1): this rank's stage, its tensor-parallel group
  // (split from the caller's world communicator, which carries the stage-to-stage
  // transfers), and every stage's first layer (pp_size + 1 bounds).
  PipelineStage stage;
  std::vector<int32_t> stage_bounds;
  std::unique_ptr<Communicator> stage_comm;
  // The communicator the model's collectives use when it is not the caller's: NCCL or the
  // staged one on cuda with tp > 1 (it passes host buffers on to the caller's, so step
  // plans may still go through either). Declared between backend and model: it uses the
  // backend's stream and the model uses it.
  std::unique_ptr<Communicator> device_comm;
  std::unique_ptr<Model> model;
  // With --speculative-config {"method": "mtp", ...}: the MTP drafter beside the model, on
  // the same backend and communicator (null otherwise). Declared after the model: it reads
  // the model's embedding and KV cache.
  std::unique_ptr<MtpDrafter> drafter;
  std::string weights_description;
  double load_seconds = 0;

  DeviceKind device = DeviceKind::kCpu;
  TpCommKind tp_comm = TpCommKind::kHost;
  int gpu = -1;          // cuda: this rank's device ordinal
  int gpus_in_use = 0;   // cuda: distinct GPUs all ranks use together; 0 on the CPU
  int64_t kv_budget_bytes = 0;  // this rank's KV cache budget before the split between groups
  std::vector<RankMemory> rank_memory;  // every rank's, in rank order (on every rank)
  TuneReport tune_report;       // cuda: what start-up's kernel tuning measured on this rank
  cpu::GemmChoice cpu_gemm;     // cpu: the matmul path and why; description "" on cuda
  std::string cpu_huge_pages;   // cpu: whether large buffers are on huge pages and why (DescribeHugePages); "" on cuda
  std::string cpu_threads_note;  // cpu: why the threads differ from the default (ChooseCpuThreads); usually ""
  // How the KV cache holds K and V, for ModelInfo and records: "fp32", "bf16" or "fp8_e4m3"
  // (ModelOptions::kv_cache_dtype), and the start-up log's line on what it bought.
  std::string kv_cache_dtype;
  std::string kv_cache_note;
};

// One line on start-up's kernel tuning ("" where it did not run): how many products were
// timed, in what time, how many did not keep the default.
std::string DescribeTuning(const TuneReport& r);

// One line on the ranks' memory after load: weights, peak resident set and their ratio, e.g.
// "rank 0: weights 2357 MiB, peak RSS after load 2407 MiB (1.02x; 29 MiB before load)"; ranks
// that share a process are one entry ("ranks 0-1 (one process): ..."). On a GPU the weights
// are device memory and the resident set is the host's part alone: no ratio.
std::string DescribeLoadMemory(const Engine& e);

// Resolves config (from DIR/config.json or a preset). Pure: no collectives.
absl::StatusOr<ModelConfig> ResolveModelConfig(const EngineOptions& options);

// Loads the engine on this rank. Collective: every rank must call it; all ranks return the
// same error when any rank fails. `comm` is the world (world.tp_size x world.pp_size ranks);
// with pipeline stages each stage's tensor-parallel group is split from it.
absl::StatusOr<Engine> StartEngine(const EngineOptions& options, const WorldConfig& world, Communicator& comm);
// The same for a config resolved (and perhaps adjusted, as benchmarks do) by the caller.
absl::StatusOr<Engine> StartEngine(const ModelConfig& config, const EngineOptions& options, const WorldConfig& world,
                                   Communicator& comm);

// The forward step that start-up runs once on a GPU before planning the KV cache, so that
// scratch and attention workspaces have their largest size (`tokens` prompt tokens,
// `logit_rows` of them sampled) when free memory is measured. Sequences of at most
// `max_len` tokens, each in blocks of its own; needs `blocks` KV blocks in every group.
struct WarmupStep {
  StepPlan plan;
  int64_t blocks = 0;
};
WarmupStep MakeWarmupStep(int64_t tokens, int64_t max_len, int32_t block_size, size_t kv_groups, int64_t logit_rows);

// Parses "1073741824", "512MiB", "2GiB", "1.5GB", "64K".
absl::StatusOr<int64_t> ParseByteSize(const std::string& text);

}  // namespace tpserve
