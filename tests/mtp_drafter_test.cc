// The Gemma 4 MTP drafter (worker/mtp_drafter.h) against transformers' numbers in
// tests/fixtures/models/gemma4_mtp/reference.json (tools/make_mtp_fixtures.py), dense and
// centroid heads, at TP 1, 2 and 4 (ranks as threads): round 1 on the reference's own K/V,
// then every round of the "clean" trace with the target filling its cache, verifying the
// drafts and handing its hidden rows (Model::hidden_rows) back. Also the config checks.
#include "worker/mtp_drafter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tp_harness.h"
#include "worker/backend.h"
#include "worker/model.h"
#include "worker/safetensors.h"
#include "worker/weight_source.h"

namespace tpserve {
namespace {

using json = nlohmann::json;

// The model fixtures' tolerance (|got - want| <= atol + rtol |want|): fp32 compute that
// differs from transformers' in summation order only.
constexpr double kAtol = 2e-3, kRtol = 2e-3;
constexpr int32_t kBlock = 4;        // small blocks: the drafter's ranges cross several
constexpr int32_t kNumBlocks = 24;   // per KV group
constexpr int32_t kTableWidth = 10;  // 40 positions: the prompt, 8 tokens and a round's drafts

std::string Dir(const std::string& sub) { return testing::FixtureDir("gemma4_mtp/" + sub); }

const json& Reference() {
  static const json* ref = [] {
    std::ifstream in(Dir("reference.json"));
    std::stringstream ss;
    ss << in.rdbuf();
    return new json(json::parse(ss.str()));
  }();
  return *ref;
}

// A list of numbers, or of rows of them, flattened; parsed as double then cast (the
// fixture's 9 significant digits are the exact float32).
std::vector<float> Floats(const json& a) {
  std::vector<float> v;
  for (const auto& x : a) {
    if (x.is_array()) {
      for (const auto& y : x) v.push_back(static_cast<float>(y.get<double>()));
    } else {
      v.push_back(static_cast<float>(x.get<double>()));
    }
  }
  return v;
}

// A scrambled physical block for logical block b (the same table for both KV groups).
int32_t PhysicalBlock(int32_t b) { return (b * 7 + 3) % kNumBlocks; }

std::vector<int32_t> Table(int32_t (*physical)(int32_t)) {
  std::vector<int32_t> t(kTableWidth);
  for (int32_t b = 0; b < kTableWidth; ++b) t[b] = physical(b);
  return t;
}

// The worst tolerance ratio (<= 1 passes) and absolute difference seen, over all ranks' checks.
struct Worst {
  std::mutex mu;
  double logits = 0, projected = 0, normed = 0, hidden = 0, abs_logits = 0;
  void Note(double* slot, double v) {
    std::lock_guard<std::mutex> lock(mu);
    *slot = std::max(*slot, v);
  }
};

double MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max<double>(m, std::abs(a[i] - b[i]));
  return m;
}

std::vector<float> ToHost(Backend& b, const Tensor& t) {
  std::vector<uint8_t> raw(t.bytes());
  b.CopyToHost(raw.data(), t.data, raw.size());
  std::vector<float> out(t.numel());
  ToF32(raw.data(), t.dtype, t.numel(), out.data());
  return out;
}

// One rank's target and drafter.
struct Rank {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> target;
  std::unique_ptr<MtpDrafter> drafter;
};

Rank LoadRank(const std::string& assistant, Communicator& comm) {
  Rank r;
  r.backend = MakeCpuBackend(BackendOptions{.threads = 1});
  auto config = LoadModelConfig(Dir("target"));
  EXPECT_TRUE(config.ok()) << config.status();
  auto source = OpenCheckpointSource(Dir("target"));
  EXPECT_TRUE(source.ok()) << source.status();
  if (!config.ok() || !source.ok()) return r;
  ModelOptions mo;
  mo.block_size = kBlock;
  auto target = Model::Load(*config, **source, *r.backend, comm, mo);
  EXPECT_TRUE(target.ok()) << target.status();
  if (!target.ok()) return r;
  r.target = std::move(*target);
  EXPECT_TRUE(r.target->AllocateKvCache(kNumBlocks).ok());
  auto drafter = MtpDrafter::LoadDir(Dir(assistant), *r.target, *r.backend, comm);
  EXPECT_TRUE(drafter.ok()) << drafter.status();
  if (drafter.ok()) r.drafter = std::move(*drafter);
  return r;
}

// Writes round 1's reference K/V of one layer type into the target's cache of its last
// layer of that type, at the positions the drafter reads, for this rank's KV heads.
void WriteReferenceKv(Rank& r, bool sliding, const std::vector<int32_t>& table) {
  const json& kv = Reference()["round1_target_kv"][sliding ? "sliding_attention" : "full_attention"];
  const int32_t first = kv["positions"][0], last = kv["positions"][1];
  const int32_t n = last - first + 1;
  const int layer = LastLayerOfType(r.target->config(), sliding);
  const int32_t hd = r.target->config().layers[layer].head_dim;
  const Model::LayerKvCache cache = r.target->layer_kv_cache(layer);
  const std::vector<float> keys = Floats(kv["keys"]), values = Floats(kv["values"]);
  ASSERT_EQ(keys.size() % (static_cast<size_t>(n) * hd), 0u);
  for (int32_t h = 0; h < cache.heads.kv_heads; ++h) {
    const int32_t global = cache.heads.kv_head0 + h;
    for (int32_t i = 0; i < n; ++i) {
      const int32_t pos = first + i;
      const int64_t slot = static_cast<int64_t>(table[pos / kBlock]) * kBlock + pos % kBlock;
      const size_t at = (static_cast<size_t>(slot) * cache.heads.kv_heads + h) * hd * sizeof(float);
      const size_t from = (static_cast<size_t>(global) * n + i) * hd;
      r.backend->CopyFromHost(static_cast<uint8_t*>(cache.k_cache) + at, &keys[from], hd * sizeof(float));
      r.backend->CopyFromHost(static_cast<uint8_t*>(cache.v_cache) + at, &values[from], hd * sizeof(float));
    }
  }
}

// Runs one round's draft steps for `copies` identical sequences (one block table each) and
// checks every step against the reference round; `hidden` is h_{L-1} for every row.
// Returns the drafted tokens of row 0.
std::vector<int32_t> DraftRound(Rank& r, Communicator& comm, const json& round, const Tensor& hidden,
                                const std::vector<std::vector<int32_t>>& tables, Worst& worst,
                                const std::string& what) {
  const int32_t n = static_cast<int32_t>(tables.size());
  const size_t groups = r.target->num_kv_blocks().size();
  MtpDraftStep step;
  step.positions.assign(n, round["position"].get<int32_t>());
  step.token_ids.assign(n, round["last_token_id"].get<int32_t>());
  step.kv.resize(groups);
  for (auto& g : step.kv) {
    g.max_blocks_per_seq = kTableWidth;
    for (const auto& t : tables) g.block_tables.insert(g.block_tables.end(), t.begin(), t.end());
  }
  step.return_logits = true;
  std::vector<int32_t> drafts;
  const int64_t V = r.target->config().vocab_size;
  Tensor h = hidden;
  int k = 0;
  for (const json& ref : round["draft_steps"]) {
    const std::string at = what + " L=" + std::to_string(step.positions[0]) + " step " + std::to_string(k + 1);
    EXPECT_EQ(step.token_ids[0], ref["input_token_id"].get<int32_t>()) << at;
    auto out = r.drafter->Step(step, h);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return drafts;
    const std::vector<float> want_logits = Floats(ref["logits"]);
    const std::vector<float> want_proj = Floats(ref["projected_hidden"]), want_normed = Floats(ref["drafter_hidden"]);
    const std::vector<float> proj = ToHost(*r.backend, r.drafter->projected());
    const std::vector<float> normed = ToHost(*r.backend, r.drafter->normed());
    for (int32_t row = 0; row < n; ++row) {
      EXPECT_EQ(out->token_ids[row], ref["token_id"].get<int32_t>()) << at << " row " << row;
      const std::vector<float> p(proj.begin() + row * want_proj.size(), proj.begin() + (row + 1) * want_proj.size());
      const std::vector<float> z(normed.begin() + row * want_normed.size(),
                                 normed.begin() + (row + 1) * want_normed.size());
      const double rp = testing::ToleranceRatio(p, want_proj, kAtol, kRtol);
      const double rz = testing::ToleranceRatio(z, want_normed, kAtol, kRtol);
      EXPECT_LE(rp, 1.0) << at << " projected_hidden row " << row;
      EXPECT_LE(rz, 1.0) << at << " drafter_hidden row " << row;
      worst.Note(&worst.projected, rp);
      worst.Note(&worst.normed, rz);
      if (comm.rank() == 0) {
        EXPECT_EQ(out->logits.size(), static_cast<size_t>(n * V));
        if (out->logits.size() != static_cast<size_t>(n * V)) return drafts;
        const std::vector<float> l(out->logits.begin() + row * V, out->logits.begin() + (row + 1) * V);
        const double rl = testing::ToleranceRatio(l, want_logits, kAtol, kRtol);
        EXPECT_LE(rl, 1.0) << at << " logits row " << row;
        worst.Note(&worst.logits, rl);
        worst.Note(&worst.abs_logits, MaxAbs(l, want_logits));
      } else {
        EXPECT_TRUE(out->logits.empty());
      }
    }
    drafts.push_back(out->token_ids[0]);
    step.token_ids.assign(out->token_ids.begin(), out->token_ids.end());
    h = r.drafter->projected();
    ++k;
  }
  return drafts;
}

void Report(const std::string& what, const Worst& w) {
  std::printf(
      "[ numbers  ] %s: worst tolerance ratio (atol = rtol = 2e-3) logits %.4f, projected %.4f, "
      "drafter_hidden %.4f, target hidden %.4f; max |logit diff| %.3g\n",
      what.c_str(), w.logits, w.projected, w.normed, w.hidden, w.abs_logits);
}

class MtpDrafterTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Round 1 with the reference's K/V written into the cache (no target forward): the
// drafter alone, two copies of the sequence in one batch with different block tables.
TEST_P(MtpDrafterTest, RoundOneOnReferenceKv) {
  const auto& [assistant, tp] = GetParam();
  const json& round = Reference()["assistants"][assistant]["traces"]["clean"]["rounds"][0];
  Worst worst;
  testing::RunThreads(tp, [&](Communicator& comm) {
    Rank r = LoadRank(assistant, comm);
    ASSERT_TRUE(r.drafter != nullptr);
    const std::vector<int32_t> a = Table(PhysicalBlock);
    const std::vector<int32_t> b = Table([](int32_t blk) { return kNumBlocks - 1 - blk; });
    for (const auto& t : {a, b}) {
      WriteReferenceKv(r, true, t);
      WriteReferenceKv(r, false, t);
    }
    // h_{L-1} for both rows.
    const std::vector<float> h = Floats(round["target_hidden"]);
    auto buf = r.backend->Allocate(2 * h.size() * sizeof(float));
    ASSERT_TRUE(buf.ok());
    for (int row = 0; row < 2; ++row) {
      r.backend->CopyFromHost(static_cast<float*>((*buf)->data()) + row * h.size(), h.data(), h.size() * 4);
    }
    const Tensor hidden{(*buf)->data(), DType::kF32, 2, static_cast<int64_t>(h.size())};
    const std::vector<int32_t> drafts = DraftRound(r, comm, round, hidden, {a, b}, worst, assistant);
    EXPECT_EQ(drafts, round["draft_ids"].get<std::vector<int32_t>>());
  });
  Report(assistant + " round 1 on reference K/V, tp " + std::to_string(tp), worst);
}

// Argmax of rank 0's logit rows [rows, V], on every rank.
std::vector<int32_t> ArgmaxOnEveryRank(Communicator& comm, const StepOutput& out, int64_t rows, int64_t V) {
  std::vector<int32_t> ids(rows, 0);
  if (comm.rank() == 0) {
    for (int64_t i = 0; i < rows; ++i) {
      ids[i] = static_cast<int32_t>(std::max_element(out.logits.begin() + i * V, out.logits.begin() + (i + 1) * V) -
                                    (out.logits.begin() + i * V));
    }
  }
  comm.Broadcast(ids.data(), ids.size() * 4, 0);
  return ids;
}

// The target's forward over tokens at positions [start, start + n), logits for each.
StepPlan TargetPlan(const std::vector<int32_t>& tokens, int32_t start, size_t groups,
                    const std::vector<int32_t>& table) {
  StepPlan plan;
  plan.num_seqs = 1;
  KvGroupPlan kv;
  kv.max_blocks_per_seq = kTableWidth;
  kv.block_tables = table;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t pos = start + static_cast<int32_t>(i);
    plan.token_ids.push_back(tokens[i]);
    plan.positions.push_back(pos);
    plan.token_seq.push_back(0);
    kv.slot_mapping.push_back(table[pos / kBlock] * kBlock + pos % kBlock);
    plan.logit_rows.push_back(static_cast<int32_t>(i));
  }
  plan.kv.assign(groups, kv);
  return plan;
}

