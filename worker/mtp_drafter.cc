// The MTP drafter's loading and its draft step: pre_projection, Gemma 4 decoder layers
// with query-only attention over the target's cache, final norm, post_projection and the
// dense or centroid head. Tested by tests/mtp_drafter_test.cc.
#include "worker/mtp_drafter.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace tpserve {

struct MtpDrafter::Layer {
  LayerConfig cfg;       // the drafter's (its RoPE, sliding or full)
  int target_layer = 0;  // whose cache it reads: the target's last layer of its type
  HeadShard heads;
  DeviceTensor input_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm, q_norm;
  ColumnParallelLinear q_proj;  // this rank's query heads; no k/v projections
  RowParallelLinear o_proj;
  ColumnParallelLinear gate_up_proj;
  RowParallelLinear down_proj;
  float layer_scalar = 1.0f;
  DeviceTensor inv_freq;
};

struct MtpDrafter::Scratch {
  int64_t capacity = 0;
  // ids: token ids; rope_pos: L (RoPE); mask_pos: L - 1 (the attention's query position);
  // token_seq: row i of the block tables for sequence i.
  std::unique_ptr<Buffer> ids, rope_pos, mask_pos, token_seq;
  std::vector<std::unique_ptr<Buffer>> tables;  // per target KV group
  std::vector<int64_t> table_capacity;
  std::vector<int32_t> table_width;
  std::unique_ptr<Buffer> e, h, x, o, q, attn, gate_up, act, z, proj, logits, scores;
  // MtpDraftStep::hidden_rows: the indices and the rows gathered from the caller's `hidden`.
  std::unique_ptr<Buffer> hidden_index, hidden_in;
};

namespace {

const float* Weights(const DeviceTensor& t) { return static_cast<const float*>(t.view.data); }

}  // namespace

MtpDrafter::MtpDrafter(const MtpDrafterConfig& c, const Model& target, Backend& b, Communicator& comm)
    : config_(c),
      target_(target),
      backend_(b),
      comm_(comm),
      scratch_(std::make_unique<Scratch>()),
      allreduce_timer_(b.MakeSpanTimer()) {}
MtpDrafter::~MtpDrafter() = default;

absl::StatusOr<std::unique_ptr<MtpDrafter>> MtpDrafter::Load(const MtpDrafterConfig& config, const WeightSource& source,
                                                             const Model& target, Backend& backend,
                                                             Communicator& comm) {
  TP_RETURN_IF_ERROR(ValidateMtpDrafter(config, target.config(), comm.size()));
  auto d = std::unique_ptr<MtpDrafter>(new MtpDrafter(config, target, backend, comm));
  TP_RETURN_IF_ERROR(d->LoadWeights(source));
  if (absl::Status used = source.CheckAllUsed(); !used.ok()) {
    return absl::Status(used.code(), absl::StrCat("loading an MTP drafter: ", used.message()));
  }
  return d;
}

absl::StatusOr<std::unique_ptr<MtpDrafter>> MtpDrafter::LoadDir(const std::string& dir, const Model& target,
                                                                Backend& backend, Communicator& comm) {
  TP_ASSIGN_OR_RETURN(const MtpDrafterConfig config, LoadMtpDrafterConfig(dir));
  TP_ASSIGN_OR_RETURN(std::unique_ptr<WeightSource> source, OpenCheckpointSourceWithPrefix(dir, ""));
  return Load(config, *source, target, backend, comm);
}

