// Randomized scheduler test: random arrivals, prompt lengths, finishes and cancels over
// a tiny KV pool, thousands of steps per fixed seed, checking after every step the limits,
// block accounting (ref counts = block table entries), StepPlan::Validate, and a simulated
// KV cache: every key a query reads holds what that sequence wrote there. With
// speculative decoding, random drafts (right, wrong at a random position, too long) are
// verified each step and the outputs must be exactly the deterministic model's tokens.
// With the MTP drafter's lookback, each step's draft pass (Scheduler::PlanDraftPass, applied
// to the workers' batch as every rank applies it) is checked too: every key the drafter
// reads, [0, L-1] in full groups and the W + 1 positions [L-1-W, L-1] in sliding ones, is
// in a block the sequence still holds and holds what the sequence wrote there.
// Pure CPU, seconds.
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/engine/scheduler.h"
#include "gtest/gtest.h"
#include "worker/persistent_batch.h"

namespace tpserve {
namespace {

// Token 0 is a stop token; EOS none.
SequenceRequest StopAtZero(std::string id, std::vector<int32_t> prompt, int32_t max_tokens) {
  SamplingParams params;
  params.max_tokens = max_tokens;
  params.stop_token_ids = {0};
  return SequenceRequest{std::move(id), std::move(prompt), std::move(params)};
}

uint64_t Fnv(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return h;
}

std::vector<int32_t> Prompt(int32_t n, int32_t first) {
  std::vector<int32_t> p(n);
  for (int32_t i = 0; i < n; ++i) p[i] = first + i;
  return p;
}

struct RandomCase {
  std::vector<int64_t> num_blocks;
  std::vector<int32_t> windows;
  int32_t block_size;
  bool caching;
  uint32_t seed;
  int32_t spec_k = 0;  // num_speculative_tokens; 0: no drafts
  bool mtp = false;    // drafts from a simulated MTP drafter: its lookback, its draft passes checked
};

// Rolling hash of tokens[0..j]: what position j's k/v depend on.
std::vector<uint64_t> PrefixHashes(const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> h(tokens.size());
  uint64_t x = 7;
  for (size_t j = 0; j < tokens.size(); ++j) h[j] = x = (x ^ static_cast<uint32_t>(tokens[j])) * 0x100000001b3ull + j;
  return h;
}

// Stop token 0 comes up about one time in 23.
int32_t RandomModelToken(const std::vector<int32_t>& tokens) {
  const uint64_t h = Fnv(tokens);
  return h % 23 == 0 ? 0 : 1 + static_cast<int32_t>(h % 30);
}

// Checks the plan against the scheduler's state and a simulated KV cache, then writes
// the step's k/v into it. kv[g][slot] holds the prefix hash of whatever was written there.
::testing::AssertionResult CheckPlanAgainstKv(const Scheduler& s, const SchedulerOutput& d, const StepPlan& plan,
                                              std::vector<std::vector<uint64_t>>& kv) {
  const int32_t bs = s.config().block_size;
  const BlockManager& bm = s.block_manager();
  // The workers' tables (from the deltas) are the scheduler's.
  for (size_t row = 0; row < d.scheduled.size(); ++row) {
    for (int32_t g = 0; g < bm.num_groups(); ++g) {
      const std::vector<int32_t>& want = d.scheduled[row].seq->kv().block_tables[g];
      const KvGroupPlan& k = plan.kv[g];
      const auto begin = k.block_tables.begin() + row * k.max_blocks_per_seq;
      if (!std::equal(want.begin(), want.end(), begin) ||
          !std::all_of(begin + want.size(), begin + k.max_blocks_per_seq, [](int32_t b) { return b == -1; })) {
        return ::testing::AssertionFailure() << "the workers' table of " << d.scheduled[row].seq->request_id()
                                             << " in group " << g << " differs from the scheduler's";
      }
    }
  }
  std::vector<std::vector<uint64_t>> hashes;
  std::vector<std::vector<int32_t>> tokens;  // each row's tokens and its drafts in this step
  for (const ScheduledSequence& x : d.scheduled) {
    tokens.push_back(x.seq->token_ids());
    tokens.back().insert(tokens.back().end(), x.seq->draft_ids().begin(), x.seq->draft_ids().begin() + x.num_draft);
    hashes.push_back(PrefixHashes(tokens.back()));
  }
  std::set<std::pair<int32_t, int32_t>> written;
  // Every rank writes the whole step's k/v before attention reads it.
  for (size_t i = 0; i < plan.token_ids.size(); ++i) {
    const int32_t row = plan.token_seq[i], pos = plan.positions[i];
    const Sequence* seq = d.scheduled[row].seq;
    if (plan.token_ids[i] != tokens[row][pos]) return ::testing::AssertionFailure() << "wrong token";
    for (int32_t g = 0; g < bm.num_groups(); ++g) {
      const int32_t slot = plan.kv[g].slot_mapping[i];
      const int32_t block = slot / bs;
      if (seq->kv().block_tables[g][pos / bs] != block || slot % bs != pos % bs) {
        return ::testing::AssertionFailure() << seq->request_id() << " writes outside its own block, pos " << pos;
      }
      if (bm.pool(g).ref_count(block) != 1) {
        return ::testing::AssertionFailure() << "writes into shared or free block " << block << " of group " << g;
      }
      if (!written.insert({g, slot}).second) return ::testing::AssertionFailure() << "slot written twice";
      kv[g][slot] = hashes[row][pos];
    }
  }
  for (size_t i = 0; i < plan.token_ids.size(); ++i) {
    const int32_t row = plan.token_seq[i], pos = plan.positions[i];
    for (int32_t g = 0; g < bm.num_groups(); ++g) {
      const int32_t w = s.config().kv_group_windows[g];
      const KvGroupPlan& k = plan.kv[g];
      for (int32_t j = w > 0 ? std::max(0, pos - w + 1) : 0; j <= pos; ++j) {
        const int32_t block = k.block_tables[static_cast<size_t>(row) * k.max_blocks_per_seq + j / bs];
        if (block < 0) return ::testing::AssertionFailure() << "query " << pos << " reads a dropped block";
        if (kv[g][static_cast<size_t>(block) * bs + j % bs] != hashes[row][j]) {
          return ::testing::AssertionFailure() << d.scheduled[row].seq->request_id() << " query " << pos
                                               << " reads stale k/v at key " << j << " in group " << g;
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// The MTP drafter's reads in a draft pass: `tables` are the pass's block tables as every
// rank expands them (PersistentBatch::ApplyDraft), one row per request.
::testing::AssertionResult CheckDraftReads(const Scheduler& s, absl::Span<const DraftRequest> requests,
                                           const DraftDelta& delta, const std::vector<KvGroupPlan>& tables,
                                           const std::vector<std::vector<uint64_t>>& kv) {
  const int32_t bs = s.config().block_size;
  const BlockManager& bm = s.block_manager();
  for (size_t row = 0; row < requests.size(); ++row) {
    const Sequence& seq = *requests[row].seq;
    const int32_t L = delta.positions[row];
    if (L != seq.num_tokens() - 1 || delta.token_ids[row] != seq.token_ids().back() ||
        delta.slots[row] != requests[row].seq->batch().slot) {
      return ::testing::AssertionFailure() << seq.request_id() << ": the draft pass names the wrong token or slot";
    }
    const std::vector<uint64_t> hashes = PrefixHashes(seq.token_ids());
    for (int32_t g = 0; g < bm.num_groups(); ++g) {
      const int32_t w = s.config().kv_group_windows[g];
      const KvGroupPlan& k = tables[g];
      for (int32_t j = w > 0 ? std::max(0, L - 1 - w) : 0; j <= L - 1; ++j) {
        const int32_t block = j / bs < k.max_blocks_per_seq ? k.block_tables[row * k.max_blocks_per_seq + j / bs] : -1;
        if (block < 0) {
          return ::testing::AssertionFailure() << seq.request_id() << ": the drafter at L " << L
                                               << " reads a dropped block at key " << j << " in group " << g;
        }
        if (seq.kv().block_tables[g][j / bs] != block || bm.pool(g).ref_count(block) < 1) {
          return ::testing::AssertionFailure() << seq.request_id() << ": the drafter reads block " << block
                                               << " that the scheduler does not hold for it (group " << g << ")";
        }
        if (kv[g][static_cast<size_t>(block) * bs + j % bs] != hashes[j]) {
          return ::testing::AssertionFailure() << seq.request_id() << ": the drafter at L " << L
                                               << " reads stale k/v at key " << j << " in group " << g;
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult CheckBlockAccounting(const Scheduler& s) {
  const BlockManager& bm = s.block_manager();
  for (const Sequence* w : s.waiting()) {
    if (!w->kv().block_tables.empty() || w->num_computed_tokens() != 0) {
      return ::testing::AssertionFailure() << "waiting " << w->request_id() << " holds KV";
    }
  }
  for (int32_t g = 0; g < bm.num_groups(); ++g) {
    const absl::Status st = bm.pool(g).CheckInvariants();
    if (!st.ok()) return ::testing::AssertionFailure() << st;
    std::vector<int32_t> refs(bm.pool(g).num_blocks(), 0);
    for (const Sequence* r : s.running()) {
      for (int32_t b : r->kv().block_tables[g]) {
        if (b != -1) ++refs[b];
      }
    }
    for (int32_t b = 0; b < bm.pool(g).num_blocks(); ++b) {
      if (refs[b] != bm.pool(g).ref_count(b)) {
        return ::testing::AssertionFailure() << "group " << g << " block " << b << ": " << refs[b]
                                             << " table entries, ref count " << bm.pool(g).ref_count(b);
      }
    }
  }
  return ::testing::AssertionSuccess();
}

void RunRandom(const RandomCase& rc) {
  std::mt19937 rng(rc.seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  SchedulerConfig c;
  c.vocab_size = 1000;
  c.max_num_batched_tokens = uniform(1, 48);
  c.max_num_seqs = uniform(1, 8);
  c.max_model_len = 128;
  c.block_size = rc.block_size;
  c.enable_prefix_caching = rc.caching;
  c.num_kv_blocks = rc.num_blocks;
  c.kv_group_windows = rc.windows;
  c.num_speculative_tokens = rc.spec_k;
  c.sliding_lookback = rc.mtp ? kMtpDrafterLookback : 0;
  Scheduler s(c);
  PersistentBatch batch(static_cast<int32_t>(c.num_kv_blocks.size()), c.block_size);
  SCOPED_TRACE(absl::StrCat("seed ", rc.seed, " budget ", c.max_num_batched_tokens, " max_num_seqs ",
                            c.max_num_seqs, " blocks ", c.num_kv_blocks[0]));
  std::vector<std::vector<uint64_t>> kv;
  for (int64_t n : c.num_kv_blocks) kv.emplace_back(n * c.block_size, 0);
  // Shared system prompts make the prefix cache matter.
  std::vector<std::vector<int32_t>> prefixes = {{}, Prompt(8, 1), Prompt(17, 40), Prompt(33, 90)};

  struct Expect {
    std::vector<int32_t> tokens;  // prompt, then outputs as reported
    int32_t prompt_len;
    int32_t max_tokens;
    FinishReason reason = FinishReason::kNone;
  };
  std::map<std::string, Expect> reqs;
  std::vector<std::string> live;
  int next_id = 0;
  constexpr int kArrivalSteps = 2500;
  int step = 0;
  int64_t accepted = 0, rejected = 0;  // draft tokens
  int64_t draft_passes = 0;
  for (; step < 60000 && (step < kArrivalSteps || s.has_unfinished()); ++step) {
    if (step < kArrivalSteps && chance(0.3)) {
      std::vector<int32_t> prompt = prefixes[uniform(0, 3)];
      const int suffix = chance(0.03) ? 90 : uniform(1, 40);
      for (int i = 0; i < suffix; ++i) prompt.push_back(uniform(1, 30));
      const std::string id = absl::StrCat("r", next_id++);
      const int32_t max_tokens = uniform(1, 30);
      reqs[id] = Expect{prompt, static_cast<int32_t>(prompt.size()), max_tokens};
      live.push_back(id);
      ASSERT_TRUE(s.AddRequest(StopAtZero(id, prompt, max_tokens)).ok());
    }
    if (!live.empty() && chance(0.02)) {
      const std::string id = live[uniform(0, static_cast<int>(live.size()) - 1)];
      if (s.Abort(id).ok()) reqs[id].reason = FinishReason::kCancelled;
    }

    SchedulerOutput d = s.Schedule();
    for (const auto& r : d.rejected) {
      ASSERT_EQ(reqs[r.request_id].reason, FinishReason::kNone);
      reqs[r.request_id].reason = FinishReason::kError;
    }
    ASSERT_LE(d.num_batched_tokens, c.max_num_batched_tokens);
    ASSERT_LE(static_cast<int32_t>(s.running().size()), c.max_num_seqs);
    int32_t total = 0;
    std::set<const Sequence*> seen;
    for (const ScheduledSequence& x : d.scheduled) {
      ASSERT_TRUE(seen.insert(x.seq).second) << "scheduled twice";
      ASSERT_TRUE(x.seq->is_running());
      ASSERT_GT(x.num_tokens, 0);
      ASSERT_EQ(x.start, x.seq->num_computed_tokens());
      ASSERT_LE(x.num_draft, std::min<int32_t>(rc.spec_k, x.seq->draft_ids().size()));
      ASSERT_TRUE(x.num_draft == 0 || x.sample);
      ASSERT_LE(x.start + x.num_tokens - x.num_draft, x.seq->num_tokens());
      ASSERT_LE(x.seq->num_output_tokens() + x.num_draft, x.seq->max_tokens() - 1);
      total += x.num_tokens;
    }
    ASSERT_EQ(total, d.num_batched_tokens);
    for (const std::string& p : d.preempted) {
      for (const Sequence* r : s.running()) ASSERT_LT(r->arrival(), s.Find(p)->arrival()) << "preempted not newest";
    }
    StepPlan plan;  // as every worker expands the step's delta
    if (!d.empty()) {
      absl::StatusOr<StepPlan> expanded = batch.Apply(d.plan);
      ASSERT_TRUE(expanded.ok()) << expanded.status();
      plan = std::move(*expanded);
    }
    const absl::Status valid = d.empty() ? absl::OkStatus() : plan.Validate(c.num_kv_blocks, c.block_size);
    ASSERT_TRUE(valid.ok()) << valid;
    ASSERT_TRUE(CheckPlanAgainstKv(s, d, plan, kv)) << "step " << step;

    if (!d.scheduled.empty() && chance(0.01)) {  // cancelled while the step runs
      const std::string id = d.scheduled[uniform(0, static_cast<int>(d.scheduled.size()) - 1)].seq->request_id();
      if (s.Abort(id).ok()) reqs[id].reason = FinishReason::kCancelled;
    }
    std::vector<int32_t> sampled;
    for (const ScheduledSequence& x : d.scheduled) {
      if (!x.sample) continue;
      std::vector<int32_t> t = x.seq->token_ids();
      for (int32_t i = 0; i <= x.num_draft; ++i) {  // the model's token after each draft prefix
        sampled.push_back(RandomModelToken(t));
        if (i < x.num_draft) t.push_back(x.seq->draft_ids()[i]);
      }
    }
    std::vector<DraftRequest> drafting;
    for (const SequenceOutput& o : s.Update(d, sampled)) {
      Expect& e = reqs[o.seq->request_id()];
      ASSERT_EQ(e.reason, FinishReason::kNone) << o.seq->request_id() << " output after finishing";
      ASSERT_FALSE(o.token_ids.empty());
      ASSERT_LE(o.token_ids.size(), static_cast<size_t>(o.num_accepted + 1));
      for (size_t i = 0; i < o.token_ids.size(); ++i) {
        ASSERT_EQ(e.reason, FinishReason::kNone) << o.seq->request_id() << " a token after its stop";
        ASSERT_EQ(o.token_ids[i], RandomModelToken(e.tokens)) << o.seq->request_id();
        e.tokens.push_back(o.token_ids[i]);
        if (o.token_ids[i] == 0) e.reason = FinishReason::kStop;
      }
      ASSERT_EQ(o.finish_reason == FinishReason::kStop, e.reason == FinishReason::kStop) << o.seq->request_id();
      e.reason = o.finish_reason;
      accepted += o.num_accepted;
      rejected += o.num_draft - o.num_accepted;
      if (rc.mtp && !o.seq->is_finished() && s.MaxDrafts(*o.seq) > 0) {
        drafting.push_back(DraftRequest{o.seq, o.logit_row + static_cast<int32_t>(o.token_ids.size()) - 1,
                                        s.MaxDrafts(*o.seq)});
      }
      // Drafts for the next step, as a proposer would: the model's true continuation,
      // sometimes wrong at one position, sometimes longer than K.
      if (rc.spec_k > 0 && !o.seq->is_finished() && chance(0.8)) {
        std::vector<int32_t> t = e.tokens, draft;
        const int n = uniform(1, rc.spec_k + 2);
        for (int i = 0; i < n; ++i) {
          draft.push_back(RandomModelToken(t));
          t.push_back(draft.back());
        }
        if (chance(0.4)) draft[uniform(0, n - 1)] = uniform(1, 30);
        s.SetDrafts(*o.seq, draft);
      }
    }
    if (!drafting.empty()) {  // the draft pass, as the MTP proposer sends it and every rank expands it
      absl::StatusOr<DraftDelta> delta = DraftDelta::Deserialize(s.PlanDraftPass(drafting, rc.spec_k).Serialize());
      ASSERT_TRUE(delta.ok()) << delta.status();
      std::vector<KvGroupPlan> tables;
      const absl::Status applied = batch.ApplyDraft(*delta, tables);
      ASSERT_TRUE(applied.ok()) << applied;
      ASSERT_TRUE(CheckDraftReads(s, drafting, *delta, tables, kv)) << "step " << step;
      ++draft_passes;
    }
    ASSERT_TRUE(CheckBlockAccounting(s)) << "step " << step;
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](const std::string& id) { return reqs[id].reason != FinishReason::kNone; }),
               live.end());
  }
  ASSERT_FALSE(s.has_unfinished()) << "not drained after " << step << " steps";
  int finished_by[5] = {};
  for (const auto& [id, e] : reqs) {
    ASSERT_NE(e.reason, FinishReason::kNone) << id << " never finished";
    ++finished_by[static_cast<int>(e.reason)];
    const int32_t outputs = static_cast<int32_t>(e.tokens.size()) - e.prompt_len;
    ASSERT_LE(outputs, e.max_tokens) << id;
    if (e.reason == FinishReason::kLength) {
      ASSERT_EQ(outputs, e.max_tokens) << id;
    }
    if (e.reason == FinishReason::kStop) {
      ASSERT_EQ(e.tokens.back(), 0) << id;
    }
    if (e.reason == FinishReason::kError) {
      ASSERT_EQ(outputs, 0) << id;
    }
  }
  for (int32_t g = 0; g < s.block_manager().num_groups(); ++g) {
    EXPECT_EQ(s.block_manager().pool(g).num_free(), s.block_manager().pool(g).num_blocks());
  }
  EXPECT_GT(finished_by[static_cast<int>(FinishReason::kLength)], 0);
  EXPECT_GT(finished_by[static_cast<int>(FinishReason::kStop)], 0);
  EXPECT_GT(finished_by[static_cast<int>(FinishReason::kCancelled)], 0);
  const SchedulerStats st = s.stats();
  if (rc.spec_k > 0) {
    EXPECT_GT(accepted, 0);
    EXPECT_GT(rejected, 0);
    EXPECT_EQ(st.spec.num_accepted_tokens, accepted);
    EXPECT_EQ(st.spec.num_draft_tokens, accepted + rejected);
  }
  if (rc.mtp) {
    EXPECT_GT(draft_passes, 0);
  }
  std::printf("seed %u groups %zu caching %d: %zu requests, %d steps, %lld preemptions, hit rate %.2f, "
              "finished length/stop/cancelled/error %d/%d/%d/%d\n",
              rc.seed, rc.windows.size(), rc.caching, reqs.size(), step, static_cast<long long>(st.num_preemptions),
              st.prefix_cache_hit_rate(), finished_by[2], finished_by[1], finished_by[3], finished_by[4]);
}

TEST(SchedulerRandomTest, InvariantsHoldAfterEveryStep) {
  const RandomCase cases[] = {
      {{24}, {0}, 4, true, 1},          {{24}, {0}, 4, false, 2},        {{30}, {0}, 4, true, 3},
      {{24, 3}, {0, 8}, 4, true, 4},    {{26, 5}, {0, 8}, 4, false, 5},  {{24, 4}, {0, 8}, 4, true, 6},
      {{12, 4}, {0, 5}, 8, true, 7},    {{40, 14}, {0, 8}, 4, true, 10},    {{9, 3}, {0, 16}, 16, true, 8},  {{4}, {12}, 4, true, 9},
  };
  for (const RandomCase& rc : cases) {
    RunRandom(rc);
    if (HasFatalFailure()) return;
  }
}

// Speculative decoding: drafts take lookahead slots, rejected ones leave KV behind that
// must never be read, and the outputs stay the model's tokens exactly.
TEST(SchedulerRandomTest, InvariantsHoldWithDraftsVerifiedEachStep) {
  const RandomCase cases[] = {
      {{24}, {0}, 4, true, 11, 1},       {{24}, {0}, 4, false, 12, 3},     {{30}, {0}, 4, true, 13, 5},
      {{24, 3}, {0, 8}, 4, true, 14, 2}, {{26, 5}, {0, 8}, 4, false, 15, 4}, {{12, 4}, {0, 5}, 8, true, 16, 3},
      {{9, 3}, {0, 16}, 16, true, 17, 4}, {{4}, {12}, 4, true, 18, 2},
  };
  for (const RandomCase& rc : cases) {
    RunRandom(rc);
    if (HasFatalFailure()) return;
  }
}

// The MTP drafter: sliding groups keep its lookback, each step's draft pass reads only
// blocks the sequences hold with what they wrote, and its table edits keep every rank's
// batch equal to the scheduler's tables for the next step's delta.
TEST(SchedulerRandomTest, MtpDraftPassesReadOnlyHeldKv) {
  const RandomCase cases[] = {
      {{24, 4}, {0, 8}, 4, true, 21, 3, true},  {{26, 6}, {0, 8}, 4, false, 22, 4, true},
      {{12, 5}, {0, 5}, 8, true, 23, 2, true},  {{9, 4}, {0, 16}, 16, true, 24, 4, true},
      {{6}, {12}, 4, true, 25, 2, true},        {{24}, {0}, 4, true, 26, 3, true},
  };
  for (const RandomCase& rc : cases) {
    RunRandom(rc);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace tpserve
