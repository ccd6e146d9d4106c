// The decoder-only transformer (Llama, Qwen2/3, Gemma 3, Gemma 4) as one rank's shard:
// loads its slices, owns its paged KV cache, and runs a StepPlan. The model file reads
// like the math; sharding lives in worker/layers.h. Tested by tests/model_test.cc against
// transformers' logits at TP = 1, 2, 4.
#pragma once

#include <cstdint>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend.h"
#include "worker/communicator.h"
#include "worker/decode_graphs.h"
#include "worker/layers.h"
#include "worker/model_config.h"
#include "worker/pipeline.h"
#include "worker/step.h"
#include "worker/weight_source.h"

namespace tpserve {

struct ModelOptions {
  // Dtype of weight matrices on the device; nullopt = the checkpoint's torch_dtype.
  std::optional<DType> weight_dtype;
  // Keep a GGUF file's block-quantized matrices as they are stored where the backend has
  // kernels for their type (LoadContext::keep_quantized); false: widen all to weight_dtype.
  bool keep_quantized = true;
  int32_t block_size = 16;  // KV cache block size in tokens
  // How the KV cache holds K and V (--kv-cache-dtype): kF32 = as the activations (fp32 on the
  // CPU, bf16 on CUDA); kBf16 / kFp8E4M3 where the backend supports them (the CPU), on every
  // layer. See cpu::KvCacheDType.
  cpu::KvCacheDType kv_cache_dtype = cpu::KvCacheDType::kF32;
  // CUDA graphs for decode steps: the batch sizes to capture (empty: every step eager).
  // Used where the backend captures (CUDA) and the collectives can be captured (one rank,
  // or NCCL); elsewhere, e.g. ranks sharing a GPU through the staged communicator, every
  // step runs eagerly.
  std::vector<int32_t> cuda_graph_batch_sizes;
  // Longest sequence in tokens (0: the config's max_position_embeddings). Replayed steps
  // upload block tables ceil(max_model_len / block_size) wide.
  int32_t max_model_len = 0;
  // The MLP of a step runs over at most this many tokens at a time (0: the whole step at
  // once). Its gate_up and activation buffers are the largest of a prefill step's (at 512
  // tokens of a Gemma 4 1B: 48 MiB, a fifth of what the CPU holds above its weights); in
  // chunks they take chunk / step of that, and the down projection's all-reduce still runs
  // once over the whole step. The CPU sets it (EngineOptions), where host memory is the
  // budget and GEMMs of 128 rows are as fast per row; a GPU runs whole steps.
  int32_t mlp_chunk_tokens = 0;
  // The chunk used instead where some kept block-quantized weights are widened by the
  // prefill's GEMMs (Backend::PrefillWidens; 0: mlp_chunk_tokens): each chunk's GEMMs widen the
  // MLP's blocks again (kernels/cpu/linear.cc), so small chunks repeat that work; the CPU sets
  // 512. The int8 prefill (cpu::QuantPrefill::kInt8) reads the blocks as stored: mlp_chunk_tokens.
  int32_t quantized_mlp_chunk_tokens = 0;
  // This rank's pipeline stage (worker/pipeline.h); one stage (the default) holds every
  // layer. With several, Load needs the world communicator for the stage-to-stage
  // transfers, and CUDA graphs are off (a graph cannot hold them).
  PipelineStage pipeline;
};

struct StepTimes {
  double total_us = 0;
  // Time in the all-reduces (waiting for peers included): on the host the calls' wall time,
  // on a GPU the stream's time between events around them (Backend::MakeSpanTimer). 0 for
  // a step replayed from a CUDA graph (its collectives are inside the graph).
  double allreduce_us = 0;
  // The step's output stage (DownloadOutput, part of total_us): the logit rows to rank 0
  // and their sampling. On a CPU rank 0, or with logit edits, that is the host's copy of
  // the rows, cpu::ApplyLogitEdits and cpu::SampleRows; on a GPU it also waits for the
  // forward's kernels.
  double output_us = 0;
  // With pipeline stages, part of total_us: this rank blocked on the stage-to-stage
  // transfers: waiting for the previous stage's hidden states or, on rank 0, for the last
  // stage's output (the later stages' computing included: with one step in flight that is
  // the pipeline's bubble as stage 0 sees it), and for its sends to be taken.
  double pipeline_us = 0;
  // With pipeline stages, on rank 0 once the step's output is in: every stage's time
  // computing this step (its all-reduces included) and in all-reduce, summed over the
  // stages (the later ones report theirs with the output). Over a run, 1 - stages_busy /
  // (stages x wall time) is the pipeline's bubble.
  double stages_busy_us = 0;
  double stages_allreduce_us = 0;
};

// How one layer's heads split across ranks: this rank's query heads, and the KV heads it
// holds (replicated when ranks outnumber KV heads).
struct HeadShard {
  int32_t q_heads = 0, q_head0 = 0;
  int32_t kv_heads = 0, kv_head0 = 0;
};
// Validates that the split divides evenly; the error names the field and the tp size.
absl::StatusOr<HeadShard> ShardHeads(int32_t num_heads, int32_t num_kv_heads, int rank, int tp, int layer);
absl::Status ValidateTensorParallel(const ModelConfig& c, int tp);

class Model {
 public:
  // `comm`: this rank's tensor-parallel group (its pipeline stage's ranks). `world`: every
  // rank, stage s's tp rank t being world rank s * comm.size() + t; needed (and only used)
  // with several pipeline stages.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const ModelConfig& config, const WeightSource& source,
                                                     Backend& backend, Communicator& comm,
                                                     const ModelOptions& options, Communicator* world = nullptr);
  ~Model();