// Speculative decoding by hand, every round of the clean trace: the target prefills the
// prompt, the drafter drafts from its hidden row and cache, the target verifies the
// drafts in one forward, and its hidden row at the last accepted position starts the next
// round. Drafts, verification argmaxes, accepted counts and output tokens must be the
// reference's exactly; every draft step's numbers within tolerance.
TEST_P(MtpDrafterTest, CleanTraceWithTheTarget) {
  const auto& [assistant, tp] = GetParam();
  const json& trace = Reference()["assistants"][assistant]["traces"]["clean"];
  const std::vector<int32_t> prompt = Reference()["prompt_ids"].get<std::vector<int32_t>>();
  Worst worst;
  testing::RunThreads(tp, [&](Communicator& comm) {
    Rank r = LoadRank(assistant, comm);
    ASSERT_TRUE(r.drafter != nullptr);
    const std::vector<int32_t> table = Table(PhysicalBlock);
    const size_t groups = r.target->num_kv_blocks().size();
    const int64_t V = r.target->config().vocab_size;
    // Prefill: logits (and hidden rows) at every prompt position; the drafter needs the last.
    auto pre = r.target->Forward(TargetPlan(prompt, 0, groups, table), nullptr);
    ASSERT_TRUE(pre.ok()) << pre.status();
    const int32_t P = static_cast<int32_t>(prompt.size());
    std::vector<int32_t> generated = {ArgmaxOnEveryRank(comm, *pre, P, V).back()};
    Tensor hidden = r.target->hidden_rows().RowSlice(P - 1, 1);
    int32_t L = P;
    for (const json& round : trace["rounds"]) {
      const std::string at = assistant + " round at L=" + std::to_string(L);
      ASSERT_EQ(round["position"].get<int32_t>(), L) << at;
      ASSERT_EQ(round["last_token_id"].get<int32_t>(), generated.back()) << at;
      const std::vector<float> want_h = Floats(round["target_hidden"]);
      const double rh = testing::ToleranceRatio(ToHost(*r.backend, hidden), want_h, kAtol, kRtol);
      EXPECT_LE(rh, 1.0) << at << " target_hidden (Model::hidden_rows)";
      worst.Note(&worst.hidden, rh);
      const std::vector<int32_t> drafts = DraftRound(r, comm, round, hidden, {table}, worst, assistant);
      ASSERT_EQ(drafts, round["draft_ids"].get<std::vector<int32_t>>()) << at;
      // Verify [x_L, y_1..y_K] at L..L+K.
      std::vector<int32_t> verify = {generated.back()};
      verify.insert(verify.end(), drafts.begin(), drafts.end());
      auto out = r.target->Forward(TargetPlan(verify, L, groups, table), nullptr);
      ASSERT_TRUE(out.ok()) << out.status();
      const std::vector<int32_t> argmax = ArgmaxOnEveryRank(comm, *out, static_cast<int64_t>(verify.size()), V);
      EXPECT_EQ(argmax, round["target_argmax"].get<std::vector<int32_t>>()) << at;
      size_t n = 0;
      while (n < drafts.size() && drafts[n] == argmax[n]) ++n;
      EXPECT_EQ(static_cast<int>(n), round["accepted"].get<int>()) << at;
      for (size_t i = 0; i < n; ++i) generated.push_back(drafts[i]);
      generated.push_back(argmax[n]);
      // The next round: t_n at L + n + 1, with the target's hidden row at L + n.
      hidden = r.target->hidden_rows().RowSlice(static_cast<int64_t>(n), 1);
      L += static_cast<int32_t>(n) + 1;
    }
    EXPECT_EQ(generated, trace["generated"].get<std::vector<int32_t>>());
    EXPECT_EQ(generated, Reference()["greedy_ids"].get<std::vector<int32_t>>());
  });
  Report(assistant + " clean trace with the target, tp " + std::to_string(tp), worst);
}