absl::Status MtpDrafter::LoadWeights(const WeightSource& source) {
  const ModelConfig& c = config_.text;
  const int rank = comm_.rank(), tp = comm_.size();
  const DType wdt = target_.weight_dtype();
  LoadContext ctx{source, backend_, wdt};
  const int64_t d = c.hidden_size, D = config_.backbone_hidden_size;
  const int64_t wbytes = static_cast<int64_t>(DTypeSize(wdt));

  // Replicated: h is replicated (the target's final norm runs on the all-reduced residual)
  // and x must be (it is the residual stream). A split would cost a collective per step to
  // save reading d x 3D weights, 16.5M parameters for the 31B's assistant.
  TP_ASSIGN_OR_RETURN(pre_projection_embed_, LoadMatrix(ctx, "pre_projection.weight", d, 2 * D, 0, D));
  TP_ASSIGN_OR_RETURN(pre_projection_hidden_, LoadMatrix(ctx, "pre_projection.weight", d, 2 * D, D, D));
  TP_ASSIGN_OR_RETURN(post_projection_, LoadMatrix(ctx, "post_projection.weight", D, d, 0, d));
  TP_ASSIGN_OR_RETURN(final_norm_, LoadVector(ctx, "model.norm.weight", d));
  // The tied head, split by vocabulary like the target's (shards of ceil(V / tp) rows).
  TP_ASSIGN_OR_RETURN(lm_head_,
                      VocabParallelEmbedding::Load(ctx, "model.embed_tokens.weight", c.vocab_size, d, rank, tp));
  weight_bytes_ += (3 * D * d + lm_head_.rows() * d) * wbytes;
  if (config_.use_ordered_embeddings) {
    const int64_t C = config_.num_centroids, V = c.vocab_size;
    TP_ASSIGN_OR_RETURN(centroids_, LoadMatrix(ctx, "masked_embedding.centroids.weight", C, d, 0, d));
    TP_ASSIGN_OR_RETURN(std::vector<int64_t> ordering, source.ReadInt64("masked_embedding.token_ordering", V));
    std::vector<bool> seen(V, false);
    for (int64_t i = 0; i < V; ++i) {
      if (ordering[i] < 0 || ordering[i] >= V || seen[ordering[i]]) {
        return absl::InvalidArgumentError(absl::StrCat(source.Describe(),
                                                       ": masked_embedding.token_ordering is not a permutation of the ",
                                                       V, " token ids (entry ", i, " is ", ordering[i], ")"));
      }
      seen[ordering[i]] = true;
    }
    token_ordering_.assign(ordering.begin(), ordering.end());
    weight_bytes_ += C * d * wbytes;
  }

  const int64_t I = c.intermediate_size / tp;
  for (int i = 0; i < c.num_layers; ++i) {
    auto L = std::make_unique<Layer>();
    L->cfg = c.layers[i];
    L->target_layer = LastLayerOfType(target_.config(), L->cfg.sliding);
    const int32_t hd = L->cfg.head_dim;
    TP_ASSIGN_OR_RETURN(L->heads, ShardHeads(c.num_heads, L->cfg.num_kv_heads, rank, tp, i));
    // Query heads must sit with the KV heads this rank caches for the target layer.
    const HeadShard& th = target_.layer_kv_cache(L->target_layer).heads;
    if (L->heads.kv_heads != th.kv_heads || L->heads.kv_head0 != th.kv_head0) {
      return absl::InternalError(absl::StrCat("MTP drafter layer ", i, ": rank ", rank, " holds KV heads [",
                                              th.kv_head0, ", +", th.kv_heads, ") of target layer ", L->target_layer,
                                              " but its query heads read [", L->heads.kv_head0, ", +",
                                              L->heads.kv_heads, ")"));
    }
    const std::string p = absl::StrCat("model.layers.", i, ".");
    const std::string a = p + "self_attn.";
    TP_ASSIGN_OR_RETURN(L->input_norm, LoadVector(ctx, p + "input_layernorm.weight", d));
    TP_ASSIGN_OR_RETURN(L->post_attn_norm, LoadVector(ctx, p + "post_attention_layernorm.weight", d));
    TP_ASSIGN_OR_RETURN(L->pre_ffn_norm, LoadVector(ctx, p + "pre_feedforward_layernorm.weight", d));
    TP_ASSIGN_OR_RETURN(L->post_ffn_norm, LoadVector(ctx, p + "post_feedforward_layernorm.weight", d));
    TP_ASSIGN_OR_RETURN(L->q_norm, LoadVector(ctx, a + "q_norm.weight", hd));
    const int64_t q_rows = static_cast<int64_t>(c.num_heads) * hd;
    const std::vector<std::string> q_bias =
        c.qkv_bias ? std::vector<std::string>{a + "q_proj.bias"} : std::vector<std::string>{};
    TP_ASSIGN_OR_RETURN(
        L->q_proj, ColumnParallelLinear::Load(
                       ctx, {{a + "q_proj.weight", q_rows, L->heads.q_head0 * hd, L->heads.q_heads * hd}}, d, q_bias));
    TP_ASSIGN_OR_RETURN(L->o_proj,
                        RowParallelLinear::Load(ctx, a + "o_proj.weight", d, q_rows, L->heads.q_head0 * hd,
                                                L->heads.q_heads * hd, c.o_proj_bias ? a + "o_proj.bias" : ""));
    const int64_t full_i = c.intermediate_size;
    TP_ASSIGN_OR_RETURN(L->gate_up_proj, ColumnParallelLinear::Load(ctx,
                                                                    {{p + "mlp.gate_proj.weight", full_i, rank * I, I},
                                                                     {p + "mlp.up_proj.weight", full_i, rank * I, I}},
                                                                    d, {}));
    TP_ASSIGN_OR_RETURN(L->down_proj, RowParallelLinear::Load(ctx, p + "mlp.down_proj.weight", d, full_i, rank * I, I));
    TP_RETURN_IF_ERROR(source.Read(SliceRequest{p + "layer_scalar", {1}, 0, 1, 0, 1}, DType::kF32, &L->layer_scalar));
    TP_ASSIGN_OR_RETURN(L->inv_freq, UploadF32(backend_, RopeInvFreq(L->cfg.rope, hd)));
    weight_bytes_ += (2 * L->heads.q_heads * hd * d + 3 * I * d) * wbytes;
    layers_.push_back(std::move(L));
  }
  return absl::OkStatus();
}