  // Bytes one block of KV group g takes on this rank (all of the group's layers it holds:
  // 0 for a group none of its stage's layers is in), per group.
  std::vector<int64_t> KvBytesPerBlock() const { return KvBytesPerBlock(options_.kv_cache_dtype); }
  // The same for a cache held as `t` (what another --kv-cache-dtype would take).
  std::vector<int64_t> KvBytesPerBlock(cpu::KvCacheDType t) const;
  // (Re)allocates the paged KV cache: num_blocks[g] blocks for group g.
  absl::Status AllocateKvCache(const std::vector<int64_t>& num_blocks);
  // The same number of blocks for every group.
  absl::Status AllocateKvCache(int64_t num_blocks);
  // Frees the KV cache (Forward needs AllocateKvCache again).
  void FreeKvCache();
  // Grows the step inputs and activations for steps of up to `tokens` tokens and
  // `logit_rows` logit rows now (they never shrink), so a failure is an error here rather
  // than inside a step's collectives.
  absl::Status ReserveScratch(int64_t tokens, int64_t logit_rows) { return EnsureScratch(tokens, logit_rows); }
  const std::vector<int64_t>& num_kv_blocks() const { return num_blocks_; }
  int64_t weight_bytes() const { return weight_bytes_; }  // this rank's
  DType weight_dtype() const { return weight_dtype_; }
  // This rank's matrices by storage dtype (what stayed quantized, what was widened and why).
  const WeightFormats& weight_formats() const { return weight_formats_; }

  // Runs one step on every rank (all ranks call it with the same plan). Rank 0 gets the
  // logits [plan.logit_rows.size(), vocab] in fp32, or, when the plan has sampling rows,
  // one sampled token id per logit row; other ranks get an empty output. With pipeline
  // stages, each stage runs its layers on the hidden states the previous one sends, and
  // the last stage sends its output to rank 0. With CUDA graphs
  // on, a decode step of at most the largest captured batch size is padded to a captured
  // size and replayed (the first step of a size runs eagerly, the second captures it);
  // prefill and mixed steps run eagerly.
  absl::StatusOr<StepOutput> Forward(const StepPlan& plan, StepTimes* times);
  // With pipeline stages, rank 0's Forward in two halves, so that several steps are in
  // flight (StepExecutor::Submit): StartForward runs this stage's layers and passes the
  // hidden states on without waiting for the next stage; FinishForward, called once per
  // started plan in the order started (the same plan), waits for that step's output from
  // the last stage. The other ranks run Forward for every step, in the same order.
  absl::Status StartForward(const StepPlan& plan, StepTimes* times);
  absl::StatusOr<StepOutput> FinishForward(const StepPlan& plan, StepTimes* times);

