// The whole model on the CUDA backend against the CPU backend at bf16 precision
// (tests/bf16_reference_backend.h), on the tiny transformers checkpoints
// (tests/fixtures/models), both with bf16 weights: prompt logits and teacher-forced decode
// logits within tolerance and the same greedy tokens; a batch of prompts through the tiled
// prefill kernel; and 2 thread-ranks sharing one GPU through StagedCommunicator(LocalGroup)
// against 1 rank; decode steps replayed from CUDA graphs against eager ones. GPU test
// (ctest -L gpu).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <span>

#include "gtest/gtest.h"
#include "tests/cuda_test_util.h"
#include "tests/model_steps.h"
#include "tests/sampling_reference.h"
#include "tests/tp_harness.h"
#include "worker/cuda_backend.h"
#include "worker/nccl_communicator.h"
#include "worker/staged_communicator.h"
#include "worker/weight_source.h"

namespace tpserve {
namespace {

using testing::Argmax;
using testing::PrefillPlan;
using testing::RunOnCpu;
using testing::Steps;

// The CPU reference rounds where the GPU rounds, so what remains is fp32 summation order
// flipping bf16 roundings: measured on CPU, that moves logits by 0.11 to 0.21 on these
// fixtures, 0.39 to 0.75 of this tolerance (tests/rounding_envelope_test.cc checks it
// stays inside).
constexpr testing::Tolerance kModelTol{testing::kModelAtol, testing::kModelRtol};
// A greedy choice must agree unless the reference's top-2 gap is within this (bf16
// logits of magnitude 16 are 0.0625 apart, so near ties are common).
constexpr float kGreedyMargin = 0.3f;
constexpr int32_t kBlock = testing::kStepsBlock;

// `ranks` thread-ranks sharing GPU 0, collectives staged through pinned host memory.
std::vector<std::vector<float>> RunOnGpu(const std::string& fixture, const Steps& s, int ranks,
                                         const KernelOptions& kernels = {}) {
  std::vector<std::vector<float>> rows;
  testing::RunThreads(ranks, [&](Communicator& host) {
    auto backend = MakeCudaBackend(BackendOptions{.device = 0, .kernels = kernels});
    ASSERT_TRUE(backend.ok()) << backend.status();
    StagedCommunicator comm(host, (*backend)->stream());
    auto got = testing::RunSteps(fixture, **backend, comm, s);
    if (host.rank() == 0) rows = std::move(got);
  });
  return rows;
}

float TopGap(const std::vector<float>& v) {
  std::vector<float> c = v;
  std::partial_sort(c.begin(), c.begin() + 2, c.end(), std::greater<float>());
  return c[0] - c[1];
}

// Logits close everywhere; the argmax equal wherever the reference is not a near tie.
void ExpectSameModel(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t r = 0; r < want.size(); ++r) {
    EXPECT_TRUE(testing::AllClose(got[r], want[r], kModelTol)) << what << " row " << r;
    if (TopGap(want[r]) > kGreedyMargin) {
      EXPECT_EQ(Argmax(got[r]), Argmax(want[r])) << what << " row " << r;
    }
  }
}

// Every fixture is held to kModelTol, Gemma 4's too. Rounding flips alone (the reference
// with its Linear outputs jittered by 2^-20 before rounding, 4 seeds) move logits by up to
// 0.14 (gemma4_text), 0.18 (gemma4_multimodal), 0.13 (gemma3_text), 0.11 (llama3), 0.21
// (qwen2) and 0.15 (qwen3); tests/rounding_envelope_test.cc checks that on the CPU. The
// first Gemma 4 fixtures amplified one flip into moves of 1.1 and 1.0 (3.8 and 3.4x
// kModelTol; the GPU on an H200 was bitwise equal to the reference up to the first flipped
// rounding, then up to 0.84 off), so they were regenerated with the statistics of
// tools/make_model_fixtures.py's GEMMA4_INIT.
class CudaModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaModelTest, MatchesCpuBf16Reference) {
  TP_SKIP_WITHOUT_GPU();
  const std::string fixture = GetParam();
  // Teacher-forced with the reference's own greedy tokens: 7 decode steps after the prompt.
  const Steps s = testing::GreedySteps(fixture, 7);
  ASSERT_EQ(s.forced.size(), 7u);
  const auto cpu = RunOnCpu(fixture, s);
  const auto gpu = RunOnGpu(fixture, s, 1);
  ExpectSameModel(gpu, cpu, fixture + " cuda vs cpu");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaModelTest,
                         ::testing::Values("gemma4_text", "gemma4_multimodal", "gemma3_text", "llama3", "qwen2",
                                           "qwen3", "llama3_attn_bias", "gemma3_attn_bias"));

