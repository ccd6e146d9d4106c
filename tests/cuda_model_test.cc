// The whole model on the CUDA backend against the CPU backend at bf16 precision
// (tests/bf16_reference_backend.h), on the tiny transformers checkpoints
// (tests/fixtures/models), both with bf16 weights: prompt logits and teacher-forced decode
// logits within tolerance and the same greedy tokens; a batch of prompts through the tiled
// prefill kernel; and 2 thread-ranks sharing one GPU through StagedCommunicator(LocalGroup)
// against 1 rank; decode steps replayed from CUDA graphs against eager ones. GPU test
// (ctest -L gpu).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "gtest/gtest.h"
#include "tests/bf16_reference_backend.h"
#include "tests/cuda_test_util.h"
#include "tests/sampling_reference.h"
#include "tests/tp_harness.h"
#include "worker/cuda_backend.h"
#include "worker/nccl_communicator.h"
#include "worker/staged_communicator.h"
#include "worker/weight_source.h"

namespace tpserve {
namespace {

// The CPU reference rounds where the GPU rounds, so what remains is fp32 summation order
// flipping bf16 roundings (measured on CPU: < 0.1 on these fixtures) and the GPU's bf16
// attention probabilities; 2.5x that margin.
constexpr testing::Tolerance kModelTol{0.25, 0.03};
// A greedy choice must agree unless the reference's top-2 gap is within this (bf16
// logits of magnitude 16 are 0.0625 apart, so near ties are common).
constexpr float kGreedyMargin = 0.3f;
constexpr int32_t kBlock = 16;

// One sequence (or `copies` identical ones in scrambled blocks) stepped by hand: the
// prompt in one step with logits at every prompt position, then one decode step per
// teacher-forced token. Returns every logits row, [rows][vocab].
struct Steps {
  std::vector<int32_t> prompt;
  std::vector<int32_t> forced;  // decode inputs
  int copies = 1;
};

StepPlan PrefillPlan(const Steps& s, size_t groups, int32_t max_blocks) {
  StepPlan plan;
  plan.num_seqs = s.copies;
  KvGroupPlan kv;
  kv.max_blocks_per_seq = max_blocks;
  const int32_t n = static_cast<int32_t>(s.prompt.size());
  for (int c = 0; c < s.copies; ++c) {
    // Copy c holds blocks c, c + copies, c + 2 copies, ... (interleaved physical blocks).
    for (int32_t b = 0; b < max_blocks; ++b) kv.block_tables.push_back(b * s.copies + c);
    for (int32_t p = 0; p < n; ++p) {
      plan.token_ids.push_back(s.prompt[p]);
      plan.positions.push_back(p);
      plan.token_seq.push_back(c);
      kv.slot_mapping.push_back(kv.block_tables[c * max_blocks + p / kBlock] * kBlock + p % kBlock);
      if (s.copies == 1 || p == n - 1) plan.logit_rows.push_back(c * n + p);
    }
  }
  plan.kv.assign(groups, kv);
  return plan;
}

StepPlan DecodePlan(int32_t token, int32_t pos, size_t groups, int32_t max_blocks) {
  StepPlan plan;
  plan.num_seqs = 1;
  KvGroupPlan kv;
  kv.max_blocks_per_seq = max_blocks;
  for (int32_t b = 0; b < max_blocks; ++b) kv.block_tables.push_back(b);
  plan.token_ids = {token};
  plan.positions = {pos};
  plan.token_seq = {0};
  kv.slot_mapping = {pos};
  plan.kv.assign(groups, kv);
  plan.logit_rows = {0};
  return plan;
}

// Runs the steps on every rank of `comm` with `backend`; rank 0 returns the logits rows.
std::vector<std::vector<float>> RunSteps(const std::string& fixture, Backend& backend, Communicator& comm,
                                         const Steps& s) {
  std::vector<std::vector<float>> rows;
  auto config = LoadModelConfig(testing::FixtureDir(fixture));
  EXPECT_TRUE(config.ok()) << config.status();
  auto source = OpenCheckpointSource(testing::FixtureDir(fixture));
  EXPECT_TRUE(source.ok()) << source.status();
  if (!config.ok() || !source.ok()) return rows;
  ModelOptions mo;
  mo.weight_dtype = DType::kBF16;
  mo.block_size = kBlock;
  auto model = Model::Load(*config, **source, backend, comm, mo);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return rows;
  const int32_t total = static_cast<int32_t>(s.prompt.size() + s.forced.size());
  const int32_t max_blocks = (total + kBlock - 1) / kBlock;
  EXPECT_TRUE((*model)->AllocateKvCache(max_blocks * s.copies).ok());
  const size_t groups = (*model)->num_kv_blocks().size();
  const int64_t V = config->vocab_size;
  auto collect = [&](const absl::StatusOr<StepOutput>& out) {
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok() || comm.rank() != 0) return;
    const std::vector<float>& logits = out->logits;
    for (size_t r = 0; r * V < logits.size(); ++r) rows.emplace_back(logits.begin() + r * V, logits.begin() + (r + 1) * V);
  };
  collect((*model)->Forward(PrefillPlan(s, groups, max_blocks), nullptr));
  for (size_t i = 0; i < s.forced.size(); ++i) {
    const int32_t pos = static_cast<int32_t>(s.prompt.size() + i);
    collect((*model)->Forward(DecodePlan(s.forced[i], pos, groups, max_blocks), nullptr));
  }
  return rows;
}

std::vector<std::vector<float>> RunOnCpu(const std::string& fixture, const Steps& s, uint64_t jitter_seed = 0) {
  std::vector<std::vector<float>> rows;
  testing::RunThreads(1, [&](Communicator& comm) {
    testing::Bf16ReferenceBackend backend(jitter_seed);
    rows = RunSteps(fixture, backend, comm, s);
  });
  return rows;
}

// `ranks` thread-ranks sharing GPU 0, collectives staged through pinned host memory.
std::vector<std::vector<float>> RunOnGpu(const std::string& fixture, const Steps& s, int ranks) {
  std::vector<std::vector<float>> rows;
  testing::RunThreads(ranks, [&](Communicator& host) {
    auto backend = MakeCudaBackend(BackendOptions{.device = 0});
    ASSERT_TRUE(backend.ok()) << backend.status();
    StagedCommunicator comm(host, (*backend)->stream());
    auto got = RunSteps(fixture, **backend, comm, s);
    if (host.rank() == 0) rows = std::move(got);
  });
  return rows;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}
float TopGap(const std::vector<float>& v) {
  std::vector<float> c = v;
  std::partial_sort(c.begin(), c.begin() + 2, c.end(), std::greater<float>());
  return c[0] - c[1];
}

// Logits close everywhere; the argmax equal wherever the reference is not a near tie.
void ExpectSameModel(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                     const std::string& what, testing::Tolerance tol = kModelTol,
                     float greedy_margin = kGreedyMargin) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t r = 0; r < want.size(); ++r) {
    EXPECT_TRUE(testing::AllClose(got[r], want[r], tol)) << what << " row " << r;
    if (TopGap(want[r]) > greedy_margin) {
      EXPECT_EQ(Argmax(got[r]), Argmax(want[r])) << what << " row " << r;
    }
  }
}