absl::Status MtpDrafter::CheckStep(const MtpDraftStep& step, const Tensor& hidden) const {
  TP_RETURN_IF_ERROR(Validate(step));
  const int64_t n = static_cast<int64_t>(step.token_ids.size());
  const int64_t want_rows = step.hidden_rows.empty() ? n : hidden.rows;
  if (hidden.rows != want_rows || hidden.cols != config_.backbone_hidden_size ||
      hidden.dtype != backend_.activation_dtype() || hidden.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("MTP draft step: the hidden rows are [", hidden.rows, ", ",
                                                   hidden.cols, "] ", std::string(DTypeName(hidden.dtype)),
                                                   ", expected [", n, ", ", config_.backbone_hidden_size, "] ",
                                                   std::string(DTypeName(backend_.activation_dtype()))));
  }
  for (int64_t i = 0; i < static_cast<int64_t>(step.hidden_rows.size()); ++i) {
    if (step.hidden_rows[i] < 0 || step.hidden_rows[i] >= hidden.rows) {
      return absl::InvalidArgumentError(absl::StrCat("MTP draft step: sequence ", i, " reads hidden row ",
                                                     step.hidden_rows[i], " of ", hidden.rows));
    }
  }
  return absl::OkStatus();
}

absl::Status MtpDrafter::Validate(const MtpDraftStep& step) const {
  const int64_t n = static_cast<int64_t>(step.token_ids.size());
  if (static_cast<int64_t>(step.positions.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("MTP draft step: ", n, " token ids but ", step.positions.size(), " positions"));
  }
  if (!step.hidden_rows.empty() && static_cast<int64_t>(step.hidden_rows.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("MTP draft step: ", n, " token ids but ", step.hidden_rows.size(), " hidden row indices"));
  }
  const std::vector<int64_t>& num_blocks = target_.num_kv_blocks();
  if (num_blocks.empty()) return absl::FailedPreconditionError("MTP draft step before the target's AllocateKvCache");
  if (step.kv.size() != num_blocks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("MTP draft step: block tables for ", step.kv.size(),
                                                   " KV groups, the target has ", num_blocks.size()));
  }
  for (size_t g = 0; g < step.kv.size(); ++g) {
    const MtpDraftStep::Tables& t = step.kv[g];
    if (t.max_blocks_per_seq <= 0 || static_cast<int64_t>(t.block_tables.size()) != n * t.max_blocks_per_seq) {
      return absl::InvalidArgumentError(absl::StrCat("MTP draft step: KV group ", g, "'s block tables hold ",
                                                     t.block_tables.size(), " entries, expected ", n, " x ",
                                                     t.max_blocks_per_seq, " (max_blocks_per_seq > 0)"));
    }
  }
  const int64_t V = config_.text.vocab_size;
  const int32_t bs = target_.block_size();
  for (int64_t i = 0; i < n; ++i) {
    if (step.token_ids[i] < 0 || step.token_ids[i] >= V) {
      return absl::InvalidArgumentError(absl::StrCat("MTP draft step: sequence ", i, ": token id ", step.token_ids[i],
                                                     " is outside the vocabulary [0, ", V, ")"));
    }
    const int32_t L = step.positions[i];
    if (L < 1) {
      return absl::InvalidArgumentError(absl::StrCat("MTP draft step: sequence ", i, ": position ", L,
                                                     "; drafting needs at least one cached position (L >= 1)"));
    }
    // Every block the attention reads must be held: positions [first, L - 1] per layer.
    for (const auto& layer : layers_) {
      const int32_t g = target_.config().layers[layer->target_layer].kv_group;
      const MtpDraftStep::Tables& t = step.kv[g];
      const int32_t W = layer->cfg.sliding_window;
      const int32_t first = W > 0 ? std::max(0, L - 1 - W) : 0;
      for (int32_t b = first / bs; b <= (L - 1) / bs; ++b) {
        const int32_t id = b < t.max_blocks_per_seq ? t.block_tables[i * t.max_blocks_per_seq + b] : -1;
        if (id < 0 || id >= num_blocks[g]) {
          return absl::InvalidArgumentError(absl::StrCat(
              "MTP draft step: sequence ", i, " at position ", L, ": KV group ", g, " has no block ", b, " (positions ",
              b * bs, "-", b * bs + bs - 1, "), which the drafter reads",
              W > 0 ? absl::StrCat(" (sliding layers read the W + 1 = ", W + 1, " positions before L: with MTP ",
                                   "the sliding group frees blocks by a window of W + 2 = ", W + 2, ", not W)")
                    : ""));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status MtpDrafter::EnsureScratch(int64_t n) {
  Scratch& s = *scratch_;
  if (n <= s.capacity) return absl::OkStatus();
  const int64_t N = std::max<int64_t>(n, 8);
  const size_t act = DTypeSize(backend_.activation_dtype());
  const ModelConfig& c = config_.text;
  const int64_t d = c.hidden_size, D = config_.backbone_hidden_size, I = c.intermediate_size / comm_.size();
  int64_t max_q = 0;
  for (const auto& L : layers_) max_q = std::max<int64_t>(max_q, L->heads.q_heads * L->cfg.head_dim);
  auto alloc = [&](std::unique_ptr<Buffer>& b, int64_t elems, size_t elem_bytes) -> absl::Status {
    TP_ASSIGN_OR_RETURN(b, backend_.Allocate(static_cast<size_t>(elems) * elem_bytes));
    return absl::OkStatus();
  };
  for (auto* b : {&s.ids, &s.rope_pos, &s.mask_pos, &s.token_seq, &s.hidden_index}) {
    TP_RETURN_IF_ERROR(alloc(*b, N, 4));
  }
  TP_RETURN_IF_ERROR(alloc(s.e, N * D, act));
  TP_RETURN_IF_ERROR(alloc(s.hidden_in, N * D, act));
  for (auto* b : {&s.h, &s.x, &s.o, &s.z}) TP_RETURN_IF_ERROR(alloc(*b, N * d, act));
  TP_RETURN_IF_ERROR(alloc(s.q, N * max_q, act));
  TP_RETURN_IF_ERROR(alloc(s.attn, N * max_q, act));
  TP_RETURN_IF_ERROR(alloc(s.gate_up, N * 2 * I, act));
  TP_RETURN_IF_ERROR(alloc(s.act, N * I, act));
  TP_RETURN_IF_ERROR(alloc(s.proj, N * D, act));
  TP_RETURN_IF_ERROR(alloc(s.logits, N * lm_head_.rows(), act));
  if (config_.use_ordered_embeddings) TP_RETURN_IF_ERROR(alloc(s.scores, N * config_.num_centroids, act));
  s.capacity = N;
  return absl::OkStatus();
}

absl::Status MtpDrafter::Upload(const MtpDraftStep& step) {
  Scratch& s = *scratch_;
  const int64_t n = static_cast<int64_t>(step.token_ids.size());
  std::vector<int32_t> mask_pos(n), token_seq(n);
  for (int64_t i = 0; i < n; ++i) {
    mask_pos[i] = step.positions[i] - 1;
    token_seq[i] = static_cast<int32_t>(i);
  }
  backend_.CopyFromHost(s.ids->data(), step.token_ids.data(), n * 4);
  backend_.CopyFromHost(s.rope_pos->data(), step.positions.data(), n * 4);
  backend_.CopyFromHost(s.mask_pos->data(), mask_pos.data(), n * 4);
  backend_.CopyFromHost(s.token_seq->data(), token_seq.data(), n * 4);
  s.tables.resize(step.kv.size());
  s.table_capacity.resize(step.kv.size(), 0);
  s.table_width.resize(step.kv.size(), 0);
  for (size_t g = 0; g < step.kv.size(); ++g) {
    const auto& t = step.kv[g];
    const int64_t entries = static_cast<int64_t>(t.block_tables.size());
    if (entries > s.table_capacity[g] || !s.tables[g]) {
      TP_ASSIGN_OR_RETURN(s.tables[g], backend_.Allocate(std::max<size_t>(entries, 1) * 4));
      s.table_capacity[g] = entries;
    }
    backend_.CopyFromHost(s.tables[g]->data(), t.block_tables.data(), entries * 4);
    s.table_width[g] = t.max_blocks_per_seq;
  }
  return absl::OkStatus();
}

// Expects x = input_norm(h); leaves h updated and, when `next` is given, x =
// next->input_norm(h). Model::RunLayer's math (Gemma 4's sandwich norms and layer scalar)
// with the K/V half of the attention replaced by the target's cache.
void MtpDrafter::RunLayer(const Layer& L, const Layer* next, int64_t n, StepTimes* times) {
  Scratch& s = *scratch_;
  const DType adt = backend_.activation_dtype();
  const ModelConfig& c = config_.text;
  const int64_t d = c.hidden_size;
  const int32_t hd = L.cfg.head_dim;
  const float eps = c.rms_norm_eps;
  const Tensor h{s.h->data(), adt, n, d}, x{s.x->data(), adt, n, d}, o{s.o->data(), adt, n, d};
  const Tensor q{s.q->data(), adt, n, L.heads.q_heads * hd};
  const Tensor attn{s.attn->data(), adt, n, L.heads.q_heads * hd};

  // Query only: q_norm per head, RoPE at L; no K/V written.
  L.q_proj.Forward(backend_, x, q);
  backend_.RmsNorm(q.Reshape(hd), Weights(L.q_norm), eps, c.norm_kind, q.Reshape(hd));
  backend_.Rope(q, hd, static_cast<const int32_t*>(s.rope_pos->data()), Weights(L.inv_freq), 1.0f);
  // The paged kernel with the query placed at L - 1 for masking: keys [0, L-1], or the
  // last W + 1 of them with a window of W + 1 (transformers' bidirectional sliding mask).
  const Model::LayerKvCache kv = target_.layer_kv_cache(L.target_layer);
  const int32_t g = target_.config().layers[L.target_layer].kv_group;
  cpu::PagedAttentionParams ap;
  ap.num_q_heads = L.heads.q_heads;
  ap.num_kv_heads = L.heads.kv_heads;
  ap.head_dim = hd;
  ap.block_size = target_.block_size();
  ap.max_blocks_per_seq = s.table_width[g];
  ap.scale = c.attn_scale;  // 1 for Gemma 4
  ap.sliding_window = L.cfg.sliding_window > 0 ? L.cfg.sliding_window + 1 : 0;
  ap.softcap = 0.0f;
  ap.kv_dtype = kv.kv_dtype;
  backend_.PagedAttention(q, kv.k_cache, kv.v_cache, static_cast<const int32_t*>(s.token_seq->data()),
                          static_cast<const int32_t*>(s.mask_pos->data()),
                          static_cast<const int32_t*>(s.tables[g]->data()), ap, attn);
  L.o_proj.Forward(backend_, comm_, attn, o, *allreduce_timer_);
  backend_.ResidualNorm(o, Weights(L.post_attn_norm), h, 1.0f, Weights(L.pre_ffn_norm), eps, c.norm_kind, x);

  const int64_t I = L.gate_up_proj.out_features() / 2;
  const Tensor gu{s.gate_up->data(), adt, n, 2 * I}, a{s.act->data(), adt, n, I};
  L.gate_up_proj.Forward(backend_, x, gu);
  backend_.GatedActivation(gu, c.activation, a);
  L.down_proj.Forward(backend_, comm_, a, o, *allreduce_timer_);
  backend_.ResidualNorm(o, Weights(L.post_ffn_norm), h, L.layer_scalar,
                        next != nullptr ? Weights(next->input_norm) : nullptr, eps, c.norm_kind, x);
}

absl::StatusOr<MtpDraftOutput> MtpDrafter::Step(const MtpDraftStep& step, const Tensor& hidden, StepTimes* times) {
  const auto t0 = std::chrono::steady_clock::now();
  StepTimes local;
  if (times == nullptr) times = &local;
  *times = StepTimes{};
  rows_ = 0;
  const int64_t n = static_cast<int64_t>(step.token_ids.size());
  if (n == 0) return MtpDraftOutput{};
  TP_RETURN_IF_ERROR(CheckStep(step, hidden));
  TP_RETURN_IF_ERROR(EnsureScratch(n));
  Scratch& s = *scratch_;
  TP_RETURN_IF_ERROR(Upload(step));
  const DType adt = backend_.activation_dtype();
  const ModelConfig& c = config_.text;
  const int64_t d = c.hidden_size, D = config_.backbone_hidden_size;
  const Tensor e{s.e->data(), adt, n, D}, h{s.h->data(), adt, n, d}, x{s.x->data(), adt, n, d};
  const Tensor z{s.z->data(), adt, n, d}, proj{s.proj->data(), adt, n, D};

  // x = pre_projection([target_embed(token) * scale ; hidden]), as two products: `hidden`
  // is read here only, so it may be the previous step's proj.
  Tensor in = hidden;
  if (!step.hidden_rows.empty()) {
    in = Tensor{s.hidden_in->data(), adt, n, D};
    backend_.CopyFromHost(s.hidden_index->data(), step.hidden_rows.data(), n * 4);
    backend_.GatherRows(hidden, static_cast<const int32_t*>(s.hidden_index->data()), n, in);
  }
  target_.embedding().Lookup(backend_, comm_, static_cast<const int32_t*>(s.ids->data()), n, target_.embed_scale(), e,
                             *allreduce_timer_);
  backend_.Linear(e, pre_projection_embed_.view, nullptr, h);
  backend_.Linear(in, pre_projection_hidden_.view, nullptr, x);
  backend_.Add(h, x, h);
  backend_.RmsNorm(h, Weights(layers_[0]->input_norm), c.rms_norm_eps, c.norm_kind, x);
  for (size_t i = 0; i < layers_.size(); ++i) {
    RunLayer(*layers_[i], i + 1 < layers_.size() ? layers_[i + 1].get() : nullptr, n, times);
  }
  backend_.RmsNorm(h, Weights(final_norm_), c.rms_norm_eps, c.norm_kind, z);
  backend_.Linear(z, post_projection_.view, nullptr, proj);
  lm_head_.Logits(backend_, z, Tensor{s.logits->data(), adt, n, lm_head_.rows()});
  if (config_.use_ordered_embeddings) {
    backend_.Linear(z, centroids_.view, nullptr, Tensor{s.scores->data(), adt, n, config_.num_centroids});
  }
  rows_ = n;
  MtpDraftOutput out = Head(step, n);  // copies the logits to the host: the step's work is done
  times->allreduce_us = allreduce_timer_->TakeUs();
  times->total_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

MtpDraftOutput MtpDrafter::Head(const MtpDraftStep& step, int64_t n) {
  Scratch& s = *scratch_;
  const DType adt = backend_.activation_dtype();
  const int64_t V = config_.text.vocab_size, shard = lm_head_.shard_rows(), rows = lm_head_.rows();
  const int64_t v0 = lm_head_.vocab_start();
  const int tp = comm_.size();
  // This rank's logits, fp32 on the host, padded to the shard width.
  std::vector<float> local(n * shard, -std::numeric_limits<float>::infinity());
  {
    std::vector<uint8_t> raw(static_cast<size_t>(n * rows) * DTypeSize(adt));
    backend_.CopyToHost(raw.data(), s.logits->data(), raw.size());
    for (int64_t r = 0; r < n; ++r) ToF32(raw.data() + r * rows * DTypeSize(adt), adt, rows, &local[r * shard]);
  }
  // Centroid head: which of this rank's tokens each row scores (the tokens of its top-k
  // clusters; the same clusters on every rank, from the replicated centroids).
  std::vector<uint8_t> selected;  // [n, rows], centroid head only
  if (config_.use_ordered_embeddings) {
    const int64_t C = config_.num_centroids, k = config_.centroid_top_k, per = V / C;
    std::vector<float> scores(n * C);
    std::vector<uint8_t> raw(static_cast<size_t>(n * C) * DTypeSize(adt));
    backend_.CopyToHost(raw.data(), s.scores->data(), raw.size());
    ToF32(raw.data(), adt, n * C, scores.data());
    selected.assign(n * rows, 0);
    std::vector<int32_t> order(C);
    for (int64_t r = 0; r < n; ++r) {
      const float* sc = &scores[r * C];
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return sc[a] > sc[b] || (sc[a] == sc[b] && a < b); });
      for (int64_t j = 0; j < k; ++j) {
        for (int64_t t = 0; t < per; ++t) {
          const int64_t id = token_ordering_[order[j] * per + t];
          if (id >= v0 && id < v0 + rows) selected[r * rows + (id - v0)] = 1;
        }
      }
    }
  }
  // Per row this rank's best scored token (the first maximum) and, for the centroid head,
  // its smallest selected logit; the ranks' shards are in vocabulary order.
  struct Best {
    float value;
    int32_t id;
    float min_selected;
  };
  std::vector<Best> mine(n);
  for (int64_t r = 0; r < n; ++r) {
    Best b{-std::numeric_limits<float>::infinity(), -1, std::numeric_limits<float>::infinity()};
    for (int64_t j = 0; j < rows; ++j) {
      if (!selected.empty() && !selected[r * rows + j]) continue;
      const float v = local[r * shard + j];
      if (b.id < 0 || v > b.value) b = Best{v, static_cast<int32_t>(v0 + j), b.min_selected};
      b.min_selected = std::min(b.min_selected, v);
    }
    mine[r] = b;
  }
  std::vector<Best> all(static_cast<size_t>(tp) * n);
  if (tp > 1) {
    comm_.host().AllGather(mine.data(), n * sizeof(Best), all.data());
  } else {
    all = mine;
  }
  MtpDraftOutput out;
  out.token_ids.resize(n);
  std::vector<float> fill(n, 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    Best best{0, -1, std::numeric_limits<float>::infinity()};
    for (int k = 0; k < tp; ++k) {
      const Best& b = all[k * n + r];
      if (b.id >= 0 && (best.id < 0 || b.value > best.value)) best = Best{b.value, b.id, best.min_selected};
      best.min_selected = std::min(best.min_selected, b.min_selected);
    }
    TP_CHECK(best.id >= 0);
    out.token_ids[r] = best.id;
    // transformers: selected_logits.min().item() - 1.0, a Python float cast back to fp32.
    fill[r] = static_cast<float>(static_cast<double>(best.min_selected) - 1.0);
  }
  if (!step.return_logits) return out;
  if (!selected.empty()) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < rows; ++j) {
        if (!selected[r * rows + j]) local[r * shard + j] = fill[r];
      }
    }
  }
  std::vector<float> gathered(comm_.rank() == 0 ? static_cast<size_t>(tp * n * shard) : 0);
  if (tp > 1) {
    comm_.host().Gather(local.data(), local.size() * 4, gathered.data(), 0);
  } else {
    gathered.swap(local);
  }
  if (comm_.rank() == 0) {
    out.logits.resize(n * V);
    for (int k = 0; k < tp; ++k) {
      const int64_t start = k * shard, cols = std::min<int64_t>(shard, V - start);
      for (int64_t r = 0; r < n && cols > 0; ++r) {
        std::copy_n(&gathered[(k * n + r) * shard], cols, &out.logits[r * V + start]);
      }
    }
  }
  return out;
}

Tensor MtpDrafter::projected() const {
  if (rows_ == 0) return Tensor{};
  return Tensor{scratch_->proj->data(), backend_.activation_dtype(), rows_, config_.backbone_hidden_size};
}

Tensor MtpDrafter::normed() const {
  if (rows_ == 0) return Tensor{};
  return Tensor{scratch_->z->data(), backend_.activation_dtype(), rows_, config_.text.hidden_size};
}

}  // namespace tpserve
