// The transformer forward pass over a paged KV cache (loading: worker/model_load.cc).
// Tested by tests/model_test.cc.
#include "worker/model.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/model_layer.h"

namespace tpserve {

struct Model::Scratch {
  int64_t token_capacity = 0, logit_capacity = 0;
  std::unique_ptr<Buffer> ids, positions, token_seq, logit_rows;
  // Per KV group.
  std::vector<std::unique_ptr<Buffer>> slots, block_tables;
  std::vector<int64_t> table_capacity;
  std::vector<int32_t> table_width;  // this step's block-table columns, per group
  std::unique_ptr<Buffer> h, x, o, sel, logits;
  // One buffer for a layer's two blocks, which never need their buffers at once: the
  // attention block's q, k, v and attn, then the MLP's gate_up and act (of at most
  // mlp_rows tokens) over the same bytes, at these byte offsets (act_at 0: act over gate_up
  // itself, Backend::GatedActivationInPlace). Separate buffers held both sets through the
  // whole step.
  std::unique_ptr<Buffer> layer;
  size_t k_at = 0, v_at = 0, attn_at = 0, act_at = 0;
  int64_t mlp_rows = 0;
  std::unique_ptr<Buffer> gathered;  // rank 0 at TP > 1: every rank's logits shard, for sampling
  // Pipeline transfers (SendHidden / ReceiveHidden): the message sent on (this rank's slice
  // of the hidden states, then the work report), and, where received, the message through
  // the host (device backends) and the slice before the stage's all-gather (TP > 1).
  std::vector<uint8_t> send, transfer;
  std::unique_ptr<Buffer> slice;
  // Pipeline: when this stage had its input (the previous stage's hidden states), and the
  // work of the stages before it but rank 0's: {busy_us, allreduce_us}, passed down the
  // pipeline after the hidden states and by the last stage to rank 0, which takes the later
  // stages' time out of its wait (pipeline_us is then the transfers and idling alone) and
  // counts their all-reduces as all-reduce.
  std::chrono::steady_clock::time_point input_at;
  double upstream[2] = {0, 0};
};

namespace {
// What leaves the last pipeline stage for rank 0: {token ids (it samples), fp32 rows (asked
// for, or rank 0 samples on the host: it alone holds the logit edits)}.
std::pair<bool, bool> PipelineOutputKinds(const StepPlan& plan) {
  return {!plan.sampling.empty() && !plan.samples_on_host(),
          plan.sampling.empty() || plan.return_logits || plan.samples_on_host()};
}

double MicrosSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Model::Model(const ModelConfig& c, Backend& b, Communicator& comm, const ModelOptions& o, Communicator* world)
    : config_(c),
      backend_(b),
      comm_(comm),
      world_(world),
      options_(o),
      scratch_(std::make_unique<Scratch>()),
      allreduce_timer_(b.MakeSpanTimer()) {}
Model::~Model() = default;

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const ModelConfig& config, const WeightSource& source,
                                                   Backend& backend, Communicator& comm,
                                                   const ModelOptions& options, Communicator* world) {
  TP_RETURN_IF_ERROR(ValidateTensorParallel(config, comm.size()));
  ModelOptions o = options;
  PipelineStage& stage = o.pipeline;
  if (stage.stages <= 1) {
    stage = PipelineStage{1, 0, 0, config.num_layers};
    world = nullptr;
  } else {
    if (world == nullptr || world->size() != stage.stages * comm.size() ||
        world->rank() != stage.stage * comm.size() + comm.rank()) {
      return absl::InvalidArgumentError(absl::StrCat("pipeline stage ", stage.stage, " of ", stage.stages,
                                                     ": the world communicator must hold every stage's ",
                                                     comm.size(), " ranks in stage order"));
    }
    if (stage.stage < 0 || stage.stage >= stage.stages || stage.layer_begin < 0 ||
        stage.layer_begin >= stage.layer_end || stage.layer_end > config.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("pipeline stage ", stage.stage, " of ", stage.stages,
                                                     ": layers [", stage.layer_begin, ", ", stage.layer_end,
                                                     ") do not fit the model's ", config.num_layers));
    }
  }
  if (options.block_size <= 0) return absl::InvalidArgumentError("block size must be positive");
  if (!backend.SupportsKvCacheDType(options.kv_cache_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("a KV cache of ", cpu::KvCacheDTypeName(options.kv_cache_dtype),
                                                   " is not supported on the ", backend.name(),
                                                   " backend (it holds the cache as its activations; --kv-cache-dtype auto)"));
  }
  for (int32_t b : options.cuda_graph_batch_sizes) {
    if (b <= 0) return absl::InvalidArgumentError(absl::StrCat("CUDA graph batch size ", b, " is not positive"));
  }
  if (options.max_model_len < 0) return absl::InvalidArgumentError("max_model_len must not be negative");
  auto m = std::unique_ptr<Model>(new Model(config, backend, comm, o, world));
  // Collective over the world (every rank reaches it: the checks above depend on the
  // configuration alone).
  if (stage.stages > 1) m->step_messages_ = world->Split(0);
  TP_RETURN_IF_ERROR(m->LoadWeights(source));
  // A tensor nobody read is part of the model computed without it (o_proj.bias was once).
  // Another pipeline stage reads the other layers (and the stages the embedding and head
  // they lack): each stage checks its own share.
  auto elsewhere = [&](std::string_view name) { return !OwnsTensor(config, stage, name); };
  absl::Status used = stage.stages > 1 ? source.CheckAllUsed(elsewhere) : source.CheckAllUsed();
  if (!used.ok()) {
    return absl::Status(used.code(), absl::StrCat("loading a ", config.model_type, " model: ", used.message()));
  }
  // Collectives inside a graph must be stream-ordered (NCCL); staged and host ones
  // synchronize, so those ranks run every step eagerly. Stage-to-stage transfers go
  // through the host: no graphs with pipeline stages.
  if (!options.cuda_graph_batch_sizes.empty() && (comm.size() == 1 || comm.capturable()) && stage.stages == 1) {
    m->graphs_ = backend.MakeStepGraphs(options.cuda_graph_batch_sizes);
    m->graph_sizes_ = options.cuda_graph_batch_sizes;
    std::sort(m->graph_sizes_.begin(), m->graph_sizes_.end());
    m->graph_sizes_.erase(std::unique(m->graph_sizes_.begin(), m->graph_sizes_.end()), m->graph_sizes_.end());
    const int64_t max_len = options.max_model_len > 0 ? options.max_model_len : config.max_position_embeddings;
    m->graph_table_width_ = DecodeBlockTableWidth(max_len, options.block_size);
  }
  return m;
}