float MaxAbsDiff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  float worst = 0;
  for (size_t r = 0; r < a.size() && r < b.size(); ++r) {
    for (size_t i = 0; i < a[r].size() && i < b[r].size(); ++i) worst = std::max(worst, std::abs(a[r][i] - b[r][i]));
  }
  return worst;
}

// Gemma 4's fixtures turn one bf16 rounding flip into logit moves of up to ~2 (measured on
// CPU: the reference with its Linear outputs jittered by 2^-20 before rounding, as another
// fp32 summation order does, moves logits by up to 1.9 on gemma4_text, 3 to 8x kModelTol;
// on gemma3_text the same jitter moves them by at most 0.1). The
// GPU sums in another order (on an H200: bitwise equal to the reference up to the first
// flipped rounding, at token 16, then up to 0.84 off; the same with KV blocks of 8 or 32,
// and no further from transformers' fp32 logits than the reference is), so against these
// fixtures it is held to what that rounding alone does: 1.5x the largest move of the
// jittered reference over kJitterSeeds runs (gemma4_text 1.9, gemma4_multimodal 0.84).
constexpr int kJitterSeeds = 4;
bool RoundingChaotic(const std::string& fixture) { return fixture.rfind("gemma4", 0) == 0; }

class CudaModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaModelTest, MatchesCpuBf16Reference) {
  TP_SKIP_WITHOUT_GPU();
  const std::string fixture = GetParam();
  const testing::Reference ref = testing::LoadReference(fixture);
  Steps s;
  s.prompt = ref.prompt_ids;
  // Teacher-forced with the reference's own greedy tokens: 7 decode steps after the prompt.
  const std::vector<std::vector<float>> prompt_only = RunOnCpu(fixture, s);
  ASSERT_EQ(prompt_only.size(), s.prompt.size());
  s.forced.push_back(Argmax(prompt_only.back()));
  for (int i = 0; i < 6; ++i) {
    const auto rows = RunOnCpu(fixture, s);
    s.forced.push_back(Argmax(rows.back()));
  }
  const auto cpu = RunOnCpu(fixture, s);
  const auto gpu = RunOnGpu(fixture, s, 1);
  if (!RoundingChaotic(fixture)) {
    ExpectSameModel(gpu, cpu, fixture + " cuda vs cpu");
    return;
  }
  float envelope = 0;
  for (uint64_t seed = 1; seed <= kJitterSeeds; ++seed) envelope = std::max(envelope, MaxAbsDiff(RunOnCpu(fixture, s, seed), cpu));
  ASSERT_GT(envelope, 0.0f) << "the jittered reference should move " << fixture;
  const float bound = std::max<float>(kModelTol.atol, 1.5f * envelope);
  ExpectSameModel(gpu, cpu, fixture + " cuda vs cpu (rounding envelope " + std::to_string(envelope) + ")",
                  testing::Tolerance{bound, kModelTol.rtol}, std::max(kGreedyMargin, 2 * bound));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaModelTest,
                         ::testing::Values("gemma4_text", "gemma4_multimodal", "gemma3_text", "llama3", "qwen2",
                                           "qwen3"));