INSTANTIATE_TEST_SUITE_P(Assistants, MtpDrafterTest,
                         ::testing::Combine(::testing::Values("assistant", "assistant_ordered"),
                                            ::testing::Values(1, 2, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_tp" + std::to_string(std::get<1>(info.param));
                         });

// A step whose sliding range reaches a block the sequence no longer holds is an error that
// says how far back the drafter reads, not a read of a recycled block.
TEST(MtpDrafterStepTest, MissingBlockIsAnError) {
  testing::RunThreads(1, [&](Communicator& comm) {
    Rank r = LoadRank("assistant", comm);
    ASSERT_TRUE(r.drafter != nullptr);
    const size_t groups = r.target->num_kv_blocks().size();
    const int64_t D = r.target->config().hidden_size;
    auto buf = r.backend->Allocate(D * sizeof(float));
    ASSERT_TRUE(buf.ok());
    const std::vector<float> zeros(D, 0.0f);
    r.backend->CopyFromHost((*buf)->data(), zeros.data(), D * sizeof(float));
    const Tensor hidden{(*buf)->data(), DType::kF32, 1, D};
    MtpDraftStep step;
    step.token_ids = {5};
    step.positions = {24};  // sliding layers read positions 15..23: blocks 3..5
    step.kv.resize(groups);
    for (auto& g : step.kv) {
      g.max_blocks_per_seq = kTableWidth;
      g.block_tables = Table(PhysicalBlock);
    }
    // The sliding group frees block 3 (positions 12-15), as the target's own window
    // (positions 16-23 for a query at 24) would allow.
    const int32_t sliding_group = r.target->config().layers[LastLayerOfType(r.target->config(), true)].kv_group;
    step.kv[sliding_group].block_tables[3] = -1;
    auto out = r.drafter->Step(step, hidden);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(out.status().message(), "W + 1")) << out.status();
    // Holding it again makes the step valid.
    step.kv[sliding_group].block_tables[3] = PhysicalBlock(3);
    EXPECT_TRUE(r.drafter->Step(step, hidden).ok());
    // Position 0 has nothing to attend to.
    step.positions = {0};
    EXPECT_EQ(r.drafter->Step(step, hidden).status().code(), absl::StatusCode::kInvalidArgument);
  });
}