int64_t Model::KvSlotBytes(const Layer& L, cpu::KvCacheDType t) const {
  if (t == cpu::KvCacheDType::kF32) {  // as the activations
    return static_cast<int64_t>(L.heads.kv_heads) * L.cfg.head_dim *
           static_cast<int64_t>(DTypeSize(backend_.activation_dtype()));
  }
  return cpu::KvSlotBytes(t, L.heads.kv_heads, L.cfg.head_dim);
}

std::vector<int64_t> Model::KvBytesPerBlock(cpu::KvCacheDType t) const {
  std::vector<int64_t> bytes(config_.kv_group_windows.size(), 0);
  for (const auto& L : layers_) {
    bytes[L->cfg.kv_group] += 2 * static_cast<int64_t>(options_.block_size) * KvSlotBytes(*L, t);
  }
  return bytes;
}

absl::Status Model::AllocateKvCache(int64_t num_blocks) {
  return AllocateKvCache(std::vector<int64_t>(config_.kv_group_windows.size(), num_blocks));
}

absl::Status Model::AllocateKvCache(const std::vector<int64_t>& num_blocks) {
  if (num_blocks.size() != config_.kv_group_windows.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the model has ", config_.kv_group_windows.size(),
                                                   " KV cache groups, got block counts for ", num_blocks.size()));
  }
  for (int64_t n : num_blocks) {
    if (n <= 0) return absl::InvalidArgumentError("the KV cache needs at least one block per group");
  }
  FreeKvCache();
  for (auto& L : layers_) {
    const size_t bytes = static_cast<size_t>(num_blocks[L->cfg.kv_group] * options_.block_size * KvSlotBytes(*L, options_.kv_cache_dtype));
    TP_ASSIGN_OR_RETURN(L->k_cache, backend_.Allocate(bytes));
    TP_ASSIGN_OR_RETURN(L->v_cache, backend_.Allocate(bytes));
  }
  num_blocks_ = num_blocks;
  return absl::OkStatus();
}

void Model::ClearGraphs() {
  if (graphs_) graphs_->Clear();
}

void Model::FreeKvCache() {
  ClearGraphs();  // they read the cache
  for (auto& L : layers_) {
    L->k_cache.reset();
    L->v_cache.reset();
  }
  num_blocks_.clear();
}