// Three copies of the prompt in one step (72 tokens: the tiled prefill kernel, tiles
// planned across sequence boundaries, interleaved physical blocks) give each copy the
// single-sequence logits (decode kernel). The tiled kernel rounds probabilities to bf16,
// so this takes Gemma 3 (sliding window 8): Gemma 4's fixture turns any change of rounding
// into logit moves of ~2 (measured on CPU).
TEST(CudaModelBatchTest, BatchedPrefillThroughTiledKernel) {
  TP_SKIP_WITHOUT_GPU();
  const testing::Reference ref = testing::LoadReference("gemma3_text");
  Steps one;
  one.prompt = ref.prompt_ids;
  const auto single = RunOnGpu("gemma3_text", one, 1);
  Steps three = one;
  three.copies = 3;
  const auto batched = RunOnGpu("gemma3_text", three, 1);
  ASSERT_EQ(batched.size(), 3u);
  for (int c = 0; c < 3; ++c) {
    EXPECT_TRUE(testing::AllClose(batched[c], single.back(), kModelTol)) << "copy " << c;
    if (TopGap(single.back()) > kGreedyMargin) {
      EXPECT_EQ(Argmax(batched[c]), Argmax(single.back())) << "copy " << c;
    }
  }
}

// Two ranks sharing one GPU (StagedCommunicator over LocalGroup) match one rank. Row-
// parallel partial sums are rounded to bf16 per rank, an extra rounding the 1-rank pass
// lacks: on CPU at bf16 precision that stays within kModelTol (0.7 of it) for these
// fixtures, not for Gemma 4's or Qwen2's (up to 7x and 1.6x).
TEST(CudaModelTpTest, TwoRanksOnOneGpuMatchOneRank) {
  TP_SKIP_WITHOUT_GPU();
  for (const std::string fixture : {"llama3", "qwen3", "gemma3_text"}) {
    const testing::Reference ref = testing::LoadReference(fixture);
    Steps s;
    s.prompt = ref.prompt_ids;
    s.forced.assign(ref.greedy_ids.begin(), ref.greedy_ids.end() - 1);
    const auto one = RunOnGpu(fixture, s, 1);
    const auto two = RunOnGpu(fixture, s, 2);
    ExpectSameModel(two, one, fixture + " tp2 vs tp1");
  }
}