// A built-in assistant shape with dummy weights beside its dummy target (what
// spec_decode_bench --mode mtp-cost runs): the target prefills, then three draft steps
// chained through projected(). Every rank gets the same valid token ids, rank 0 finite
// logits whose first maximum is the draft, and TP 2 drafts what TP 1 drafts (dummy weights
// depend on the element, not the split).
struct DummyDrafts {
  std::vector<int32_t> ids;    // [steps], rank 0's
  std::vector<float> logits;   // [steps, V], rank 0's
};

DummyDrafts DraftWithDummyWeights(int tp) {
  DummyDrafts result;
  std::mutex mu;
  testing::RunThreads(tp, [&](Communicator& comm) {
    auto config = PresetModelConfig("gemma-4-tiny");
    auto assistant = PresetMtpDrafterConfig("gemma-4-tiny-assistant");
    ASSERT_TRUE(config.ok()) << config.status();
    ASSERT_TRUE(assistant.ok()) << assistant.status();
    auto backend = MakeCpuBackend(BackendOptions{.threads = 1});
    ModelOptions mo;
    mo.block_size = kBlock;
    auto target = Model::Load(*config, *MakeDummySource(*config, 0), *backend, comm, mo);
    ASSERT_TRUE(target.ok()) << target.status();
    ASSERT_TRUE((*target)->AllocateKvCache(kNumBlocks).ok());
    auto drafter = MtpDrafter::Load(*assistant, *MakeDummySource(assistant->text, 0), **target, *backend, comm);
    ASSERT_TRUE(drafter.ok()) << drafter.status();
    // 30 prompt tokens: the sliding layers (window 16) read 17 of them, the full layer all.
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 30; ++i) prompt.push_back((17 + 131 * i) % 4096);
    const std::vector<int32_t> table = Table(PhysicalBlock);
    const size_t groups = (*target)->num_kv_blocks().size();
    auto pre = (*target)->Forward(TargetPlan(prompt, 0, groups, table), nullptr);
    ASSERT_TRUE(pre.ok()) << pre.status();
    MtpDraftStep step;
    step.token_ids = {prompt.back()};
    step.positions = {static_cast<int32_t>(prompt.size())};
    step.kv.assign(groups, MtpDraftStep::Tables{kTableWidth, table});
    step.return_logits = true;
    step.hidden_rows = {static_cast<int32_t>(prompt.size()) - 1};
    Tensor hidden = (*target)->hidden_rows();
    const int64_t V = config->vocab_size;
    for (int k = 0; k < 3; ++k) {
      auto out = (*drafter)->Step(step, hidden);
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_EQ(out->token_ids.size(), 1u);
      const int32_t id = out->token_ids[0];
      EXPECT_GE(id, 0);
      EXPECT_LT(id, V);
      int32_t rank0_id = id;
      comm.Broadcast(&rank0_id, 4, 0);
      EXPECT_EQ(id, rank0_id) << "rank " << comm.rank() << " step " << k;
      if (comm.rank() == 0) {
        ASSERT_EQ(out->logits.size(), static_cast<size_t>(V));
        for (float v : out->logits) ASSERT_TRUE(std::isfinite(v)) << "step " << k;
        EXPECT_EQ(std::max_element(out->logits.begin(), out->logits.end()) - out->logits.begin(), id) << "step " << k;
        std::lock_guard<std::mutex> lock(mu);
        result.ids.push_back(id);
        result.logits.insert(result.logits.end(), out->logits.begin(), out->logits.end());
      }
      step.token_ids = {id};
      step.hidden_rows.clear();
      hidden = (*drafter)->projected();
    }
  });
  return result;
}