absl::Status Model::EnsureScratch(int64_t tokens, int64_t logit_rows) {
  Scratch& s = *scratch_;
  const size_t act = DTypeSize(backend_.activation_dtype());
  auto alloc = [&](std::unique_ptr<Buffer>& b, size_t bytes) -> absl::Status {
    TP_ASSIGN_OR_RETURN(b, backend_.Allocate(bytes));
    return absl::OkStatus();
  };
  if (tokens > s.token_capacity || logit_rows > s.logit_capacity) ClearGraphs();  // buffers move
  if (tokens > s.token_capacity) {
    s.token_capacity = 0;  // until every buffer below has its new size
    const int64_t T = std::max<int64_t>(tokens, 16);
    int64_t max_q = 0, max_kv = 0;
    for (const auto& L : layers_) {
      max_q = std::max<int64_t>(max_q, L->heads.q_heads * L->cfg.head_dim);
      max_kv = std::max<int64_t>(max_kv, L->heads.kv_heads * L->cfg.head_dim);
    }
    const int64_t H = config_.hidden_size;
    int64_t I = config_.intermediate_size / comm_.size();
    for (const auto& L : layers_) I = std::max(I, L->gate_up_proj.out_features() / 2);
    for (auto* b : {&s.ids, &s.positions, &s.token_seq}) TP_RETURN_IF_ERROR(alloc(*b, T * 4));
    s.slots.resize(config_.kv_group_windows.size());
    for (auto& b : s.slots) TP_RETURN_IF_ERROR(alloc(b, T * 4));
    // h has room for the pipeline's all-gather of rounded slices (HiddenSliceBytes) and,
    // at TP 1, for a received message's work report after them.
    const size_t pad = options_.pipeline.stages > 1 ? 16 * (comm_.size() + 2) : 0;
    TP_RETURN_IF_ERROR(alloc(s.h, T * H * act + pad));
    if (!options_.pipeline.first() && comm_.size() > 1) {
      TP_RETURN_IF_ERROR(alloc(s.slice, HiddenSliceBytes(T) + sizeof(s.upstream)));
    }
    TP_RETURN_IF_ERROR(alloc(s.x, T * H * act));
    TP_RETURN_IF_ERROR(alloc(s.o, T * H * act));
    // Each part on a 256-byte boundary (what a GPU's vector loads and cuBLAS like best).
    auto round = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
    s.k_at = round(T * max_q * act);
    s.v_at = s.k_at + round(T * max_kv * act);
    s.attn_at = s.v_at + round(T * max_kv * act);
    const size_t attention_bytes = s.attn_at + T * max_q * act;
    const bool widens = std::any_of(weight_formats_.bytes.begin(), weight_formats_.bytes.end(),
                                    [&](const auto& e) { return backend_.PrefillWidens(e.first); });
    const int32_t chunk = widens && options_.quantized_mlp_chunk_tokens > 0 ? options_.quantized_mlp_chunk_tokens
                                                                           : options_.mlp_chunk_tokens;
    s.mlp_rows = chunk > 0 ? std::min<int64_t>(T, chunk) : T;
    s.act_at = backend_.GatedActivationInPlace() ? 0 : round(s.mlp_rows * 2 * I * act);
    const size_t mlp_bytes = std::max(s.mlp_rows * 2 * I * act, s.act_at + s.mlp_rows * I * act);
    s.layer.reset();  // before its successor is allocated: never both resident
    TP_RETURN_IF_ERROR(alloc(s.layer, std::max(attention_bytes, mlp_bytes)));
    s.token_capacity = T;
  }
  if (logit_rows > s.logit_capacity) {
    const int64_t L = std::max<int64_t>(logit_rows, 8);
    TP_RETURN_IF_ERROR(alloc(s.logit_rows, L * 4));
    if (options_.pipeline.last()) {  // the stage that computes logits
      TP_RETURN_IF_ERROR(alloc(s.sel, L * config_.hidden_size * act));
      // The head's shard (an untied model's last stage has no embedding).
      const int64_t shard = (lm_head_ ? *lm_head_ : embed_).shard_rows();
      TP_RETURN_IF_ERROR(alloc(s.logits, L * shard * act));
      if (comm_.size() > 1 && comm_.rank() == 0) {
        TP_RETURN_IF_ERROR(alloc(s.gathered, comm_.size() * L * shard * act));
      }
    }
    s.logit_capacity = L;
  }
  return absl::OkStatus();
}

cpu::PagedAttentionParams Model::AttentionParams(const Layer& L, int32_t table_width) const {
  cpu::PagedAttentionParams ap;
  ap.num_q_heads = L.heads.q_heads;
  ap.num_kv_heads = L.heads.kv_heads;
  ap.head_dim = L.cfg.head_dim;
  ap.block_size = options_.block_size;
  ap.max_blocks_per_seq = table_width;
  ap.scale = config_.attn_scale;
  ap.sliding_window = L.cfg.sliding_window;
  ap.softcap = config_.attn_softcap;
  ap.kv_dtype = options_.kv_cache_dtype;
  return ap;
}

// Expects x = input_norm(h) (the previous layer's last op, or RunDevice's); leaves h
// updated and, when `next` is given, x = next->input_norm(h).
void Model::RunLayer(Layer& L, const Layer* next, int64_t T, StepTimes* times) {
  Scratch& s = *scratch_;
  const DType adt = backend_.activation_dtype();
  const int64_t H = config_.hidden_size;
  const int32_t D = L.cfg.head_dim;
  const float eps = config_.rms_norm_eps;
  const cpu::NormKind nk = config_.norm_kind;
  auto weights = [](const DeviceTensor& t) { return static_cast<const float*>(t.view.data); };
  const Tensor h{s.h->data(), adt, T, H}, x{s.x->data(), adt, T, H}, o{s.o->data(), adt, T, H};
  uint8_t* const layer = static_cast<uint8_t*>(s.layer->data());
  const Tensor q{layer, adt, T, L.heads.q_heads * D};
  const Tensor k{layer + s.k_at, adt, T, L.heads.kv_heads * D};
  const Tensor v{layer + s.v_at, adt, T, L.heads.kv_heads * D};
  const Tensor attn{layer + s.attn_at, adt, T, L.heads.q_heads * D};
  const int32_t* positions = static_cast<const int32_t*>(s.positions->data());
  const int32_t g = L.cfg.kv_group;

  // Attention block.
  if (L.cfg.k_eq_v) {
    const Tensor qk[] = {q, k};
    L.qkv_proj.ForwardSplit(backend_, x, qk);
    backend_.Copy(k, v);  // K = V: values are the raw key projection
  } else {
    const Tensor qkv[] = {q, k, v};
    L.qkv_proj.ForwardSplit(backend_, x, qkv);
  }
  AttentionPrologueParams pp;
  pp.head_dim = D;
  if (config_.qk_norm) {
    pp.q_norm = weights(L.q_norm);
    pp.k_norm = weights(L.k_norm);
  }
  pp.v_norm = config_.v_norm;
  pp.eps = eps;
  pp.norm_kind = nk;
  pp.positions = positions;
  pp.inv_freq = weights(L.inv_freq);
  pp.slot_mapping = static_cast<const int32_t*>(s.slots[g]->data());
  pp.kv_dtype = options_.kv_cache_dtype;
  pp.k_cache = L.k_cache->data();
  pp.v_cache = L.v_cache->data();
  backend_.AttentionPrologue(q, k, v, pp);
  const cpu::PagedAttentionParams ap = AttentionParams(L, s.table_width[g]);
  backend_.PagedAttention(q, L.k_cache->data(), L.v_cache->data(), static_cast<const int32_t*>(s.token_seq->data()),
                          positions, static_cast<const int32_t*>(s.block_tables[g]->data()), ap, attn);
  L.o_proj.Forward(backend_, comm_, attn, o, *allreduce_timer_);
  const bool sandwich = config_.sandwich_norms;
  const DeviceTensor& pre_mlp_norm = sandwich ? L.pre_ffn_norm : L.post_attn_norm;
  backend_.ResidualNorm(o, sandwich ? weights(L.post_attn_norm) : nullptr, h, 1.0f, weights(pre_mlp_norm), eps, nk,
                        x);

  // MLP block, over the bytes the attention block is done with, s.mlp_rows tokens at a
  // time (each row's output depends on that row alone); one all-reduce for all of them.
  const int64_t I = L.gate_up_proj.out_features() / 2;
  for (int64_t r0 = 0; r0 < T; r0 += s.mlp_rows) {
    const int64_t n = std::min(s.mlp_rows, T - r0);
    const Tensor gu{layer, adt, n, 2 * I}, a{layer + s.act_at, adt, n, I};
    L.gate_up_proj.Forward(backend_, x.RowSlice(r0, n), gu);
    backend_.GatedActivation(gu, config_.activation, a);
    L.down_proj.PartialProduct(backend_, comm_, a, o.RowSlice(r0, n));
  }
  RowParallelLinear::AllReduce(comm_, o, *allreduce_timer_);
  backend_.ResidualNorm(o, sandwich ? weights(L.post_ffn_norm) : nullptr, h, L.layer_scalar,
                        next != nullptr ? weights(next->input_norm) : nullptr, eps, nk, x);
}