// Three copies of the prompt in one step (72 tokens: the tiled prefill kernel, tiles
// planned across sequence boundaries, interleaved physical blocks) give each copy the
// single-sequence logits (decode kernel). The two kernels sum and round in different
// orders, which moves logits as far as rounding flips do (tests/rounding_envelope_test.cc).
// It takes Gemma 3 (sliding window 8) because the first Gemma 4 fixtures amplified any
// change of rounding into logit moves of ~1; the present ones amplify no more than Gemma 3's.
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
// lacks: on CPU at bf16 precision that moves logits by 0.6 to 0.7 of kModelTol for these
// fixtures (measured without the reference's bf16 attention probabilities; with them
// gemma3_text comes to 1.05), 0.9 for Gemma 4's (7x before they were regenerated) and 1.6
// for Qwen2's.
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

// KernelOptions change how the decode GEMVs run (bulk copies, programmatic launch), not
// what they compute: the whole model's logits are bit for bit the default kernels', eager
// and replayed from CUDA graphs.
TEST(CudaModelGraphTest, KernelOptionsGiveTheSameLogits) {
  TP_SKIP_WITHOUT_GPU();
  const KernelOptions fast{.bulk_gemv = true, .pdl = true};
  for (const std::string fixture : {"gemma4_text", "qwen3"}) {
    const Steps s = testing::GreedySteps(fixture, 7);
    EXPECT_EQ(RunOnGpu(fixture, s, 1, fast), RunOnGpu(fixture, s, 1)) << fixture << " eager";
    GraphRun plain, graphs;
    testing::RunThreads(1, [&](Communicator& comm) {
      auto a = MakeCudaBackend(BackendOptions{.device = 0});
      ASSERT_TRUE(a.ok()) << a.status();
      plain = RunGraphBatch(fixture, **a, comm, {1, 2, 4, 8}, false);
      auto b = MakeCudaBackend(BackendOptions{.device = 0, .kernels = fast});
      ASSERT_TRUE(b.ok()) << b.status();
      graphs = RunGraphBatch(fixture, **b, comm, {1, 2, 4, 8}, false);
    });
    ASSERT_TRUE(graphs.graphs) << fixture;
    EXPECT_EQ(graphs.replayed, plain.replayed) << fixture;
    EXPECT_EQ(graphs.rows, plain.rows) << fixture << " graphs";
  }
}

// The tuned kernels (KernelOptions::tuned, after Model::TuneKernels): the GEMVs give the
// plain kernels' bits whichever block shape or kernel won, but cuBLASLt's choice at the
// prompt's rows may sum in another order, and the prompt's KV carries that into every
// decode step, so the whole run is held to the CPU reference like the plain kernels
// (TuneKernelsReportsAndKeepsGemvBits checks the GEMV bits themselves). The fixtures' head
// dims (16, 32) have one prefill tile, so attention is not tuned here
// (TuneKernelsChoosesAPrefillTile is).
TEST(CudaModelGraphTest, TunedKernelsMatchTheReference) {
  TP_SKIP_WITHOUT_GPU();
  for (const std::string fixture : {"gemma4_text", "qwen3"}) {
    Steps s = testing::GreedySteps(fixture, 7);
    s.tune_max_tokens = 128;
    const auto cpu = RunOnCpu(fixture, s);
    for (const KernelOptions k : {KernelOptions{.tuned = true}, KernelOptions{.pdl = true, .tuned = true}}) {
      ExpectSameModel(RunOnGpu(fixture, s, 1, k), cpu, fixture + (k.pdl ? " tuned+pdl" : " tuned"));
    }
  }
}

// TuneKernels on one split weight (q|k|v-like): it times GEMVs of the whole weight at 1-4
// rows and cuBLASLt per part at the row buckets up to max_rows; through LinearSplit, tuned
// GEMVs keep the plain bits and tuned GEMMs stay within the reference's tolerance of the
// untuned ones, at row counts measured, between and beyond.
TEST(CudaModelGraphTest, TuneKernelsReportsAndKeepsGemvBits) {
  TP_SKIP_WITHOUT_GPU();
  auto made = MakeCudaBackend(BackendOptions{.device = 0});
  ASSERT_TRUE(made.ok()) << made.status();
  Backend& b = **made;
  const int64_t n = 3000, k = 1024;
  const std::vector<float> wf = testing::RoundBf16(testing::RandomVector(n * k, 31, -0.03f, 0.03f));
  testing::DeviceArray<uint16_t> w(testing::ToBf16(wf));
  const Tensor wt{w.get(), DType::kBF16, n, k};
  const LinearUse use{wt, {2000, 500, 500}, 40};
  auto report = b.TuneKernels(KernelUses{.linear = {use}, .attention = {}});
  ASSERT_TRUE(report.ok()) << report.status();
  // GEMVs m = 1..4 of the whole weight; GEMMs of parts 2000 and 500 at rows 8, 16, 32, 40.
  EXPECT_EQ(report->products, 4 + 2 * 4);
  EXPECT_EQ(report->lines.size(), static_cast<size_t>(report->products));
  for (const std::string& line : report->lines) std::printf("%s\n", line.c_str());
  for (int64_t m : {1, 3, 6, 33, 40, 64}) {
    const std::vector<float> xf = testing::RoundBf16(testing::RandomVector(m * k, 32 + m));
    testing::DeviceArray<uint16_t> x(testing::ToBf16(xf));
    const Tensor xt{x.get(), DType::kBF16, m, k};
    std::vector<std::unique_ptr<testing::DeviceArray<uint16_t>>> plain, tuned;
    std::vector<Tensor> plain_out, tuned_out;
    for (int64_t cols : use.parts) {
      plain.push_back(std::make_unique<testing::DeviceArray<uint16_t>>(m * cols));
      tuned.push_back(std::make_unique<testing::DeviceArray<uint16_t>>(m * cols));
      plain_out.push_back(Tensor{plain.back()->get(), DType::kBF16, m, cols});
      tuned_out.push_back(Tensor{tuned.back()->get(), DType::kBF16, m, cols});
    }
    b.SetKernelOptions(KernelOptions{});
    b.LinearSplit(xt, wt, nullptr, plain_out);
    b.SetKernelOptions(KernelOptions{.tuned = true});
    b.LinearSplit(xt, wt, nullptr, tuned_out);
    b.Synchronize();
    for (size_t p = 0; p < use.parts.size(); ++p) {
      if (m <= 4) {
        EXPECT_TRUE(testing::BitEqual(tuned[p]->Download(), plain[p]->Download())) << "m=" << m << " part " << p;
      } else {
        EXPECT_TRUE(testing::AllClose(testing::FromBf16(tuned[p]->Download()), testing::FromBf16(plain[p]->Download()),
                                      testing::kBf16Reduction))
            << "m=" << m << " part " << p;
      }
    }
  }
}