// Sampling on the GPU (only token ids come back; at 2 ranks the shards are gathered on
// the device) picks what the rule of kernels/row_sampling.h picks over the GPU's own
// logits: greedy rows exactly, a masked argmax never, seeded rows unless the reference
// calls the draw a float-rounding tie.
TEST(CudaModelSamplingTest, DeviceSamplingFollowsTheRuleOverTheLogits) {
  TP_SKIP_WITHOUT_GPU();
  const std::string fixture = "qwen3";
  const testing::Reference ref = testing::LoadReference(fixture);
  for (int ranks : {1, 2}) {
    testing::RunThreads(ranks, [&](Communicator& host) {
      auto backend = MakeCudaBackend(BackendOptions{.device = 0});
      ASSERT_TRUE(backend.ok()) << backend.status();
      StagedCommunicator comm(host, (*backend)->stream());
      auto config = LoadModelConfig(testing::FixtureDir(fixture));
      auto source = OpenCheckpointSource(testing::FixtureDir(fixture));
      ASSERT_TRUE(config.ok() && source.ok());
      ModelOptions mo;
      mo.weight_dtype = DType::kBF16;
      mo.block_size = kBlock;
      auto model = Model::Load(*config, **source, **backend, comm, mo);
      ASSERT_TRUE(model.ok()) << model.status();
      Steps s;
      s.prompt = ref.prompt_ids;
      const int32_t max_blocks = (static_cast<int32_t>(s.prompt.size()) + kBlock - 1) / kBlock;
      ASSERT_TRUE((*model)->AllocateKvCache(max_blocks).ok());
      StepPlan plan = PrefillPlan(s, (*model)->num_kv_blocks().size(), max_blocks);
      const int32_t last = static_cast<int32_t>(s.prompt.size()) - 1;
      plan.logit_rows = {last, last, last - 5, last};
      auto logits = (*model)->Forward(plan, nullptr);
      ASSERT_TRUE(logits.ok()) << logits.status();
      const int64_t V = config->vocab_size;
      int32_t top = 0;
      if (host.rank() == 0) top = Argmax(std::vector<float>(logits->logits.begin(), logits->logits.begin() + V));
      host.Broadcast(&top, sizeof(top), 0);
      RowSampling greedy, drawn, masked;
      greedy.temperature = masked.temperature = 0.0f;
      drawn.temperature = 0.8f;
      drawn.top_k = 20;
      drawn.top_p = 0.9f;
      drawn.seed = 3;
      drawn.step = 1;
      plan.sampling = {greedy, drawn, greedy, masked};
      plan.penalty_offsets = {0, 0, 1, 1, 2};
      plan.penalty_tokens = {top, top};
      plan.penalty_counts = {2, kMaskedCount};
      plan.sampling[1].repetition_penalty = 1.5f;
      auto ids = (*model)->Forward(plan, nullptr);
      ASSERT_TRUE(ids.ok()) << ids.status();
      if (host.rank() != 0) return;
      ASSERT_EQ(ids->token_ids.size(), 4u);
      const std::vector<float>& l = logits->logits;
      auto row = [&](int r) { return std::vector<float>(l.begin() + r * V, l.begin() + (r + 1) * V); };
      EXPECT_EQ(ids->token_ids[0], top) << ranks << " ranks";
      EXPECT_EQ(ids->token_ids[2], Argmax(row(2))) << ranks << " ranks";
      EXPECT_NE(ids->token_ids[3], top);
      std::vector<float> masked_row = row(3);
      masked_row[top] = -INFINITY;
      EXPECT_EQ(ids->token_ids[3], Argmax(masked_row));
      std::vector<float> drawn_row = row(1);
      testing::ReferencePenalties(drawn_row, plan.sampling[1], {{top, 2}});
      const testing::ReferenceDraw want = testing::ReferenceSample(drawn_row, plan.sampling[1]);
      if (!want.ambiguous) {
        EXPECT_EQ(ids->token_ids[1], want.token) << ranks << " ranks";
      }
    });
  }
}

// Decode steps replayed from CUDA graphs against the same steps run eagerly. Three
// sequences of different lengths (decode steps of 3 tokens pad to 4) for 5 steps, then
// the first two (2 tokens, a size of its own) for 3 more, contexts growing every step;
// teacher-forced, so both runs see the same tokens. Logits come back for every step, and
// with `sample` the workers' greedy ids instead.
struct GraphRun {
  std::vector<std::vector<float>> rows;  // per decode step and sequence
  std::vector<int32_t> ids;              // with sample
  bool graphs = false;
  int64_t replayed = 0;
};