absl::Status Model::UploadStep(const StepPlan& plan, int32_t table_width) {
  const int64_t T = plan.num_tokens();
  const int64_t Lr = static_cast<int64_t>(plan.logit_rows.size());
  TP_RETURN_IF_ERROR(EnsureScratch(T, Lr));
  Scratch& s = *scratch_;
  s.block_tables.resize(plan.kv.size());
  s.table_capacity.resize(plan.kv.size(), 0);
  s.table_width.resize(plan.kv.size(), 0);
  for (size_t g = 0; g < plan.kv.size(); ++g) {
    const std::vector<int32_t>& bt = plan.kv[g].block_tables;
    const int32_t cols = plan.kv[g].max_blocks_per_seq;
    const int32_t width = std::max(table_width, cols);
    const int64_t entries = static_cast<int64_t>(plan.num_seqs) * width;
    if (entries > s.table_capacity[g] || !s.block_tables[g]) {
      ClearGraphs();  // the table moves
      TP_ASSIGN_OR_RETURN(s.block_tables[g], backend_.Allocate(std::max<size_t>(entries, 1) * 4));
      s.table_capacity[g] = entries;
    }
    s.table_width[g] = width;
    // Only the plan's columns (a replayed step's device rows are wider; the rest of a row is
    // past every sequence's last block, never read).
    if (!bt.empty()) {
      backend_.CopyFromHost2D(s.block_tables[g]->data(), static_cast<size_t>(width) * 4, bt.data(),
                              static_cast<size_t>(cols) * 4, static_cast<size_t>(cols) * 4, plan.num_seqs);
    }
    backend_.CopyFromHost(s.slots[g]->data(), plan.kv[g].slot_mapping.data(), T * 4);
  }
  backend_.CopyFromHost(s.ids->data(), plan.token_ids.data(), T * 4);
  backend_.CopyFromHost(s.positions->data(), plan.positions.data(), T * 4);
  backend_.CopyFromHost(s.token_seq->data(), plan.token_seq.data(), T * 4);
  if (Lr > 0) backend_.CopyFromHost(s.logit_rows->data(), plan.logit_rows.data(), Lr * 4);
  return absl::OkStatus();
}

void Model::RunDevice(int64_t T, int64_t Lr, StepTimes* times) {
  Scratch& s = *scratch_;
  const DType adt = backend_.activation_dtype();
  const int64_t H = config_.hidden_size;
  const Tensor h{s.h->data(), adt, T, H};
  if (options_.pipeline.first()) {
    embed_.Lookup(backend_, comm_, static_cast<const int32_t*>(s.ids->data()), T, embed_scale_, h,
                  *allreduce_timer_);
  } else {
    ReceiveHidden(T, times);
  }
  if (!layers_.empty()) {
    backend_.RmsNorm(h, static_cast<const float*>(layers_[0]->input_norm.view.data), config_.rms_norm_eps,
                     config_.norm_kind, Tensor{s.x->data(), adt, T, H});
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    RunLayer(*layers_[i], i + 1 < layers_.size() ? layers_[i + 1].get() : nullptr, T, times);
  }
  if (!options_.pipeline.last()) {
    SendHidden(T, times);
    return;
  }
  if (Lr == 0) return;
  const Tensor sel{s.sel->data(), adt, Lr, H};
  backend_.GatherRows(h, static_cast<const int32_t*>(s.logit_rows->data()), Lr, sel);
  backend_.RmsNorm(sel, static_cast<const float*>(final_norm_.view.data), config_.rms_norm_eps, config_.norm_kind,
                   sel);
  const VocabParallelEmbedding& head = lm_head_ ? *lm_head_ : embed_;
  const Tensor logits{s.logits->data(), adt, Lr, head.rows()};
  head.Logits(backend_, sel, logits);
  if (config_.final_softcap > 0) backend_.Softcap(logits, config_.final_softcap);
}