TEST(MtpDrafterPresetTest, DummyDrafterDraftsValidTokensAtTp1And2) {
  const DummyDrafts one = DraftWithDummyWeights(1), two = DraftWithDummyWeights(2);
  ASSERT_EQ(one.ids.size(), 3u);
  EXPECT_EQ(one.ids, two.ids);
  EXPECT_LE(testing::ToleranceRatio(two.logits, one.logits, 1e-4, 1e-4), 1.0);
}

// The built-in assistants fit their built-in targets at the tensor-parallel sizes that
// split them; their sizes are the documented ones (docs/mtp_drafter.md, "Built-in
// assistant shapes"); ParameterCount counts what a checkpoint holds.
TEST(MtpDrafterPresetTest, BuiltInAssistantsFitTheirTargets) {
  const struct {
    const char* target;
    std::vector<int> tps;
    double params_m;  // millions
  } cases[] = {{"gemma-4-31b", {1, 2, 4, 8}, 469.5}, {"gemma-4-1b", {1, 2}, 79.8}, {"gemma-4-tiny", {1, 2}, 0.8}};
  for (const auto& c : cases) {
    const std::string name = std::string(c.target) + "-assistant";
    auto a = PresetMtpDrafterConfig(name);
    auto t = PresetModelConfig(c.target);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(a->text.num_layers, 4) << name;
    EXPECT_FALSE(a->text.layers[3].sliding) << name;
    EXPECT_FALSE(a->use_ordered_embeddings) << name;
    EXPECT_NEAR(a->ParameterCount() / 1e6, c.params_m, 0.05) << name;
    for (int tp : c.tps) EXPECT_TRUE(ValidateMtpDrafter(*a, *t, tp).ok()) << name << " tp " << tp;
  }
  // The published 31B assistant is stated to have 470M parameters, hidden 1024.
  EXPECT_EQ(PresetMtpDrafterConfig("gemma-4-31b-assistant")->text.hidden_size, 1024);
  // Another target's assistant does not fit.
  EXPECT_FALSE(ValidateMtpDrafter(*PresetMtpDrafterConfig("gemma-4-1b-assistant"), *PresetModelConfig("gemma-4-tiny"), 1)
                   .ok());
  auto unknown = PresetMtpDrafterConfig("gemma-4-2b-assistant");
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "gemma-4-31b-assistant")) << unknown.status();
  // The fixtures' checkpoints hold exactly ParameterCount weights (token_ordering is ids).
  for (const char* name : {"assistant", "assistant_ordered"}) {
    auto c = LoadMtpDrafterConfig(Dir(name));
    auto ckpt = Checkpoint::Open(Dir(name));
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    int64_t numel = 0;
    for (const std::string& tensor : (*ckpt)->Names()) {
      if (absl::StrContains(tensor, "token_ordering")) continue;
      int64_t n = 1;
      for (int64_t d : (*ckpt)->Find(tensor)->shape) n *= d;
      numel += n;
    }
    EXPECT_EQ(c->ParameterCount(), numel) << name;
  }
}