GraphRun RunGraphBatch(const std::string& fixture, Backend& backend, Communicator& comm,
                       const std::vector<int32_t>& sizes, bool sample) {
  GraphRun r;
  auto config = LoadModelConfig(testing::FixtureDir(fixture));
  auto source = OpenCheckpointSource(testing::FixtureDir(fixture));
  EXPECT_TRUE(config.ok() && source.ok());
  if (!config.ok() || !source.ok()) return r;
  const testing::Reference ref = testing::LoadReference(fixture);
  const int32_t n = static_cast<int32_t>(ref.prompt_ids.size());
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t len : {n, std::max(1, n - 3), std::max(1, n - 7)}) {
    prompts.emplace_back(ref.prompt_ids.begin(), ref.prompt_ids.begin() + len);
  }
  constexpr int kSteps = 8;
  ModelOptions mo;
  mo.weight_dtype = DType::kBF16;
  mo.block_size = kBlock;
  mo.cuda_graph_batch_sizes = sizes;
  mo.max_model_len = 256;  // a fixed table width of 16 blocks
  auto model = Model::Load(*config, **source, backend, comm, mo);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return r;
  Model& m = **model;
  r.graphs = m.cuda_graphs();
  const int32_t mb = (n + kSteps + kBlock - 1) / kBlock;  // blocks per sequence, plan width
  // As engine start-up does: capture over a first KV cache, then reallocate it (the model
  // drops the graphs and captures again on first use).
  EXPECT_TRUE(m.AllocateKvCache(4).ok());
  EXPECT_TRUE(m.CaptureCudaGraphs().ok());
  EXPECT_TRUE(m.AllocateKvCache(3 * mb).ok());
  const size_t groups = m.num_kv_blocks().size();
  const int64_t V = config->vocab_size;
  auto table = [&](const std::vector<int32_t>& seqs) {
    std::vector<int32_t> t;
    for (int32_t s : seqs) {
      for (int32_t b = 0; b < mb; ++b) t.push_back(s * mb + b);
    }
    return t;
  };
  auto slot = [&](int32_t s, int32_t pos) { return (s * mb + pos / kBlock) * kBlock + pos % kBlock; };
  // Prefill, eager (its logits are not compared).
  {
    StepPlan p;
    p.num_seqs = 3;
    std::vector<int32_t> slots;
    for (int32_t s = 0; s < 3; ++s) {
      for (int32_t i = 0; i < static_cast<int32_t>(prompts[s].size()); ++i) {
        p.token_ids.push_back(prompts[s][i]);
        p.positions.push_back(i);
        p.token_seq.push_back(s);
        slots.push_back(slot(s, i));
      }
      p.logit_rows.push_back(static_cast<int32_t>(p.token_ids.size()) - 1);
    }
    p.kv.assign(groups, KvGroupPlan{slots, mb, table({0, 1, 2})});
    EXPECT_TRUE(m.Forward(p, nullptr).ok());
  }
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<int32_t> seqs = step < 5 ? std::vector<int32_t>{0, 1, 2} : std::vector<int32_t>{0, 1};
    StepPlan p;
    p.num_seqs = static_cast<int32_t>(seqs.size());
    std::vector<int32_t> slots;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int32_t s = seqs[i];
      const int32_t pos = static_cast<int32_t>(prompts[s].size()) + step;
      p.token_ids.push_back(static_cast<int32_t>((17 + 31 * s + 7 * step) % V));
      p.positions.push_back(pos);
      p.token_seq.push_back(static_cast<int32_t>(i));
      p.logit_rows.push_back(static_cast<int32_t>(i));
      slots.push_back(slot(s, pos));
    }
    p.kv.assign(groups, KvGroupPlan{slots, mb, table(seqs)});
    if (sample) {
      RowSampling greedy;
      greedy.temperature = 0.0f;
      p.sampling.assign(seqs.size(), greedy);
      p.penalty_offsets.assign(seqs.size() + 1, 0);
    }
    auto out = m.Forward(p, nullptr);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok() || comm.rank() != 0) continue;
    r.ids.insert(r.ids.end(), out->token_ids.begin(), out->token_ids.end());
    for (size_t i = 0; i * V < out->logits.size(); ++i) {
      r.rows.emplace_back(out->logits.begin() + i * V, out->logits.begin() + (i + 1) * V);
    }
  }
  r.replayed = m.replayed_steps();
  return r;
}