size_t Model::HiddenSliceBytes(int64_t T) const {
  const size_t bytes = static_cast<size_t>(T * config_.hidden_size) * DTypeSize(backend_.activation_dtype());
  const size_t tp = static_cast<size_t>(comm_.size());
  return ((bytes + tp - 1) / tp + 15) / 16 * 16;
}

void Model::ReceiveHidden(int64_t T, StepTimes* times) {
  const auto t0 = std::chrono::steady_clock::now();
  Scratch& s = *scratch_;
  const size_t slice = HiddenSliceBytes(T), message = slice + sizeof(s.upstream);
  // At TP 1 the slice is the hidden states and lands in h; else in `slice`, all-gathered
  // into h below. Through the host on device backends.
  void* dst = comm_.size() == 1 ? s.h->data() : s.slice->data();
  uint8_t* landed = static_cast<uint8_t*>(dst);
  if (!backend_.device_is_host()) {
    if (s.transfer.size() < message) s.transfer.resize(message);
    landed = s.transfer.data();
  }
  world_->Recv(landed, message, StagePeer(options_.pipeline.stage - 1));
  std::memcpy(s.upstream, landed + slice, sizeof(s.upstream));
  if (!backend_.device_is_host()) backend_.CopyFromHost(dst, landed, slice);
  if (comm_.size() > 1) comm_.AllGather(s.slice->data(), slice, s.h->data());
  s.input_at = std::chrono::steady_clock::now();
  times->pipeline_us += MicrosSince(t0);
}

void Model::TakeAllReduceTime(StepTimes* times) {
  const double us = allreduce_timer_->TakeUs();
  times->allreduce_us += us;
  if (options_.pipeline.first()) times->stages_allreduce_us += us;  // rank 0's own share
}

std::array<double, 2> Model::StagesWork(const StepTimes* times) const {
  const Scratch& s = *scratch_;
  if (options_.pipeline.first()) return {0, 0};  // rank 0's stage times itself
  return {s.upstream[0] + MicrosSince(s.input_at), s.upstream[1] + times->allreduce_us};
}

void Model::SendHidden(int64_t T, StepTimes* times) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t bytes = static_cast<size_t>(T * config_.hidden_size) * DTypeSize(backend_.activation_dtype());
  Scratch& s = *scratch_;
  // After the stage's all-reduces every rank holds all of h: each sends its own slice, the
  // last one's zero-padded, and the next stage all-gathers them (ReceiveHidden).
  const size_t slice = HiddenSliceBytes(T), begin = std::min(bytes, comm_.rank() * slice);
  const size_t mine = std::min(bytes - begin, slice);
  s.send.resize(slice + sizeof(double) * 2);
  const uint8_t* src = static_cast<const uint8_t*>(s.h->data()) + begin;
  if (backend_.device_is_host()) {
    std::memcpy(s.send.data(), src, mine);
  } else {
    backend_.CopyToHost(s.send.data(), src, mine);  // waits for the stage's kernels
  }
  std::memset(s.send.data() + mine, 0, slice - mine);
  TakeAllReduceTime(times);
  const std::array<double, 2> work = StagesWork(times);
  std::memcpy(s.send.data() + slice, work.data(), sizeof(double) * 2);
  // Not waiting for the next stage to take it: this stage goes on to the next step, and
  // RunStage waits for the send before the buffer is written again.
  world_->SendAsync(s.send.data(), s.send.size(), StagePeer(options_.pipeline.stage + 1));
  times->pipeline_us += MicrosSince(t0);
}

StepOutput Model::PipelineOutput(const StepPlan& plan, int64_t Lr, StepTimes* times) {
  StepOutput out;
  if (!options_.pipeline.last()) {
    backend_.Synchronize();
    return out;
  }
  // Ids and/or rows (PipelineOutputKinds), and always the stages' work, so that rank 0 hears
  // of every step it started.
  const auto [ids, rows] = PipelineOutputKinds(plan);
  StepOutput mine;
  if (Lr > 0) {
    mine = DownloadOutput(plan, Lr, /*rows_only=*/!ids);
  } else {
    backend_.Synchronize();
  }
  TakeAllReduceTime(times);
  if (comm_.rank() == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::array<double, 2> work = StagesWork(times);
    const int64_t V = config_.vocab_size;
    if (Lr > 0 && ids) world_->Send(mine.token_ids.data(), Lr * sizeof(int32_t), 0);
    if (Lr > 0 && rows) world_->Send(mine.logits.data(), Lr * V * sizeof(float), 0);
    world_->Send(work.data(), sizeof(work), 0);
    times->pipeline_us += MicrosSince(t0);
  }
  return out;
}

StepOutput Model::ReceiveOutput(const StepPlan& plan, int64_t Lr, StepTimes* times) {
  StepOutput out;
  const int64_t V = config_.vocab_size;
  const auto [ids, rows] = PipelineOutputKinds(plan);
  const auto t0 = std::chrono::steady_clock::now();
  if (Lr > 0 && ids) {
    out.token_ids.resize(Lr);
    world_->Recv(out.token_ids.data(), Lr * sizeof(int32_t), OutputRank());
  }
  std::vector<float> logits;
  if (Lr > 0 && rows) {
    logits.resize(Lr * V);
    world_->Recv(logits.data(), Lr * V * sizeof(float), OutputRank());
  }
  double later[2] = {0, 0};  // the later stages' work: busy (their all-reduces included), all-reduce
  world_->Recv(later, sizeof(later), OutputRank());
  times->pipeline_us += MicrosSince(t0);
  times->stages_busy_us += later[0];
  times->stages_allreduce_us += later[1];
  if (Lr == 0) return out;
  if (!plan.sampling.empty() && plan.samples_on_host()) {
    out.token_ids.resize(Lr);
    SampleOnHost(plan, std::move(logits), Lr, out);
  } else if (rows) {
    out.logits = std::move(logits);
  }
  return out;
}