  // Whether decode steps replay CUDA graphs (see ModelOptions::cuda_graph_batch_sizes).
  bool cuda_graphs() const { return graphs_ != nullptr && graphs_enabled_.load(); }
  // Turns replays off and on again (every rank alike, between steps), so that a benchmark
  // can compare eager decode on the same engine. No effect without graphs.
  void set_cuda_graphs_enabled(bool on) { graphs_enabled_.store(on); }
  // Switches the backend's kernels (Backend::SetKernelOptions) before this rank's next
  // step, dropping captured graphs (they hold the old kernels), so that a benchmark can
  // compare kernels on one engine. Any thread; every rank alike, between steps.
  void set_kernel_options(const KernelOptions& k);
  // Times the backend's kernel candidates for every weight's products and every layer's
  // attention and keeps the fastest (Backend::TuneKernels; used while KernelOptions::tuned
  // is set): the layers' projections and prefill attention at up to `max_tokens` rows, the
  // LM head at up to `max_logit_rows`. This rank only; drops captured graphs. It allocates
  // temporaries, so call it before the KV cache is planned.
  absl::StatusOr<TuneReport> TuneKernels(int64_t max_tokens, int64_t max_logit_rows);
  // Forward steps replayed from (or captured into) a graph so far.
  int64_t replayed_steps() const { return replayed_steps_; }
  // Reserves what replayed steps read, for the largest captured size at the fixed block
  // table width: scratch, block tables and attention workspace, so no captured buffer
  // moves later. A no-op without graphs.
  absl::Status ReserveGraphBuffers();
  // Warms up and captures every size now, on steps of padding tokens only (no KV is
  // written), so that start-up can measure what the graphs hold. Needs the KV cache;
  // AllocateKvCache and FreeKvCache drop the graphs (they read the cache), and Forward
  // captures again lazily. Collective (NCCL inside the graphs). A no-op without graphs.
  absl::Status CaptureCudaGraphs();
  // After the final AllocateKvCache: narrows the replayed steps' block-table width to what
  // one sequence can reach in this cache (the smallest full-attention group's blocks x
  // block size; sliding groups' tables are indexed by the same positions), when that is
  // less than max_model_len (the 31B's 262144 positions are far more than one H200's
  // cache holds). Drops captured graphs (they are captured again on use); never widens.
  // A no-op without graphs.
  void FitGraphsToKvCache();

  const ModelConfig& config() const { return config_; }
  int32_t block_size() const { return options_.block_size; }
  const PipelineStage& pipeline() const { return options_.pipeline; }
  // This rank's tensor-parallel group (its stage's ranks). With pipeline stages, the step
  // messages go from rank 0 to its stage's ranks on it, and from stage to stage on
  // `step_messages` (a copy of the world made by Load, so that a step message sent ahead
  // never queues behind, nor waits with, the hidden states: worker/worker_loop.h); null
  // with one stage.
  Communicator& stage_comm() const { return comm_; }
  Communicator* step_messages() const { return step_messages_.get(); }
  // World ranks of this rank's counterpart in stage `stage`, and of the last stage's first rank.
  int StagePeer(int stage) const { return stage * comm_.size() + comm_.rank(); }
  int OutputRank() const { return (options_.pipeline.stages - 1) * comm_.size(); }

  // For a reader beside the model (the MTP drafter, worker/mtp_drafter.h), which runs on
  // the same ranks with the same backend and communicator.
  //
  // The post-final-norm hidden states of the last Forward's logit rows, [logit rows,
  // hidden_size] in the activation dtype on this rank's device, the same on every rank
  // (the final norm runs on the all-reduced residual): what the logits were computed from,
  // before the LM head and the final soft-cap. Valid until the next Forward or
  // ReserveScratch; empty before the first Forward and after a step without logit rows.
  Tensor hidden_rows() const;
  // The input embedding (vocab-parallel; Lookup all-reduces) and the scale Forward applies
  // to it (Gemma's sqrt(hidden_size), rounded to the weight dtype as transformers does).
  const VocabParallelEmbedding& embedding() const { return embed_; }
  float embed_scale() const { return embed_scale_; }
  // Layer `layer`'s (a layer this rank holds: every layer without pipeline stages) paged K/V on this rank ([num_slots, heads.kv_heads * head_dim] each,
  // slots of its KV group's blocks) and its head split; null caches before AllocateKvCache.
  // Reallocated by AllocateKvCache: read the pointers again after it.
  struct LayerKvCache {
    void* k_cache = nullptr;
    void* v_cache = nullptr;
    HeadShard heads;
    cpu::KvCacheDType kv_dtype = cpu::KvCacheDType::kF32;  // how they hold K and V
  };
  LayerKvCache layer_kv_cache(int layer) const;