// Config mismatches between the drafter and the target are InvalidArgument errors naming
// the field.
class MtpDrafterConfigTest : public ::testing::Test {
 protected:
  static json AssistantJson() {
    std::ifstream in(Dir("assistant") + "/config.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str());
  }
  static absl::Status Check(const json& j, int tp = 1, const std::string& target = "gemma4_mtp/target") {
    auto c = ParseMtpDrafterConfig(j.dump(), "assistant/config.json");
    if (!c.ok()) return c.status();
    auto t = LoadModelConfig(testing::FixtureDir(target));
    EXPECT_TRUE(t.ok()) << t.status();
    return ValidateMtpDrafter(*c, *t, tp);
  }
  static void ExpectError(const json& j, const std::string& field, int tp = 1,
                          const std::string& target = "gemma4_mtp/target") {
    const absl::Status st = Check(j, tp, target);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_TRUE(absl::StrContains(st.message(), field)) << "expected \"" << field << "\" in: " << st.message();
  }
};

TEST_F(MtpDrafterConfigTest, FixturesParseAndFit) {
  for (const char* name : {"assistant", "assistant_ordered"}) {
    auto c = LoadMtpDrafterConfig(Dir(name));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->backbone_hidden_size, 64);
    EXPECT_EQ(c->text.hidden_size, 40);
    EXPECT_EQ(c->text.num_layers, 4);
    EXPECT_EQ(c->num_assistant_tokens, 4);
    EXPECT_EQ(c->use_ordered_embeddings, std::string(name) == "assistant_ordered");
    EXPECT_EQ(c->num_centroids, 16);
    EXPECT_EQ(c->centroid_top_k, 4);
    EXPECT_TRUE(c->text.layers[0].sliding);
    EXPECT_FALSE(c->text.layers[3].sliding);
    EXPECT_EQ(c->text.layers[3].head_dim, 32);
    EXPECT_EQ(c->text.layers[3].num_kv_heads, 2);
    auto t = LoadModelConfig(Dir("target"));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(LastLayerOfType(*t, true), 4);
    EXPECT_EQ(LastLayerOfType(*t, false), 5);
    for (int tp : {1, 2, 4, 8}) EXPECT_TRUE(ValidateMtpDrafter(*c, *t, tp).ok()) << name << " tp " << tp;
  }
}