void Model::SampleEditedOnHost(const StepPlan& plan, const void* shards, int64_t Lr, StepOutput& out) {
  const VocabParallelEmbedding& head = lm_head_ ? *lm_head_ : embed_;
  const int64_t V = config_.vocab_size;
  std::vector<float> rows(static_cast<size_t>(Lr * V));
  backend_.CopyShardsToHost(shards, comm_.size(), Lr, head.shard_rows(), V, rows.data());
  SampleOnHost(plan, std::move(rows), Lr, out);
}

void Model::SampleOnHost(const StepPlan& plan, std::vector<float> rows, int64_t Lr, StepOutput& out) {
  const int64_t V = config_.vocab_size;
  if (plan.return_logits) out.logits = rows;  // as the model computed them
  const LogitEdits& e = plan.edits;
  cpu::ApplyLogitEdits(rows.data(), Lr, V, e.bias_offsets.empty() ? nullptr : e.bias_offsets.data(),
                       e.bias_tokens.data(), e.bias_values.data(), e.mask_index.empty() ? nullptr : e.mask_index.data(),
                       e.masks.data(), LogitEdits::mask_words(V));
  cpu::SampleRows(rows.data(), Lr, V, plan.sampling.data(), plan.penalty_offsets.data(), plan.penalty_tokens.data(),
                  plan.penalty_counts.data(), out.token_ids.data());
}

StepOutput Model::DownloadOutput(const StepPlan& plan, int64_t Lr, bool rows_only) {
  Scratch& s = *scratch_;
  StepOutput out;
  if (Lr > 0) {
    const DType adt = backend_.activation_dtype();
    const VocabParallelEmbedding& head = lm_head_ ? *lm_head_ : embed_;
    // The first Lr rows of the step's logits (a replayed step computed more).
    const Tensor logits{s.logits->data(), adt, Lr, head.rows()};
    const int64_t shard = head.shard_rows();
    const int tp = comm_.size();
    const int64_t V = config_.vocab_size;
    if (!plan.sampling.empty() && !rows_only) {
      // Only token ids leave the device: the shards meet on rank 0's device, which samples.
      const void* shards = logits.data;
      if (tp > 1) {
        const size_t bytes = static_cast<size_t>(Lr * shard) * DTypeSize(adt);
        comm_.Gather(logits.data, bytes, comm_.rank() == 0 ? s.gathered->data() : nullptr, 0);
        shards = comm_.rank() == 0 ? s.gathered->data() : nullptr;
      }
      if (comm_.rank() == 0) {
        // Returns with the ids on the host: nothing left to wait for.
        out.token_ids.resize(Lr);
        if (!plan.edits.empty()) {
          SampleEditedOnHost(plan, shards, Lr, out);
        } else {
          backend_.SampleShards(shards, tp, Lr, shard, V, plan.sampling.data(), plan.penalty_offsets.data(),
                                plan.penalty_tokens.data(), plan.penalty_counts.data(), out.token_ids.data());
        }
        if (plan.return_logits && out.logits.empty()) {
          out.logits.resize(Lr * V);
          backend_.CopyShardsToHost(shards, tp, Lr, shard, V, out.logits.data());
        }
      } else {
        backend_.Synchronize();
      }
      return out;
    }
    // Pad this rank's shard to ceil(vocab / tp) columns and gather the shards on rank 0.
    std::vector<float> local(Lr * shard, -std::numeric_limits<float>::infinity());
    std::vector<uint8_t> raw(logits.bytes());
    backend_.CopyToHost(raw.data(), logits.data, raw.size());
    for (int64_t r = 0; r < Lr; ++r) ToF32(raw.data() + r * head.rows() * DTypeSize(adt), adt, head.rows(), &local[r * shard]);
    std::vector<float> gathered(comm_.rank() == 0 ? static_cast<size_t>(tp * Lr * shard) : 0);
    if (tp > 1) {
      comm_.host().Gather(local.data(), local.size() * 4, gathered.data(), 0);
    } else {
      gathered.swap(local);
    }
    if (comm_.rank() == 0) {
      out.logits.resize(Lr * V);
      for (int rk = 0; rk < tp; ++rk) {
        const int64_t v0 = rk * shard;
        const int64_t n = std::min<int64_t>(shard, V - v0);
        for (int64_t r = 0; r < Lr && n > 0; ++r) {
          std::copy_n(&gathered[(rk * Lr + r) * shard], n, &out.logits[r * V + v0]);
        }
      }
    }
  }
  backend_.Synchronize();
  return out;
}

int32_t Model::ReplayBatchSize(const StepPlan& plan) const {
  if (!cuda_graphs() || plan.num_tokens() > graph_sizes_.back()) return 0;
  if (!IsReplayableDecode(plan, graph_table_width_, options_.block_size)) return 0;
  return graphs_->PaddedBatchSize(static_cast<int32_t>(plan.num_tokens()));
}