// One rank on GPU 0: replayed steps give the eager steps' logits (the fixed table width
// changes the decode kernel's partitioning, so summation order may differ) and greedy ids.
TEST(CudaModelGraphTest, ReplayedDecodeStepsMatchEager) {
  TP_SKIP_WITHOUT_GPU();
  for (const std::string fixture : {"qwen3", "gemma3_text"}) {
    GraphRun eager, graphs, sampled;
    testing::RunThreads(1, [&](Communicator& comm) {
      auto backend = MakeCudaBackend(BackendOptions{.device = 0});
      ASSERT_TRUE(backend.ok()) << backend.status();
      eager = RunGraphBatch(fixture, **backend, comm, {}, false);
      graphs = RunGraphBatch(fixture, **backend, comm, {1, 2, 4, 8}, false);
      sampled = RunGraphBatch(fixture, **backend, comm, {1, 2, 4, 8}, true);
    });
    EXPECT_FALSE(eager.graphs);
    ASSERT_TRUE(graphs.graphs) << fixture;
    // 5 steps at 4 (warm-up, capture, 3 replays) and 3 at 2 (warm-up, capture, replay).
    EXPECT_EQ(graphs.replayed, 6) << fixture;
    ExpectSameModel(graphs.rows, eager.rows, fixture + " graphs vs eager");
    ASSERT_EQ(sampled.ids.size(), eager.rows.size());
    for (size_t i = 0; i < eager.rows.size(); ++i) {
      if (TopGap(eager.rows[i]) > kGreedyMargin) {
        EXPECT_EQ(sampled.ids[i], Argmax(eager.rows[i])) << fixture << " " << i;
      }
    }
  }
}

// Two thread ranks sharing GPU 0 through the staged communicator cannot capture (it
// synchronizes): the model keeps every step eager, with the same results. With two GPUs
// and NCCL the graphs are on and match eager.
TEST(CudaModelGraphTest, TwoRanksReplayOnlyWithNccl) {
  TP_SKIP_WITHOUT_GPU();
  const std::string fixture = "qwen3";
  GraphRun eager, asked;
  testing::RunThreads(2, [&](Communicator& host) {
    auto backend = MakeCudaBackend(BackendOptions{.device = 0});
    ASSERT_TRUE(backend.ok()) << backend.status();
    StagedCommunicator comm(host, (*backend)->stream());
    GraphRun e = RunGraphBatch(fixture, **backend, comm, {}, false);
    GraphRun a = RunGraphBatch(fixture, **backend, comm, {1, 2, 4, 8}, false);
    EXPECT_FALSE(a.graphs);
    EXPECT_EQ(a.replayed, 0);
    if (host.rank() == 0) {
      eager = std::move(e);
      asked = std::move(a);
    }
  });
  ASSERT_FALSE(eager.rows.empty());
  EXPECT_EQ(asked.rows, eager.rows);  // the very same eager steps
  if (CudaDeviceCount() < 2 || !HaveNccl()) {
    GTEST_SKIP() << "graphs across ranks need NCCL and 2 GPUs (" << CudaDeviceCount() << " visible)";
  }
  GraphRun nccl_eager, nccl_graphs;
  testing::RunThreads(2, [&](Communicator& host) {
    auto backend = MakeCudaBackend(BackendOptions{.device = host.rank()});
    ASSERT_TRUE(backend.ok()) << backend.status();
    auto comm = MakeNcclCommunicator(host, host.rank(), (*backend)->stream());
    ASSERT_TRUE(comm.ok()) << comm.status();
    GraphRun e = RunGraphBatch(fixture, **backend, **comm, {}, false);
    GraphRun g = RunGraphBatch(fixture, **backend, **comm, {1, 2, 4, 8}, false);
    EXPECT_TRUE(g.graphs);
    EXPECT_EQ(g.replayed, 6);
    if (host.rank() == 0) {
      nccl_eager = std::move(e);
      nccl_graphs = std::move(g);
    }
  });
  ExpectSameModel(nccl_graphs.rows, nccl_eager.rows, fixture + " nccl graphs vs eager");
}

}  // namespace
}  // namespace tpserve
