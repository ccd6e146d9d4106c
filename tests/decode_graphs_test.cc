// Host-side rules of decode steps replayed from CUDA graphs (worker/decode_graphs.h): the
// default batch sizes and the engine's list, the fixed block-table width, which plans
// replay and how they are padded. Then the model's replay path on the CPU, through a
// StepGraphs that "replays" by running the step again: padded decode steps give the
// eager steps' tokens and logits; thread ranks (host collectives) stay eager.
// The same on a GPU with real graphs: tests/cuda_model_test.cc.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "gtest/gtest.h"
#include "launch/engine_setup.h"
#include "tests/offline_harness.h"
#include "tests/tp_harness.h"
#include "worker/backend.h"
#include "worker/decode_graphs.h"
#include "worker/forwarding_backend.h"
#include "worker/weight_source.h"

namespace tpserve {
namespace {

TEST(DecodeGraphsTest, DefaultBatchSizes) {
  EXPECT_EQ(DefaultCudaGraphBatchSizes(1), (std::vector<int32_t>{1}));
  EXPECT_EQ(DefaultCudaGraphBatchSizes(3), (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(DefaultCudaGraphBatchSizes(20), (std::vector<int32_t>{1, 2, 4, 8, 16, 24}));
  const std::vector<int32_t> full = DefaultCudaGraphBatchSizes(256);
  ASSERT_EQ(full.size(), 35u);  // 1, 2, 4, 8, 16, ..., 256
  EXPECT_EQ(full[3], 8);
  EXPECT_EQ(full[4], 16);
  EXPECT_EQ(full.back(), 256);
  EXPECT_EQ(DefaultCudaGraphBatchSizes(1024), full);  // at most 256
  EXPECT_EQ(DefaultCudaGraphBatchSizes(0), (std::vector<int32_t>{1}));
}

TEST(DecodeGraphsTest, EngineBatchSizes) {
  EngineOptions o;
  o.max_num_seqs = 20;
  EXPECT_TRUE(o.enforce_eager);  // until the graph path has run on a GPU
  EXPECT_TRUE(EngineCudaGraphBatchSizes(o, DeviceKind::kCuda).empty());
  o.enforce_eager = false;
  EXPECT_TRUE(EngineCudaGraphBatchSizes(o, DeviceKind::kCpu).empty());
  EXPECT_EQ(EngineCudaGraphBatchSizes(o, DeviceKind::kCuda), DefaultCudaGraphBatchSizes(20));
  o.enforce_eager = true;
  EXPECT_TRUE(EngineCudaGraphBatchSizes(o, DeviceKind::kCuda).empty());
  o.enforce_eager = false;
  o.cuda_graph_batch_sizes = {1, 3, 64};
  o.max_num_batched_tokens = 32;  // a decode step never holds more tokens than a step
  EXPECT_EQ(EngineCudaGraphBatchSizes(o, DeviceKind::kCuda), (std::vector<int32_t>{1, 3}));
}

TEST(DecodeGraphsTest, BlockTableWidth) {
  EXPECT_EQ(DecodeBlockTableWidth(1024, 16), 64);
  EXPECT_EQ(DecodeBlockTableWidth(1025, 16), 65);
  EXPECT_EQ(DecodeBlockTableWidth(262144, 16), 16384);
  EXPECT_EQ(DecodeBlockTableWidth(1, 16), 1);
}

// Three sequences decoding one token each: sequence s at position 10 + s, in block table
// rows of `width` columns (blocks 3s, 3s + 1, 3s + 2).
StepPlan Decode3(int32_t width) {
  StepPlan p;
  p.num_seqs = 3;
  KvGroupPlan kv;
  kv.max_blocks_per_seq = width;
  for (int32_t s = 0; s < 3; ++s) {
    p.token_ids.push_back(100 + s);
    p.positions.push_back(10 + s);
    p.token_seq.push_back(s);
    p.logit_rows.push_back(s);
    kv.slot_mapping.push_back(3 * s * 4 + 2 + s);
    for (int32_t b = 0; b < width; ++b) kv.block_tables.push_back(b < 3 ? 3 * s + b : -1);
  }
  p.kv.assign(2, kv);
  return p;
}

TEST(DecodeGraphsTest, WhichPlansReplay) {
  const int32_t bs = 4, width = 8;
  EXPECT_TRUE(IsReplayableDecode(Decode3(3), width, bs));
  StepPlan p = Decode3(3);
  p.token_seq = {2, 0, 1};  // any order of the sequences
  EXPECT_TRUE(IsReplayableDecode(p, width, bs));
  p = Decode3(3);
  p.token_seq = {0, 0, 1};  // two tokens of one sequence: prefill
  EXPECT_FALSE(IsReplayableDecode(p, width, bs));
  p = Decode3(3);
  p.logit_rows = {2, 1, 0};
  EXPECT_FALSE(IsReplayableDecode(p, width, bs));
  p = Decode3(3);
  p.logit_rows.pop_back();
  EXPECT_FALSE(IsReplayableDecode(p, width, bs));
  p = Decode3(3);
  p.num_seqs = 4;  // a table row without a token this step
  EXPECT_FALSE(IsReplayableDecode(p, width, bs));
  p = Decode3(3);
  p.sampling.resize(2);  // sampling rows must match the logit rows
  EXPECT_FALSE(IsReplayableDecode(p, width, bs));
  p.sampling.resize(3);
  EXPECT_TRUE(IsReplayableDecode(p, width, bs));
  // Position 12 is in block 3: outside a fixed width of 3 blocks.
  EXPECT_FALSE(IsReplayableDecode(Decode3(3), 3, bs));
  EXPECT_FALSE(IsReplayableDecode(StepPlan{}, width, bs));
}

TEST(DecodeGraphsTest, PadsToTheCapturedSize) {
  const StepPlan plan = Decode3(3);
  const StepPlan p = PadDecodeStep(plan, 4, 5);
  EXPECT_EQ(p.token_ids, (std::vector<int32_t>{100, 101, 102, 0}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{10, 11, 12, -1}));
  EXPECT_EQ(p.token_seq, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(p.logit_rows, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(p.num_seqs, 4);
  ASSERT_EQ(p.kv.size(), 2u);
  for (const KvGroupPlan& kv : p.kv) {
    EXPECT_EQ(kv.max_blocks_per_seq, 3);  // the plan's columns; the device table is 5 wide
    EXPECT_EQ(kv.slot_mapping, (std::vector<int32_t>{2, 15, 28, -1}));
    EXPECT_EQ(kv.block_tables, (std::vector<int32_t>{0, 1, 2,  //
                                                     3, 4, 5,  //
                                                     6, 7, 8,  //
                                                     -1, -1, -1}));
  }
  // A plan wider than the fixed width keeps the columns its positions reach.
  const StepPlan narrow = PadDecodeStep(Decode3(6), 3, 4);
  EXPECT_EQ(narrow.kv[0].block_tables, (std::vector<int32_t>{0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1}));
  // Sampling is not padded: it runs on the first T rows after the replay.
  StepPlan sampled = Decode3(3);
  sampled.sampling.resize(3);
  sampled.penalty_offsets.assign(4, 0);
  EXPECT_TRUE(PadDecodeStep(sampled, 4, 5).sampling.empty());
}

// "Captures" on the second run of a size, like CudaGraphRunner, and "replays" by running
// the step again: the model's whole replay path (padding, fixed width, first T rows back)
// on the CPU.
class FakeStepGraphs : public StepGraphs {
 public:
  FakeStepGraphs(std::vector<int32_t> sizes, int* replays, int* clears)
      : sizes_(std::move(sizes)), replays_(replays), clears_(clears) {
    std::sort(sizes_.begin(), sizes_.end());
  }
  int32_t PaddedBatchSize(int32_t n) const override {
    auto it = std::lower_bound(sizes_.begin(), sizes_.end(), n);
    return it == sizes_.end() ? 0 : *it;
  }
  absl::Status Run(int32_t padded, const std::function<void()>& step) override {
    EXPECT_TRUE(std::binary_search(sizes_.begin(), sizes_.end(), padded));
    if (runs_[padded]++ >= 1) ++*replays_;
    step();
    return absl::OkStatus();
  }
  bool captured(int32_t padded) const override {
    auto it = runs_.find(padded);
    return it != runs_.end() && it->second >= 2;
  }
  void Clear() override {
    runs_.clear();
    ++*clears_;
  }

 private:
  std::vector<int32_t> sizes_;
  std::map<int32_t, int> runs_;
  int* replays_;
  int* clears_;
};

// The CPU backend plus FakeStepGraphs.
class GraphCpuBackend : public ForwardingBackend {
 public:
  explicit GraphCpuBackend(int* replays)
      : ForwardingBackend(MakeCpuBackend(BackendOptions{.threads = 1})), replays_(replays) {}
  std::string name() const override { return "cpu+fake-graphs"; }
  void PagedAttention(const Tensor& q, const void* k_cache, const void* v_cache, const int32_t* token_seq,
                      const int32_t* token_pos, const int32_t* block_tables, const cpu::PagedAttentionParams& p,
                      Tensor out) override {
    max_table_width = std::max(max_table_width, p.max_blocks_per_seq);
    inner().PagedAttention(q, k_cache, v_cache, token_seq, token_pos, block_tables, p, out);
  }
  std::unique_ptr<StepGraphs> MakeStepGraphs(const std::vector<int32_t>& batch_sizes) override {
    return std::make_unique<FakeStepGraphs>(batch_sizes, replays_, &graph_clears);
  }
  void SetKernelOptions(const KernelOptions& k) override {
    kernel_options.push_back(k);
    inner().SetKernelOptions(k);
  }
  int32_t max_table_width = 0;
  int graph_clears = 0;
  std::vector<KernelOptions> kernel_options;  // as SetKernelOptions received them

 private:
  int* replays_;
};

struct GenResult {
  std::vector<GenerationOutput> outputs;
  bool graphs = false;
  int replays = 0;
  int32_t max_table_width = 0;
  // With `switch_to`: the same prompts again after Model::set_kernel_options, the replays
  // and graph drops that made, and what the backend received.
  std::vector<GenerationOutput> switched_outputs;
  int switched_replays = 0, switched_clears = 0;
  std::vector<KernelOptions> backend_kernels;
};

// Three prompts (so decode steps of 3 pad to 4) through the Generator, greedy, with logits.
// max_model_len 40 is 10 blocks wide, beyond what the generator's tables hold; with
// fit_kv_blocks > 0 the cache has that many blocks and the model fits its graphs to it.
GenResult Generate(const std::string& fixture, int tp, const std::vector<int32_t>& graph_sizes,
                   int32_t max_model_len = 40, int64_t fit_kv_blocks = 0,
                   const std::optional<KernelOptions>& switch_to = std::nullopt) {
  GenResult r;
  testing::RunThreads(tp, [&](Communicator& comm) {
    auto config = LoadModelConfig(testing::FixtureDir(fixture));
    ASSERT_TRUE(config.ok()) << config.status();
    auto source = OpenCheckpointSource(testing::FixtureDir(fixture));
    ASSERT_TRUE(source.ok()) << source.status();
    int replays = 0;
    GraphCpuBackend backend(&replays);
    ModelOptions mo;
    mo.block_size = 4;
    mo.cuda_graph_batch_sizes = graph_sizes;
    mo.max_model_len = max_model_len;
    auto model = Model::Load(*config, **source, backend, comm, mo);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE((*model)->AllocateKvCache(fit_kv_blocks > 0 ? fit_kv_blocks : 64).ok());
    if (fit_kv_blocks > 0) (*model)->FitGraphsToKvCache();
    if (comm.rank() != 0) {
      ASSERT_TRUE(RunWorkerLoop(**model, comm).ok());
      return;
    }
    r.graphs = (*model)->cuda_graphs();
    StepExecutor exec(**model, comm);
    const std::vector<std::vector<int32_t>> prompts = {{5, 6, 7, 8, 9}, {11, 12}, {13, 14, 15, 16, 17, 18, 19}};
    auto outs = testing::GreedyGenerate(**model, exec, prompts, 6);
    ASSERT_TRUE(outs.ok()) << outs.status();
    r.outputs = std::move(outs->outputs);
    r.replays = replays;
    EXPECT_EQ((*model)->replayed_steps(), replays);
    if (switch_to.has_value()) {
      const int clears = backend.graph_clears;
      (*model)->set_kernel_options(*switch_to);
      auto again = testing::GreedyGenerate(**model, exec, prompts, 6);
      ASSERT_TRUE(again.ok()) << again.status();
      r.switched_outputs = std::move(again->outputs);
      r.switched_replays = replays - r.replays;
      r.switched_clears = backend.graph_clears - clears;
      r.backend_kernels = backend.kernel_options;
    }
    exec.Shutdown();
    r.max_table_width = backend.max_table_width;
  });
  return r;
}

void ExpectSame(const GenResult& a, const GenResult& b) {
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t s = 0; s < a.outputs.size(); ++s) {
    EXPECT_EQ(a.outputs[s].output_ids, b.outputs[s].output_ids) << "sequence " << s;
    ASSERT_EQ(a.outputs[s].logits.size(), b.outputs[s].logits.size());
    for (size_t t = 0; t < a.outputs[s].logits.size(); ++t) {
      EXPECT_LE(testing::ToleranceRatio(a.outputs[s].logits[t], b.outputs[s].logits[t], 1e-4, 1e-4), 1.0)
          << "sequence " << s << " step " << t;
    }
  }
}

TEST(DecodeGraphsTest, ReplayedDecodeStepsMatchEager) {
  const GenResult eager = Generate("qwen3", 1, {});
  EXPECT_FALSE(eager.graphs);
  const GenResult graphs = Generate("qwen3", 1, {1, 2, 4});
  ASSERT_TRUE(graphs.graphs);
  EXPECT_GE(graphs.replays, 3);  // 5 decode steps of 3 -> 4: one warm-up, then captured
  EXPECT_EQ(graphs.max_table_width, DecodeBlockTableWidth(40, 4));
  ExpectSame(eager, graphs);
}

// A cache of 16 blocks of 4 tokens holds no sequence beyond 64 tokens: replayed steps
// take 16 table columns, not max_model_len 4000's 1000, and compute the same.
TEST(DecodeGraphsTest, GraphsFitTheirTablesToTheKvCache) {
  const GenResult eager = Generate("qwen3", 1, {});
  const GenResult wide = Generate("qwen3", 1, {1, 2, 4}, /*max_model_len=*/4000);
  EXPECT_EQ(wide.max_table_width, DecodeBlockTableWidth(4000, 4));
  const GenResult fitted = Generate("qwen3", 1, {1, 2, 4}, /*max_model_len=*/4000, /*fit_kv_blocks=*/16);
  ASSERT_TRUE(fitted.graphs);
  EXPECT_GE(fitted.replays, 3);
  EXPECT_EQ(fitted.max_table_width, 16);
  ExpectSame(eager, fitted);
  // A cache that holds more than max_model_len changes nothing.
  const GenResult roomy = Generate("qwen3", 1, {1, 2, 4}, /*max_model_len=*/40, /*fit_kv_blocks=*/64);
  EXPECT_EQ(roomy.max_table_width, DecodeBlockTableWidth(40, 4));
}

// Model::set_kernel_options reaches the backend at the next step, once, and drops the
// graphs that hold the old kernels; they are captured again on use, and the steps compute
// the same (the CPU backend has one set of kernels).
TEST(DecodeGraphsTest, KernelOptionsReachTheBackendAndDropTheGraphs) {
  const KernelOptions fast{.bulk_gemv = true, .pdl = true};
  const GenResult r = Generate("qwen3", 1, {1, 2, 4}, 40, 0, fast);
  ASSERT_TRUE(r.graphs);
  ASSERT_EQ(r.backend_kernels.size(), 1u);
  EXPECT_TRUE(r.backend_kernels[0] == fast);
  EXPECT_EQ(r.switched_clears, 1);
  EXPECT_GE(r.switched_replays, 3);  // warm-up and capture again, then replays
  ASSERT_EQ(r.switched_outputs.size(), r.outputs.size());
  for (size_t s = 0; s < r.outputs.size(); ++s) {
    EXPECT_EQ(r.switched_outputs[s].output_ids, r.outputs[s].output_ids) << "sequence " << s;
    EXPECT_EQ(r.switched_outputs[s].logits, r.outputs[s].logits) << "sequence " << s;
  }
}

TEST(DecodeGraphsTest, LargerStepsThanTheSizesRunEagerly) {
  const GenResult eager = Generate("qwen3", 1, {});
  const GenResult graphs = Generate("qwen3", 1, {1, 2});  // decode steps of 3 tokens
  ASSERT_TRUE(graphs.graphs);
  EXPECT_EQ(graphs.replays, 0);
  ExpectSame(eager, graphs);
}

// Host collectives synchronize, so thread ranks cannot capture: graphs stay off, and the
// steps are the eager ones.
TEST(DecodeGraphsTest, RanksWithHostCollectivesStayEager) {
  const GenResult eager = Generate("qwen3", 2, {});
  const GenResult asked = Generate("qwen3", 2, {1, 2, 4});
  EXPECT_FALSE(asked.graphs);
  EXPECT_EQ(asked.replays, 0);
  ExpectSame(eager, asked);
}

// Fails the capture of one size as CudaGraphRunner does (the step reruns eagerly, the
// size stays eager) and counts the steps each size ran.
class FailingStepGraphs : public FakeStepGraphs {
 public:
  FailingStepGraphs(std::vector<int32_t> sizes, int32_t fail, std::map<int32_t, int>* steps, int* replays,
                    int* clears)
      : FakeStepGraphs(std::move(sizes), replays, clears), fail_(fail), steps_(steps) {}
  absl::Status Run(int32_t padded, const std::function<void()>& step) override {
    if (padded != fail_) {
      return FakeStepGraphs::Run(padded, [&] {
        ++(*steps_)[padded];
        step();
      });
    }
    ++(*steps_)[padded];
    step();
    if (warmed_up_) return absl::InternalError("capture refused");
    warmed_up_ = true;
    return absl::OkStatus();
  }
  bool captured(int32_t padded) const override { return padded != fail_ && FakeStepGraphs::captured(padded); }

 private:
  int32_t fail_;
  bool warmed_up_ = false;
  std::map<int32_t, int>* steps_;
};

class FailingGraphCpuBackend : public GraphCpuBackend {
 public:
  FailingGraphCpuBackend(int32_t fail, std::map<int32_t, int>* steps, int* replays)
      : GraphCpuBackend(replays), fail_(fail), steps_(steps), replays_(replays) {}
  std::unique_ptr<StepGraphs> MakeStepGraphs(const std::vector<int32_t>& batch_sizes) override {
    return std::make_unique<FailingStepGraphs>(batch_sizes, fail_, steps_, replays_, &graph_clears);
  }

 private:
  int32_t fail_;
  std::map<int32_t, int>* steps_;
  int* replays_;
};

// A size whose capture fails does not end CaptureCudaGraphs early: every later size still
// runs its warm-up and capture steps (on several ranks they hold all-reduces that the other
// ranks wait in), and the first error comes back at the end.
TEST(DecodeGraphsTest, CaptureRunsEverySizeAfterAFailure) {
  auto config = LoadModelConfig(testing::FixtureDir("qwen3"));
  ASSERT_TRUE(config.ok()) << config.status();
  auto source = OpenCheckpointSource(testing::FixtureDir("qwen3"));
  ASSERT_TRUE(source.ok()) << source.status();
  std::map<int32_t, int> steps;
  int replays = 0;
  FailingGraphCpuBackend backend(/*fail=*/2, &steps, &replays);
  auto comm = LocalGroup(1).Rank(0);
  ModelOptions mo;
  mo.block_size = 4;
  mo.cuda_graph_batch_sizes = {1, 2, 4};
  mo.max_model_len = 40;
  auto model = Model::Load(*config, **source, backend, *comm, mo);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->cuda_graphs());
  ASSERT_TRUE((*model)->AllocateKvCache(64).ok());
  const absl::Status st = (*model)->CaptureCudaGraphs();
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_NE(st.message().find("capture refused"), std::string::npos) << st;
  EXPECT_EQ(steps, (std::map<int32_t, int>{{1, 2}, {2, 2}, {4, 2}}));
}

// The plain CPU backend has no graphs: the option changes nothing.
TEST(DecodeGraphsTest, CpuBackendIgnoresTheSizes) {
  auto config = LoadModelConfig(testing::FixtureDir("qwen3"));
  ASSERT_TRUE(config.ok()) << config.status();
  auto source = OpenCheckpointSource(testing::FixtureDir("qwen3"));
  ASSERT_TRUE(source.ok()) << source.status();
  auto backend = MakeCpuBackend(BackendOptions{.threads = 1});
  auto comm = LocalGroup(1).Rank(0);
  ModelOptions mo;
  mo.cuda_graph_batch_sizes = {1, 2, 4};
  auto model = Model::Load(*config, **source, *backend, *comm, mo);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE((*model)->cuda_graphs());
  ASSERT_TRUE((*model)->AllocateKvCache(8).ok());
  EXPECT_TRUE((*model)->ReserveGraphBuffers().ok());
  EXPECT_TRUE((*model)->CaptureCudaGraphs().ok());
  mo.cuda_graph_batch_sizes = {0};
  EXPECT_FALSE(Model::Load(*config, **source, *backend, *comm, mo).ok());
}

// Model::TuneKernels hands the backend every projection of this rank's shard once per
// layer (q|k|v with its split: two parts where K = V, as Gemma 4's full layers), the
// layers' at up to max_tokens rows and the LM head at up to max_logit_rows, and each
// layer's attention (this rank's heads, head_dim, window) at up to max_tokens; passes the
// backend's report back, and drops the graphs (they hold the old kernels).
class TuneRecordingBackend : public GraphCpuBackend {
 public:
  using GraphCpuBackend::GraphCpuBackend;
  absl::StatusOr<TuneReport> TuneKernels(const KernelUses& uses) override {
    recorded = uses.linear;
    attention = uses.attention;
    return TuneReport{.products = 3, .changed = 1, .seconds = 0.5, .lines = {"a", "b", "c"}};
  }
  std::vector<LinearUse> recorded;
  std::vector<AttentionUse> attention;
};

TEST(DecodeGraphsTest, TuneKernelsHandsEveryProjectionToTheBackend) {
  for (int tp : {1, 2}) {
    testing::RunThreads(tp, [&](Communicator& comm) {
      const std::string fixture = "gemma4_text";
      auto config = LoadModelConfig(testing::FixtureDir(fixture));
      ASSERT_TRUE(config.ok()) << config.status();
      auto source = OpenCheckpointSource(testing::FixtureDir(fixture));
      ASSERT_TRUE(source.ok()) << source.status();
      int replays = 0;
      TuneRecordingBackend backend(&replays);
      ModelOptions mo;
      mo.block_size = 4;
      mo.cuda_graph_batch_sizes = {1, 2};
      mo.max_model_len = 40;
      auto model = Model::Load(*config, **source, backend, comm, mo);
      ASSERT_TRUE(model.ok()) << model.status();
      ASSERT_TRUE((*model)->AllocateKvCache(16).ok());
      const int clears = backend.graph_clears;
      auto report = (*model)->TuneKernels(/*max_tokens=*/96, /*max_logit_rows=*/12);
      ASSERT_TRUE(report.ok()) << report.status();
      EXPECT_EQ(report->products, 3);
      EXPECT_EQ(report->lines.size(), 3u);
      // Thread ranks cannot capture (host collectives): graphs at TP 1 only.
      EXPECT_EQ(backend.graph_clears, clears + (tp == 1 ? 1 : 0)) << "tp " << tp;
      const ModelConfig& c = *config;
      ASSERT_EQ(backend.recorded.size(), static_cast<size_t>(4 * c.num_layers + 1));
      const int64_t H = c.hidden_size;
      for (int l = 0; l < c.num_layers; ++l) {
        const LayerConfig& lc = c.layers[l];
        auto shard = ShardHeads(c.num_heads, lc.num_kv_heads, comm.rank(), tp, l);
        ASSERT_TRUE(shard.ok()) << shard.status();
        const int64_t q = int64_t{shard->q_heads} * lc.head_dim, kv = int64_t{shard->kv_heads} * lc.head_dim;
        const LinearUse& qkv = backend.recorded[4 * l];
        const std::vector<int64_t> parts = lc.k_eq_v ? std::vector<int64_t>{q, kv} : std::vector<int64_t>{q, kv, kv};
        EXPECT_EQ(qkv.parts, parts) << "layer " << l << " tp " << tp;
        EXPECT_EQ(qkv.w.rows, q + kv * static_cast<int64_t>(parts.size() - 1)) << "layer " << l;
        EXPECT_EQ(qkv.w.cols, H);
        EXPECT_EQ(backend.recorded[4 * l + 1].w.rows, H) << "o_proj, layer " << l;       // row parallel
        EXPECT_EQ(backend.recorded[4 * l + 1].w.cols, q) << "o_proj, layer " << l;
        EXPECT_EQ(backend.recorded[4 * l + 2].w.rows, 2 * c.intermediate_size / tp) << "gate|up, layer " << l;
        EXPECT_EQ(backend.recorded[4 * l + 3].w.cols, c.intermediate_size / tp) << "down, layer " << l;
        for (int i = 0; i < 4; ++i) {
          EXPECT_EQ(backend.recorded[4 * l + i].max_rows, 96) << "layer " << l << " projection " << i;
          if (i > 0) {
            EXPECT_TRUE(backend.recorded[4 * l + i].parts.empty());
          }
        }
      }
      ASSERT_EQ(backend.attention.size(), static_cast<size_t>(c.num_layers));
      for (int l = 0; l < c.num_layers; ++l) {
        const LayerConfig& lc = c.layers[l];
        auto shard = ShardHeads(c.num_heads, lc.num_kv_heads, comm.rank(), tp, l);
        ASSERT_TRUE(shard.ok()) << shard.status();
        const AttentionUse& a = backend.attention[l];
        EXPECT_EQ(a.max_tokens, 96) << "layer " << l;
        EXPECT_EQ(a.p.head_dim, lc.head_dim) << "layer " << l;
        EXPECT_EQ(a.p.num_q_heads, shard->q_heads) << "layer " << l;
        EXPECT_EQ(a.p.num_kv_heads, shard->kv_heads) << "layer " << l;
        EXPECT_EQ(a.p.sliding_window, lc.sliding ? lc.sliding_window : 0) << "layer " << l;
      }
      const LinearUse& head = backend.recorded.back();
      EXPECT_EQ(head.max_rows, 12);
      EXPECT_EQ(head.w.rows, (c.vocab_size + tp - 1) / tp);
      EXPECT_EQ(head.w.cols, H);
      EXPECT_TRUE(std::any_of(c.layers.begin(), c.layers.end(), [](const LayerConfig& lc) { return lc.k_eq_v; }))
          << "the fixture should have a K = V layer";
    });
  }
}

// --kernels: split, bulk or tuned, each with an optional +pdl; anything else names them.
TEST(KernelOptionsTest, ParseKnowsTheVocabulary) {
  struct Case {
    std::string spec;
    KernelOptions want;
  };
  for (const Case& c : std::vector<Case>{{"split", {}},
                                         {"split+pdl", {.pdl = true}},
                                         {"bulk", {.bulk_gemv = true}},
                                         {"bulk+pdl", {.bulk_gemv = true, .pdl = true}},
                                         {"tuned", {.tuned = true}},
                                         {"tuned+pdl", {.pdl = true, .tuned = true}}}) {
    auto k = ParseKernelOptions(c.spec);
    ASSERT_TRUE(k.ok()) << c.spec << ": " << k.status();
    EXPECT_TRUE(*k == c.want) << c.spec;
    EXPECT_EQ(KernelOptionsName(*k), c.spec);  // and back
  }
  for (const std::string bad : {"", "fast", "pdl", "+pdl", "tuned+", "bulk+tuned", "split+pdl+pdl", "SPLIT"}) {
    auto k = ParseKernelOptions(bad);
    ASSERT_FALSE(k.ok()) << bad;
    EXPECT_NE(std::string(k.status().message()).find("split, bulk, tuned, split+pdl, bulk+pdl, tuned+pdl"),
              std::string::npos)
        << k.status();
  }
}

}  // namespace
}  // namespace tpserve