absl::Status Model::ReserveGraphBuffers() {
  if (!graphs_ || graph_buffers_reserved_) return absl::OkStatus();
  const int32_t B = graph_sizes_.back();
  const int64_t W = graph_table_width_;
  TP_RETURN_IF_ERROR(EnsureScratch(B, B));
  Scratch& s = *scratch_;
  const size_t groups = config_.kv_group_windows.size();
  s.block_tables.resize(groups);
  s.table_capacity.resize(groups, 0);
  s.table_width.resize(groups, 0);
  for (size_t g = 0; g < groups; ++g) {
    if (s.table_capacity[g] < B * W || !s.block_tables[g]) {
      ClearGraphs();
      TP_ASSIGN_OR_RETURN(s.block_tables[g], backend_.Allocate(static_cast<size_t>(B * W) * 4));
      s.table_capacity[g] = B * W;
    }
  }
  // The decode kernel's workspace is not monotonic in the batch: reserve every size.
  for (int32_t b : graph_sizes_) {
    for (const auto& L : layers_) {
      TP_RETURN_IF_ERROR(backend_.ReserveAttentionWorkspace(b, AttentionParams(*L, graph_table_width_)));
    }
  }
  graph_buffers_reserved_ = true;
  return absl::OkStatus();
}

void Model::FitGraphsToKvCache() {
  if (!graphs_ || num_blocks_.empty()) return;
  int64_t tokens = -1;  // the longest sequence the cache holds; -1: no full-attention group
  for (size_t g = 0; g < num_blocks_.size(); ++g) {
    if (config_.kv_group_windows[g] != 0) continue;
    const int64_t t = num_blocks_[g] * options_.block_size;
    tokens = tokens < 0 ? t : std::min(tokens, t);
  }
  if (tokens <= 0) return;
  const int32_t width = DecodeBlockTableWidth(tokens, options_.block_size);
  if (width >= graph_table_width_) return;
  ClearGraphs();
  graph_table_width_ = width;
  graph_buffers_reserved_ = false;  // the attention workspace follows the width
}

absl::Status Model::CaptureCudaGraphs() {
  if (!cuda_graphs()) return absl::OkStatus();
  if (num_blocks_.empty()) return absl::FailedPreconditionError("CaptureCudaGraphs before AllocateKvCache");
  TP_RETURN_IF_ERROR(ReserveGraphBuffers());
  StepPlan none;  // no real token: every one of the step's tokens is padding
  none.kv.resize(config_.kv_group_windows.size());
  StepTimes times;
  // Every size runs on every rank even after one failed to capture (a failed capture reruns
  // its step eagerly): the steps hold all-reduces, and a rank that left the loop early
  // would leave the others waiting in them. The first error is returned at the end.
  // (UploadStep only copies into the buffers ReserveGraphBuffers made; its failure is a
  // CUDA error that aborts the process, which the launcher turns into every rank's end.)
  absl::Status first_error;
  for (int32_t b : graph_sizes_) {
    TP_RETURN_IF_ERROR(UploadStep(PadDecodeStep(none, b, graph_table_width_), graph_table_width_));
    // Twice: the warm-up run, then the capture (which launches the graph).
    for (int i = 0; i < 2 && !graphs_->captured(b); ++i) {
      const absl::Status st = graphs_->Run(b, [&] { RunDevice(b, b, &times); });
      if (!st.ok() && first_error.ok()) first_error = st;
    }
  }
  backend_.Synchronize();
  TP_RETURN_IF_ERROR(first_error);
  for (int32_t b : graph_sizes_) {
    if (!graphs_->captured(b)) {
      return absl::InternalError(absl::StrCat("the decode step for batch size ", b,
                                              " was not captured (a capture failed before, or the attention "
                                              "workspace moved while capturing)"));
    }
  }
  return absl::OkStatus();
}

void Model::set_kernel_options(const KernelOptions& k) {
  std::lock_guard<std::mutex> lock(kernels_mu_);
  pending_kernels_ = k;
  kernels_pending_.store(true);
}

absl::StatusOr<TuneReport> Model::TuneKernels(int64_t max_tokens, int64_t max_logit_rows) {
  KernelUses uses;
  for (const auto& L : layers_) {
    const int64_t q = L->heads.q_heads * L->cfg.head_dim, kv = L->heads.kv_heads * L->cfg.head_dim;
    std::vector<int64_t> parts = {q, kv};  // K = V: no v rows (RunLayer's ForwardSplit)
    if (!L->cfg.k_eq_v) parts.push_back(kv);
    TP_CHECK(q + kv * static_cast<int64_t>(parts.size() - 1) == L->qkv_proj.out_features());
    uses.linear.push_back(LinearUse{L->qkv_proj.weight(), std::move(parts), max_tokens});
    uses.linear.push_back(LinearUse{L->o_proj.weight(), {}, max_tokens});
    uses.linear.push_back(LinearUse{L->gate_up_proj.weight(), {}, max_tokens});
    uses.linear.push_back(LinearUse{L->down_proj.weight(), {}, max_tokens});
    uses.attention.push_back(AttentionUse{AttentionParams(*L, 0), max_tokens});
  }
  if (options_.pipeline.last()) {
    const VocabParallelEmbedding& head = lm_head_ ? *lm_head_ : embed_;
    uses.linear.push_back(LinearUse{head.table(), {}, max_logit_rows});
  }
  auto report = backend_.TuneKernels(uses);
  ClearGraphs();
  return report;
}