// TuneKernels on prefill attention at head_dim 256 (where tile shapes are instantiated):
// one report line per configuration, and PagedAttention with the tuned tile (whichever
// won) within the attention tolerance of the CPU reference, causal and sliding.
TEST(CudaModelGraphTest, TuneKernelsChoosesAPrefillTile) {
  TP_SKIP_WITHOUT_GPU();
  auto made = MakeCudaBackend(BackendOptions{.device = 0});
  ASSERT_TRUE(made.ok()) << made.status();
  Backend& b = **made;
  const int32_t T = 200, D = 256, Hq = 4, Hkv = 2, bs = 16, blocks = (T + bs - 1) / bs;
  for (int32_t window : {0, 64}) {
    const cpu::PagedAttentionParams p{.num_q_heads = Hq,
                                      .num_kv_heads = Hkv,
                                      .head_dim = D,
                                      .block_size = bs,
                                      .max_blocks_per_seq = blocks,
                                      .scale = 1.0f / 16.0f,
                                      .sliding_window = window,
                                      .softcap = 0.0f,
                                      .bf16_probabilities = true};  // as the kernels round P before P.V
    auto report = b.TuneKernels(KernelUses{.linear = {}, .attention = {AttentionUse{p, 256}}});
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_EQ(report->lines.size(), 1u) << "window " << window;
    EXPECT_EQ(report->lines[0].rfind("prefill attention d=256", 0), 0u) << report->lines[0];
    std::printf("%s\n", report->lines[0].c_str());
    const std::vector<float> q = testing::RoundBf16(testing::RandomVector(int64_t{T} * Hq * D, 41));
    const std::vector<float> kc = testing::RoundBf16(testing::RandomVector(int64_t{blocks} * bs * Hkv * D, 42));
    const std::vector<float> vc = testing::RoundBf16(testing::RandomVector(int64_t{blocks} * bs * Hkv * D, 43));
    std::vector<int32_t> seq(T, 0), pos(T), table(blocks);
    std::iota(pos.begin(), pos.end(), 0);
    std::iota(table.begin(), table.end(), 0);
    std::vector<float> want(q.size());
    cpu::PagedAttention(q.data(), kc.data(), vc.data(), seq.data(), pos.data(), T, table.data(), p, want.data());
    testing::DeviceArray<uint16_t> dq(testing::ToBf16(q)), dk(testing::ToBf16(kc)), dv(testing::ToBf16(vc)),
        out(q.size());
    testing::DeviceArray<int32_t> dseq(seq), dpos(pos), dtable(table);
    for (bool tuned : {false, true}) {
      ASSERT_EQ(cudaMemset(out.get(), 0xff, q.size() * 2), cudaSuccess);  // NaN: a launch that wrote nothing fails
      b.SetKernelOptions(KernelOptions{.tuned = tuned});
      b.PagedAttention(Tensor{dq.get(), DType::kBF16, T, Hq * D}, dk.get(), dv.get(), dseq.get(), dpos.get(),
                       dtable.get(), p, Tensor{out.get(), DType::kBF16, T, Hq * D});
      b.Synchronize();
      EXPECT_TRUE(testing::AllClose(testing::FromBf16(out.Download()), want, testing::kBf16Attention))
          << "window " << window << " tuned " << tuned;
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
  if (CudaVisibleDevices() < 2 || !HaveNccl()) {
    GTEST_SKIP() << "graphs across ranks need NCCL and 2 GPUs (" << CudaVisibleDevices() << " visible)";
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