 private:
  struct Layer;
  Model(const ModelConfig& c, Backend& b, Communicator& comm, const ModelOptions& o, Communicator* world);
  absl::Status LoadWeights(const WeightSource& source);
  absl::Status EnsureScratch(int64_t tokens, int64_t logit_rows);
  // Bytes one slot of layer L's K (or V) cache takes on this rank, held as t.
  int64_t KvSlotBytes(const Layer& L, cpu::KvCacheDType t) const;
  // Forward's three stages. UploadStep: every host-to-device copy of the step (ids,
  // positions, token_seq, per-group slots and block tables, logit rows). RunDevice: the
  // device work and collectives only (embedding, layers, row gather, final norm, LM head,
  // softcap), so it can be captured; reads the block-table widths UploadStep recorded.
  // DownloadOutput: the first `logit_rows` rows to rank 0, sampled on the device when the
  // plan has sampling rows, else as fp32 logits (gather, copy, widen), then synchronize.
  // table_width > 0: the device block tables are that many columns wide (replayed steps)
  // and only the plan's columns are copied into them.
  absl::Status UploadStep(const StepPlan& plan, int32_t table_width = 0);
  void RunDevice(int64_t tokens, int64_t logit_rows, StepTimes* times);
  // `rows_only`: fp32 logit rows, never sampled ids (the last stage's output for a step rank 0
  // samples on the host).
  StepOutput DownloadOutput(const StepPlan& plan, int64_t logit_rows, bool rows_only = false);
  // Forward up to its output stage: validation, upload, this stage's device work and, with
  // pipeline stages, the transfers in and out (after waiting for the last step's sends).
  // `*times` accumulates. A plan without tokens does nothing.
  absl::Status RunStage(const StepPlan& plan, StepTimes* times);
  // With pipeline stages, the ranks but rank 0: the last stage's first rank sends rank 0
  // the step's output (DownloadOutput's, for a plan with tokens) and the stages' work.
  StepOutput PipelineOutput(const StepPlan& plan, int64_t logit_rows, StepTimes* times);
  // Rank 0's side of it (and sampling on the host where the plan says).
  StepOutput ReceiveOutput(const StepPlan& plan, int64_t logit_rows, StepTimes* times);
  // The hidden states [tokens, hidden] from the previous stage / to the next one: each TP
  // rank sends the same rank there its 1/T slice (HiddenSliceBytes) and the work report in
  // one message, through host memory; the receiving stage all-gathers the slices. So the
  // bytes between stages are the hidden states once, not T times.
  void ReceiveHidden(int64_t tokens, StepTimes* times);
  void SendHidden(int64_t tokens, StepTimes* times);
  // One rank's slice of a step's hidden states: 1/T of the bytes, rounded up to 16.
  size_t HiddenSliceBytes(int64_t tokens) const;
  // What this stage passes on: the work of the stages from 1 up to this one (Scratch::upstream
  // plus this stage's since its input came); zeros on the first stage, which rank 0 times.
  std::array<double, 2> StagesWork(const StepTimes* times) const;
  // Adds the all-reduce spans timed since the last call to times (and, on the first stage,
  // to its own share of the stages' work). Only once this rank's device work has completed.
  void TakeAllReduceTime(StepTimes* times);
  // Rank 0, a plan with logit edits: the gathered rows to the host, edited and sampled
  // there (and kept unedited in out.logits when the plan returns logits).
  void SampleEditedOnHost(const StepPlan& plan, const void* shards, int64_t logit_rows, StepOutput& out);
  // The same from fp32 rows [logit rows, vocab] already on the host (consumed).
  void SampleOnHost(const StepPlan& plan, std::vector<float> rows, int64_t logit_rows, StepOutput& out);
  void RunLayer(Layer& layer, const Layer* next, int64_t tokens, StepTimes* times);
  cpu::PagedAttentionParams AttentionParams(const Layer& layer, int32_t table_width) const;
  // The captured size a plan replays at, 0 for an eager step.
  int32_t ReplayBatchSize(const StepPlan& plan) const;
  void ClearGraphs();

  ModelConfig config_;
  Backend& backend_;
  Communicator& comm_;    // this stage's tensor-parallel group
  Communicator* world_;   // every rank (pipeline transfers); null with one stage
  std::unique_ptr<Communicator> step_messages_;  // with pipeline stages (step_messages())
  ModelOptions options_;
  DType weight_dtype_ = DType::kF32;
  int64_t weight_bytes_ = 0;
  WeightFormats weight_formats_;
  float embed_scale_ = 1.0f;

  VocabParallelEmbedding embed_;
  std::optional<VocabParallelEmbedding> lm_head_;  // untied models only
  DeviceTensor final_norm_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<int64_t> num_blocks_;

  // Step inputs on the device and scratch activations, grown on demand.
  struct Scratch;
  std::unique_ptr<Scratch> scratch_;
  std::unique_ptr<SpanTimer> allreduce_timer_;  // times the layers' all-reduces (TakeAllReduceTime)

  // CUDA graphs of decode steps (null: every step eager).
  std::unique_ptr<StepGraphs> graphs_;
  std::atomic<bool> graphs_enabled_{true};
  std::mutex kernels_mu_;
  KernelOptions pending_kernels_;           // for the next Forward (set_kernel_options)
  std::atomic<bool> kernels_pending_{false};
  std::vector<int32_t> graph_sizes_;  // ascending
  int32_t graph_table_width_ = 0;     // block-table columns of replayed steps
  bool graph_buffers_reserved_ = false;
  bool graph_warned_ = false;
  int64_t replayed_steps_ = 0;
  int64_t hidden_rows_ = 0;  // logit rows of the last Forward (hidden_rows())
};

}  // namespace tpserve