TEST_F(MtpDrafterConfigTest, MismatchesNameTheField) {
  json j = AssistantJson();
  j["backbone_hidden_size"] = 32;
  ExpectError(j, "backbone_hidden_size");
  j = AssistantJson();
  j["text_config"]["vocab_size"] = 256;
  ExpectError(j, "vocab_size");
  j = AssistantJson();
  j["text_config"]["head_dim"] = 8;
  ExpectError(j, "head_dim");
  j = AssistantJson();
  j["text_config"]["global_head_dim"] = 16;
  ExpectError(j, "global_head_dim");
  j = AssistantJson();
  j["text_config"]["num_key_value_heads"] = 2;
  ExpectError(j, "num_key_value_heads");
  j = AssistantJson();
  j["text_config"]["num_global_key_value_heads"] = 1;
  ExpectError(j, "num_global_key_value_heads");
  j = AssistantJson();
  j["text_config"]["sliding_window"] = 16;
  ExpectError(j, "sliding_window");
  j = AssistantJson();
  j["text_config"]["num_kv_shared_layers"] = 2;
  ExpectError(j, "num_kv_shared_layers");
  j = AssistantJson();
  j["model_type"] = "gemma4_text";
  ExpectError(j, "gemma4_assistant");
  j = AssistantJson();
  j["use_ordered_embeddings"] = true;
  j["num_centroids"] = 24;  // does not divide 512
  ExpectError(j, "num_centroids");
  j = AssistantJson();
  j["tie_word_embeddings"] = false;
  ExpectError(j, "tie_word_embeddings");
  // Query heads that do not split: 8 heads over 3 ranks.
  ExpectError(AssistantJson(), "tensor-parallel size 3", 3);
  // A target that is not Gemma 4.
  ExpectError(AssistantJson(), "Gemma 4", 1, "llama3");
}

}  // namespace
}  // namespace tpserve