Tensor Model::hidden_rows() const {
  if (hidden_rows_ == 0 || !scratch_->sel) return Tensor{};
  return Tensor{scratch_->sel->data(), backend_.activation_dtype(), hidden_rows_, config_.hidden_size};
}

Model::LayerKvCache Model::layer_kv_cache(int layer) const {
  layer -= options_.pipeline.layer_begin;
  TP_CHECK(layer >= 0 && layer < static_cast<int>(layers_.size()));
  const Layer& L = *layers_[layer];
  return LayerKvCache{L.k_cache ? L.k_cache->data() : nullptr, L.v_cache ? L.v_cache->data() : nullptr, L.heads,
                      options_.kv_cache_dtype};
}

absl::Status Model::RunStage(const StepPlan& plan, StepTimes* times) {
  const auto t0 = std::chrono::steady_clock::now();
  double waited_us = 0;
  if (world_ != nullptr) {  // the last step's hidden states leave the buffers first
    world_->WaitSends();
    waited_us = MicrosSince(t0);
    times->pipeline_us += waited_us;
  }
  if (kernels_pending_.load()) {  // a benchmark switched kernels (no lock on the usual step)
    std::lock_guard<std::mutex> lock(kernels_mu_);
    kernels_pending_.store(false);
    backend_.SetKernelOptions(pending_kernels_);
    ClearGraphs();
  }
  hidden_rows_ = 0;
  if (num_blocks_.empty()) return absl::FailedPreconditionError("Forward before AllocateKvCache");
  TP_RETURN_IF_ERROR(plan.Validate(num_blocks_, options_.block_size));
  const int64_t T = plan.num_tokens();
  const int64_t Lr = static_cast<int64_t>(plan.logit_rows.size());
  if (T == 0) return absl::OkStatus();
  TP_RETURN_IF_ERROR(plan.ValidateTokenIds(config_.vocab_size));
  const double pipeline_before = times->pipeline_us;
  // Padding comes after Validate, which rightly rejects the padding's negative positions.
  if (const int32_t B = ReplayBatchSize(plan); B > 0) {
    TP_RETURN_IF_ERROR(ReserveGraphBuffers());
    TP_RETURN_IF_ERROR(UploadStep(PadDecodeStep(plan, B, graph_table_width_), graph_table_width_));
    const absl::Status st = graphs_->Run(B, [&] { RunDevice(B, B, times); });
    if (!st.ok() && !graph_warned_) {
      // The step ran eagerly instead and that size stays eager: a bug, not the request's.
      std::fprintf(stderr, "tpserve: %s\n", std::string(st.message()).c_str());
      graph_warned_ = true;
    }
    if (graphs_->captured(B)) ++replayed_steps_;
  } else {
    TP_RETURN_IF_ERROR(UploadStep(plan));
    RunDevice(T, Lr, times);
  }
  hidden_rows_ = Lr;  // a replayed step's real rows come first
  // Rank 0's own share (TakeAllReduceTime adds its all-reduce); later stages report theirs.
  if (options_.pipeline.first()) {
    times->stages_busy_us += MicrosSince(t0) - waited_us - (times->pipeline_us - pipeline_before);
  }
  return absl::OkStatus();
}

absl::StatusOr<StepOutput> Model::Forward(const StepPlan& plan, StepTimes* times) {
  StepTimes local;
  if (times == nullptr) times = &local;
  if (options_.pipeline.stages > 1 && world_->rank() == 0) {  // one step, start to finish
    TP_RETURN_IF_ERROR(StartForward(plan, times));
    return FinishForward(plan, times);
  }
  const auto t0 = std::chrono::steady_clock::now();
  *times = StepTimes{};
  TP_RETURN_IF_ERROR(RunStage(plan, times));
  if (plan.num_tokens() == 0) return StepOutput{};
  const int64_t Lr = static_cast<int64_t>(plan.logit_rows.size());
  const auto output_t0 = std::chrono::steady_clock::now();
  StepOutput out =
      options_.pipeline.stages == 1 ? DownloadOutput(plan, Lr) : PipelineOutput(plan, Lr, times);
  TakeAllReduceTime(times);  // the step's work is done
  const auto t1 = std::chrono::steady_clock::now();
  times->output_us = std::chrono::duration<double, std::micro>(t1 - output_t0).count();
  times->total_us = std::chrono::duration<double, std::micro>(t1 - t0).count();
  return out;
}

absl::Status Model::StartForward(const StepPlan& plan, StepTimes* times) {
  if (options_.pipeline.stages == 1 || world_->rank() != 0) {
    return absl::FailedPreconditionError("StartForward: rank 0 of a pipeline only");
  }
  const auto t0 = std::chrono::steady_clock::now();
  *times = StepTimes{};
  TP_RETURN_IF_ERROR(RunStage(plan, times));
  backend_.Synchronize();  // (SendHidden took the stage's all-reduce time)
  times->total_us = MicrosSince(t0);
  return absl::OkStatus();
}

absl::StatusOr<StepOutput> Model::FinishForward(const StepPlan& plan, StepTimes* times) {
  if (options_.pipeline.stages == 1 || world_->rank() != 0) {
    return absl::FailedPreconditionError("FinishForward: rank 0 of a pipeline only");
  }
  if (plan.num_tokens() == 0) return StepOutput{};
  const auto t0 = std::chrono::steady_clock::now();
  StepOutput out = ReceiveOutput(plan, static_cast<int64_t>(plan.logit_rows.size()), times);
  times->output_us += MicrosSince(t0);
  times->total_us += MicrosSince(t0);
  return out;
}

}  // namespace tpserve
