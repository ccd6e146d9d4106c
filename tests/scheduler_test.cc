// Scheduler tests: token budget, chunked prefill, decode priority, preemption, abort,
// admission errors, stop conditions, prefix reuse, KV occupancy stats. Pure CPU,
// milliseconds. The randomized invariant test is tests/scheduler_random_test.cc.
#include "coordinator/engine/scheduler.h"

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/persistent_batch.h"

namespace tpserve {
namespace {

constexpr int32_t kEos = 127;  // NextToken never returns it

SchedulerConfig Config(std::vector<int64_t> num_blocks, std::vector<int32_t> windows, int32_t budget,
                       int32_t max_num_seqs = 8, int32_t block_size = 4, bool caching = true) {
  SchedulerConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = budget;
  c.max_model_len = 512;
  c.block_size = block_size;
  c.enable_prefix_caching = caching;
  c.num_kv_blocks = std::move(num_blocks);
  c.kv_group_windows = std::move(windows);
  c.vocab_size = 128;
  c.eos_token_ids = {kEos};
  return c;
}

// The fake model: the next token is a function of every token before it, so recompute
// after preemption must reproduce exactly what an uninterrupted run samples.
uint64_t Fnv(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return h;
}
int32_t NextToken(const std::vector<int32_t>& tokens) { return 1 + static_cast<int32_t>(Fnv(tokens) % 97); }

std::vector<int32_t> Prompt(int32_t n, int32_t first) {
  std::vector<int32_t> p(n);
  for (int32_t i = 0; i < n; ++i) p[i] = first + i;
  return p;
}

SequenceRequest Req(std::string id, std::vector<int32_t> prompt, int32_t max_tokens,
                    std::vector<int32_t> stop = {}) {
  SamplingParams params;
  params.max_tokens = max_tokens;
  params.stop_token_ids = std::move(stop);
  return SequenceRequest{std::move(id), std::move(prompt), std::move(params)};
}

struct StepResult {
  SchedulerOutput decision;
  StepPlan plan;  // the delta as a worker expands it
  std::vector<SequenceOutput> outputs;
};

// A worker's batch per scheduler, new at the scheduler's first step (keyed by address,
// which a later test's scheduler may reuse).
PersistentBatch& BatchOf(const Scheduler& s) {
  static std::map<const Scheduler*, PersistentBatch> batches;
  auto it = batches.find(&s);
  if (it == batches.end() || s.stats().num_steps == 1) {
    batches.erase(&s);
    it = batches.emplace(&s, PersistentBatch(static_cast<int32_t>(s.config().num_kv_blocks.size()),
                                             s.config().block_size)).first;
  }
  return it->second;
}

// Schedule() and send the step to the worker's batch (every non-empty step is sent), so
// that the batch sees every delta; returns the expanded plan in *plan.
SchedulerOutput ScheduleAndSend(Scheduler& s, StepPlan* plan = nullptr) {
  SchedulerOutput d = s.Schedule();
  if (d.empty()) return d;
  absl::StatusOr<StepPlan> expanded = BatchOf(s).Apply(d.plan);
  EXPECT_TRUE(expanded.ok()) << expanded.status();
  if (!expanded.ok()) return d;
  const absl::Status valid = expanded->Validate(s.config().num_kv_blocks, s.config().block_size);
  EXPECT_TRUE(valid.ok()) << valid;
  if (plan != nullptr) *plan = std::move(*expanded);
  return d;
}

StepResult Step(Scheduler& s, std::function<int32_t(const Sequence&)> model = nullptr) {
  StepResult r;
  r.decision = ScheduleAndSend(s, &r.plan);
  std::vector<int32_t> sampled;
  for (const ScheduledSequence& x : r.decision.scheduled) {
    if (x.sample) sampled.push_back(model ? model(*x.seq) : NextToken(x.seq->token_ids()));
  }
  r.outputs = s.Update(r.decision, sampled);
  return r;
}

// Runs to completion; returns each request's generated tokens and finish reason.
struct Finished {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
};
void Record(const StepResult& r, std::map<std::string, Finished>& out) {
  for (const auto& rej : r.decision.rejected) out[rej.request_id].reason = FinishReason::kError;
  for (const SequenceOutput& o : r.outputs) {
    for (int32_t t : o.token_ids) out[o.seq->request_id()].tokens.push_back(t);
    out[o.seq->request_id()].reason = o.finish_reason;
  }
}
std::map<std::string, Finished> RunToCompletion(Scheduler& s, std::map<std::string, Finished> out = {}) {
  for (int i = 0; i < 10000 && s.has_unfinished(); ++i) Record(Step(s), out);
  EXPECT_FALSE(s.has_unfinished());
  return out;
}

std::vector<int32_t> ReferenceOutput(std::vector<int32_t> tokens, int32_t max_tokens) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < max_tokens; ++i) {
    out.push_back(NextToken(tokens));
    tokens.push_back(out.back());
  }
  return out;
}

TEST(SequenceTest, FollowsTheLifecycle) {
  Sequence seq(Req("a", {1, 2, 3}, 4, {9}), 7);
  EXPECT_EQ(seq.status(), SequenceStatus::kWaiting);
  EXPECT_EQ(seq.arrival(), 7);
  EXPECT_EQ(seq.num_prompt_tokens(), 3);
  seq.SetRunning();
  EXPECT_TRUE(seq.is_prefill());  // no KV yet
  seq.AppendToken(5);
  EXPECT_EQ(seq.num_output_tokens(), 1);
  EXPECT_EQ(std::vector<int32_t>(seq.output_token_ids().begin(), seq.output_token_ids().end()),
            std::vector<int32_t>{5});
  EXPECT_EQ(seq.prompt_token_ids().size(), 3u);
  seq.SetPreempted();
  EXPECT_EQ(SequenceStatusName(seq.status()), "preempted");
  seq.SetRunning();
  seq.Finish(FinishReason::kError, "boom");
  EXPECT_TRUE(seq.is_finished());
  EXPECT_EQ(seq.finish_reason(), FinishReason::kError);
  EXPECT_EQ(seq.error_message(), "boom");
  EXPECT_DEATH(seq.Finish(FinishReason::kStop), "CHECK failed");
  EXPECT_DEATH(seq.SetRunning(), "CHECK failed");
}

TEST(SchedulerConfigTest, ValidatesEveryField) {
  EXPECT_TRUE(Config({8}, {0}, 16).Validate().ok());
  SchedulerConfig c = Config({8}, {0}, 16);
  c.max_num_seqs = 0;
  EXPECT_FALSE(c.Validate().ok());
  c = Config({8}, {0}, 0);
  EXPECT_FALSE(c.Validate().ok());
  c = Config({8}, {0, 4}, 16);
  EXPECT_FALSE(c.Validate().ok());
  EXPECT_FALSE(Scheduler::Create(c).ok());
  EXPECT_TRUE(Scheduler::Create(Config({8}, {0}, 16)).ok());
}

TEST(SchedulerTest, ChunkedPrefillRespectsTheTokenBudget) {
  Scheduler s(Config({64}, {0}, 16));
  ASSERT_TRUE(s.AddRequest(Req("a", Prompt(40, 1), 3)).ok());
  const int32_t starts[] = {0, 16, 32};
  const int32_t counts[] = {16, 16, 8};
  for (int i = 0; i < 3; ++i) {
    StepResult r = Step(s);
    ASSERT_EQ(r.decision.scheduled.size(), 1u);
    EXPECT_EQ(r.decision.scheduled[0].start, starts[i]);
    EXPECT_EQ(r.decision.scheduled[0].num_tokens, counts[i]);
    EXPECT_EQ(r.decision.num_batched_tokens, counts[i]);
    EXPECT_EQ(r.decision.scheduled[0].sample, i == 2);
    EXPECT_EQ(r.outputs.size(), i == 2 ? 1u : 0u);
    EXPECT_EQ(r.plan.positions.front(), starts[i]);
    if (i == 2) {
      EXPECT_EQ(r.plan.logit_rows, std::vector<int32_t>{7});
    }
  }
  for (int i = 0; i < 2; ++i) {
    StepResult r = Step(s);
    ASSERT_EQ(r.decision.num_batched_tokens, 1);
    EXPECT_EQ(r.plan.positions, std::vector<int32_t>{40 + i});
  }
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_DOUBLE_EQ(s.stats().kv_usage[0], 0.0);
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.num_scheduled_tokens, 42);
  EXPECT_EQ(st.num_steps, 5);
  EXPECT_EQ(st.num_running + st.num_waiting, 0);
}

TEST(SchedulerTest, DecodesGoFirstAndALongPromptNeverStallsThem) {
  Scheduler s(Config({256}, {0}, 8));
  ASSERT_TRUE(s.AddRequest(Req("short", Prompt(4, 1), 30)).ok());
  std::map<std::string, Finished> out;
  Record(Step(s), out);  // prefill; "short" is decoding from now on
  ASSERT_TRUE(s.AddRequest(Req("long", Prompt(100, 200), 1)).ok());
  int32_t long_prefilled = 0;
  for (int step = 0; long_prefilled < 100; ++step) {
    ASSERT_LT(step, 100);
    StepResult r = Step(s);
    Record(r, out);
    ASSERT_EQ(r.decision.scheduled.size(), 2u);
    EXPECT_EQ(r.decision.scheduled[0].seq->request_id(), "short");
    EXPECT_EQ(r.decision.scheduled[0].num_tokens, 1);
    EXPECT_LE(r.decision.num_batched_tokens, 8);
    long_prefilled += r.decision.scheduled[1].num_tokens;
  }
  out = RunToCompletion(s, out);
  EXPECT_EQ(out["long"].reason, FinishReason::kLength);
  EXPECT_EQ(out["short"].tokens, ReferenceOutput(Prompt(4, 1), 30));
}

TEST(SchedulerTest, MaxNumSeqsBoundsTheRunningSet) {
  Scheduler s(Config({256}, {0}, 64, /*max_num_seqs=*/2));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s.AddRequest(Req(absl::StrCat("r", i), Prompt(5, 10 * i), 4)).ok());
  std::map<std::string, Finished> out;
  while (s.has_unfinished()) {
    StepResult r = Step(s);
    Record(r, out);
    EXPECT_LE(r.decision.scheduled.size(), 2u);
    EXPECT_LE(s.running().size(), 2u);
  }
  EXPECT_EQ(out.size(), 5u);
  for (const auto& [id, f] : out) EXPECT_EQ(f.tokens.size(), 4u) << id;
}

// 20 blocks of 4 tokens: a 36-token prompt takes 10 (9 + the first output's). With a 30%
// watermark the second such request waits while the first runs (admitting it would leave
// 0 < 6 blocks free), so nothing is preempted; without a watermark it is admitted at once
// and the two grow into each other until one is preempted. Both orders finish everything.
TEST(SchedulerTest, KvWatermarkKeepsRoomForRunningSequencesToGrow) {
  for (const double watermark : {0.3, 0.0}) {
    SchedulerConfig c = Config({20}, {0}, 64, 8, 4, /*caching=*/false);
    c.kv_watermark = watermark;
    Scheduler s(c);
    ASSERT_TRUE(s.AddRequest(Req("a", Prompt(36, 100), 12)).ok());
    ASSERT_TRUE(s.AddRequest(Req("b", Prompt(36, 500), 12)).ok());
    StepResult first = Step(s);
    EXPECT_EQ(first.decision.scheduled.size(), watermark > 0 ? 1u : 2u) << "watermark " << watermark;
    std::map<std::string, Finished> out;
    Record(first, out);
    out = RunToCompletion(s, out);
    EXPECT_EQ(out["a"].tokens, ReferenceOutput(Prompt(36, 100), 12));
    EXPECT_EQ(out["b"].tokens, ReferenceOutput(Prompt(36, 500), 12));
    if (watermark > 0) {
      EXPECT_EQ(s.stats().num_preemptions, 0) << "watermark " << watermark;
    } else {
      EXPECT_GT(s.stats().num_preemptions, 0) << "watermark " << watermark;
    }
  }
  SchedulerConfig bad = Config({20}, {0}, 64);
  bad.kv_watermark = 1.0;
  EXPECT_FALSE(bad.Validate().ok());
}

class PreemptionTest : public ::testing::TestWithParam<bool> {};

TEST_P(PreemptionTest, TinyPoolPreemptsTheNewestAndEveryRequestStillFinishes) {
  // 6 blocks of 4 tokens; each request needs 5 of them alone (8 + 10 - 1 tokens of KV).
  Scheduler s(Config({6}, {0}, 32, 8, 4, /*caching=*/GetParam()));
  std::map<std::string, std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    const std::string id = absl::StrCat("r", i);
    prompts[id] = Prompt(8, 100 * i + 1);
    ASSERT_TRUE(s.AddRequest(Req(id, prompts[id], 10)).ok());
  }
  std::map<std::string, Finished> out;
  for (int i = 0; i < 2000 && s.has_unfinished(); ++i) {
    StepResult r = Step(s);
    for (const std::string& p : r.decision.preempted) {
      for (const Sequence* run : s.running()) EXPECT_LT(run->arrival(), s.Find(p)->arrival());
      EXPECT_EQ(s.Find(p)->status(), SequenceStatus::kPreempted);
    }
    for (const SequenceOutput& o : r.outputs) {
      for (int32_t t : o.token_ids) out[o.seq->request_id()].tokens.push_back(t);
      out[o.seq->request_id()].reason = o.finish_reason;
    }
  }
  ASSERT_FALSE(s.has_unfinished());
  EXPECT_GT(s.stats().num_preemptions, 0);
  for (const auto& [id, p] : prompts) {
    EXPECT_EQ(out[id].reason, FinishReason::kLength) << id;
    EXPECT_EQ(out[id].tokens, ReferenceOutput(p, 10)) << id;
  }
  EXPECT_DOUBLE_EQ(s.stats().kv_usage[0], 0.0);
}

INSTANTIATE_TEST_SUITE_P(PrefixCaching, PreemptionTest, ::testing::Bool());

// Pipeline stages keep several steps in flight: each Schedule() before the older steps'
// Updates takes a share of its own of the unfinished sequences, never one in flight, and
// never preempts one; the tokens are those of one step at a time. A sequence aborted while
// in flight stays valid until that step's Update, which drops its result.
class StepsInFlightTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(StepsInFlightTest, DisjointSharesExactTokensAndAbortInFlight) {
  const int32_t depth = GetParam();
  // A small pool (preemption) and a budget that chunks the prompts.
  SchedulerConfig c = Config({32}, {0}, 24, /*max_num_seqs=*/8);
  c.max_steps_in_flight = depth;
  Scheduler s(c);
  std::map<std::string, std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) {
    const std::string id = absl::StrCat("r", i);
    prompts[id] = Prompt(6 + 3 * i, 10 * i + 1);
    ASSERT_TRUE(s.AddRequest(Req(id, prompts[id], 12)).ok());
  }
  std::deque<SchedulerOutput> in_flight;
  std::map<std::string, Finished> out;
  size_t most_in_flight = 0;
  bool aborted = false;
  for (int i = 0; i < 5000 && (s.has_unfinished() || !in_flight.empty()); ++i) {
    while (static_cast<int32_t>(in_flight.size()) < depth) {
      const size_t unfinished = s.running().size() + s.waiting().size();
      SchedulerOutput d = ScheduleAndSend(s);
      Record(StepResult{d, {}, {}}, out);
      if (d.empty()) break;
      EXPECT_LE(d.scheduled.size(), (unfinished + depth - 1) / depth);
      for (const ScheduledSequence& x : d.scheduled) {
        EXPECT_EQ(x.seq->in_flight(), depth > 1);
        for (const SchedulerOutput& older : in_flight) {
          for (const ScheduledSequence& y : older.scheduled) EXPECT_NE(x.seq, y.seq);
        }
      }
      for (const std::string& p : d.preempted) EXPECT_FALSE(s.Find(p)->in_flight()) << p;
      in_flight.push_back(std::move(d));
    }
    most_in_flight = std::max(most_in_flight, in_flight.size());
    ASSERT_FALSE(in_flight.empty());
    // Once, abort a sequence of the oldest step while it is in flight, and schedule once
    // more before its Update (the step's pointer to it must stay valid).
    if (!aborted && depth > 1 && s.stats().num_steps > 6) {
      const std::string victim = in_flight.front().scheduled.front().seq->request_id();
      ASSERT_TRUE(s.Abort(victim).ok());
      out[victim].reason = FinishReason::kCancelled;
      aborted = true;
      if (static_cast<int32_t>(in_flight.size()) < depth) {
        SchedulerOutput d = ScheduleAndSend(s);
        if (!d.empty()) in_flight.push_back(std::move(d));
      }
    }
    SchedulerOutput d = std::move(in_flight.front());
    in_flight.pop_front();
    std::vector<int32_t> sampled;
    for (const ScheduledSequence& x : d.scheduled) {
      if (x.sample) sampled.push_back(NextToken(x.seq->token_ids()));
    }
    for (const SequenceOutput& o : s.Update(d, sampled)) {
      EXPECT_NE(out[o.seq->request_id()].reason, FinishReason::kCancelled);
      for (int32_t t : o.token_ids) out[o.seq->request_id()].tokens.push_back(t);
      out[o.seq->request_id()].reason = o.finish_reason;
    }
  }
  ASSERT_FALSE(s.has_unfinished());
  EXPECT_EQ(most_in_flight, static_cast<size_t>(depth));
  EXPECT_GT(s.stats().num_preemptions, 0);
  int cancelled = 0;
  for (const auto& [id, p] : prompts) {
    if (out[id].reason == FinishReason::kCancelled) {
      ++cancelled;
      continue;
    }
    EXPECT_EQ(out[id].reason, FinishReason::kLength) << id;
    EXPECT_EQ(out[id].tokens, ReferenceOutput(p, 12)) << id;
  }
  EXPECT_EQ(cancelled, depth > 1 ? 1 : 0);
  EXPECT_DOUBLE_EQ(s.stats().kv_usage[0], 0.0);
  EXPECT_TRUE(s.block_manager().pool(0).CheckInvariants().ok());
}

INSTANTIATE_TEST_SUITE_P(Depths, StepsInFlightTest, ::testing::Values(1, 2, 4));

TEST(SchedulerTest, AbortFreesBlocksInEveryState) {
  Scheduler s(Config({64}, {0}, 12, /*max_num_seqs=*/2));
  ASSERT_TRUE(s.AddRequest(Req("decoding", Prompt(4, 1), 50)).ok());
  Step(s);
  ASSERT_TRUE(s.AddRequest(Req("prefilling", Prompt(40, 100), 50)).ok());
  ASSERT_TRUE(s.AddRequest(Req("waiting", Prompt(8, 300), 50)).ok());
  Step(s);
  ASSERT_TRUE(s.Find("decoding")->is_running());
  ASSERT_TRUE(s.Find("prefilling")->is_prefill());
  ASSERT_EQ(s.Find("waiting")->status(), SequenceStatus::kWaiting);
  EXPECT_GT(s.stats().kv_usage[0], 0.0);

  // Aborted between Schedule() and Update(): the step's result for it is dropped.
  SchedulerOutput d = ScheduleAndSend(s);
  ASSERT_TRUE(s.Abort("decoding").ok());
  std::vector<int32_t> sampled(d.num_logit_rows(), 5);
  for (const SequenceOutput& o : s.Update(d, sampled)) EXPECT_NE(o.seq->request_id(), "decoding");

  EXPECT_TRUE(s.Abort("prefilling").ok());
  EXPECT_TRUE(s.Abort("waiting").ok());
  EXPECT_EQ(s.Abort("waiting").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.Abort("nobody").code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_DOUBLE_EQ(s.stats().kv_usage[0], 0.0);
  EXPECT_TRUE(s.block_manager().pool(0).CheckInvariants().ok());
  EXPECT_TRUE(ScheduleAndSend(s).empty());
}

TEST(SchedulerTest, RequestsThatCanNeverRunFinishWithAnErrorAtAdmission) {
  SchedulerConfig c = Config({8}, {0}, 16);  // 32 tokens of KV
  c.max_model_len = 64;
  Scheduler s(c);
  ASSERT_TRUE(s.AddRequest(Req("too_much_kv", Prompt(30, 1), 10)).ok());
  ASSERT_TRUE(s.AddRequest(Req("too_long", Prompt(60, 1), 10)).ok());
  ASSERT_TRUE(s.AddRequest(Req("empty", {}, 10)).ok());
  ASSERT_TRUE(s.AddRequest(Req("no_tokens", Prompt(3, 1), 0)).ok());
  ASSERT_TRUE(s.AddRequest(Req("fine", Prompt(20, 1), 13)).ok());  // 32 tokens of KV exactly
  EXPECT_EQ(s.AddRequest(Req("fine", Prompt(2, 1), 1)).code(), absl::StatusCode::kAlreadyExists);
  SchedulerOutput d = ScheduleAndSend(s);
  ASSERT_EQ(d.rejected.size(), 4u);
  std::map<std::string, std::string> errors;
  for (const auto& r : d.rejected) errors[r.request_id] = r.error_message;
  EXPECT_NE(errors["too_much_kv"].find("KV cache"), std::string::npos) << errors["too_much_kv"];
  EXPECT_NE(errors["too_long"].find("max_model_len"), std::string::npos) << errors["too_long"];
  EXPECT_NE(errors["empty"].find("empty"), std::string::npos);
  EXPECT_NE(errors["no_tokens"].find("max_tokens"), std::string::npos);
  std::vector<int32_t> sampled(d.num_logit_rows(), 7);
  s.Update(d, sampled);
  std::map<std::string, Finished> out = RunToCompletion(s);
  EXPECT_EQ(out["fine"].reason, FinishReason::kLength);
  EXPECT_EQ(out["fine"].tokens.size(), 13u);
}

TEST(SchedulerTest, StopTokensAndEosEndSequencesAfterMinTokens) {
  Scheduler s(Config({64}, {0}, 64));
  const std::vector<int32_t> p = Prompt(6, 1);
  ASSERT_TRUE(s.AddRequest(Req("stop_token", p, 10, {NextToken(p)})).ok());
  SequenceRequest eos = Req("eos", Prompt(6, 50), 10);
  eos.params.min_tokens = 2;  // an EOS before the third token does not count
  ASSERT_TRUE(s.AddRequest(std::move(eos)).ok());
  SequenceRequest ignored = Req("ignore_eos", Prompt(6, 80), 3);
  ignored.params.ignore_eos = true;
  ASSERT_TRUE(s.AddRequest(std::move(ignored)).ok());
  auto model = [](const Sequence& seq) { return seq.request_id() == "stop_token" ? NextToken(seq.token_ids()) : kEos; };
  StepResult r = Step(s, model);
  ASSERT_EQ(r.outputs.size(), 3u);
  EXPECT_EQ(r.outputs[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(r.outputs[0].stop_token_id, NextToken(p));
  EXPECT_EQ(r.outputs[1].finish_reason, FinishReason::kNone);  // EOS as the 1st token, min_tokens 2
  EXPECT_EQ(r.outputs[2].finish_reason, FinishReason::kNone);
  r = Step(s, model);
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_EQ(r.outputs[0].finish_reason, FinishReason::kNone);  // the 2nd
  r = Step(s, model);
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_EQ(r.outputs[0].finish_reason, FinishReason::kStop);  // the 3rd: EOS counts
  EXPECT_EQ(r.outputs[0].stop_token_id, -1);
  EXPECT_EQ(r.outputs[1].finish_reason, FinishReason::kLength);  // ignore_eos: max_tokens 3
  EXPECT_FALSE(s.has_unfinished());
}

TEST(SchedulerTest, PlansCarryOneSamplingRowPerLogitRow) {
  Scheduler s(Config({64}, {0}, 64));
  SequenceRequest a = Req("a", Prompt(6, 1), 4);
  a.params.temperature = 0.5f;
  a.params.top_k = 7;
  a.params.presence_penalty = 0.5f;
  a.seed = 99;
  ASSERT_TRUE(s.AddRequest(std::move(a)).ok());
  SequenceRequest b = Req("b", Prompt(5, 40), 4);
  b.params.logprobs = 2;
  ASSERT_TRUE(s.AddRequest(std::move(b)).ok());
  StepResult r = Step(s);
  ASSERT_EQ(r.decision.plan.sampling.size(), 2u);
  EXPECT_EQ(r.decision.plan.sampling[0].temperature, 0.5f);
  EXPECT_EQ(r.decision.plan.sampling[0].top_k, 7);
  EXPECT_EQ(r.decision.plan.sampling[0].seed, 99u);
  EXPECT_EQ(r.decision.plan.sampling[0].step, 0u);
  EXPECT_TRUE(r.decision.plan.return_logits);  // b wants logprobs
  r = Step(s);
  EXPECT_EQ(r.decision.plan.sampling[0].step, 1u);  // the draw index is the output position
  ASSERT_EQ(r.decision.plan.penalty_offsets.size(), 3u);
  EXPECT_EQ(r.decision.plan.penalty_offsets[1], 1);  // a's first output token, for its presence penalty
}

TEST(SchedulerTest, SecondRequestWithTheSamePromptReusesItsBlocks) {
  for (const bool caching : {true, false}) {
    Scheduler s(Config({64}, {0}, 64, 8, 4, caching));
    ASSERT_TRUE(s.AddRequest(Req("a", Prompt(33, 1), 2)).ok());
    RunToCompletion(s);
    ASSERT_TRUE(s.AddRequest(Req("b", Prompt(33, 1), 2)).ok());
    StepResult r = Step(s);
    ASSERT_EQ(r.decision.scheduled.size(), 1u);
    EXPECT_EQ(r.decision.scheduled[0].start, caching ? 32 : 0);
    EXPECT_DOUBLE_EQ(s.stats().prefix_cache_hit_rate(), caching ? 32.0 / 66.0 : 0.0);
  }
}

TEST(SchedulerTest, HybridModelFreesSlidingBlocksAsItDecodes) {
  // A full group and a window-8 group with only 3 blocks: long generations still fit.
  Scheduler s(Config({64, 3}, {0, 8}, 16, 8, 4));
  ASSERT_TRUE(s.AddRequest(Req("a", Prompt(10, 1), 100)).ok());
  std::map<std::string, Finished> out = RunToCompletion(s);
  EXPECT_EQ(out["a"].tokens, ReferenceOutput(Prompt(10, 1), 100));
  EXPECT_EQ(s.stats().num_preemptions, 0);
}

TEST(SchedulerTest, StatsCountBlocksUsedAndLiveTokensPerGroup) {
  // Group 0 full attention, group 1 window 8; blocks of 4 tokens.
  Scheduler s(Config({16, 16}, {0, 8}, /*budget=*/64));
  ASSERT_TRUE(s.AddRequest(Req("a", Prompt(10, 1), 8)).ok());
  ASSERT_TRUE(s.AddRequest(Req("b", Prompt(5, 100), 2)).ok());
  Step(s);  // both prompts: a has 10 tokens of KV (3 blocks), b 5 (2 blocks)
  SchedulerStats st = s.stats();
  EXPECT_EQ(st.kv_blocks_used, (std::vector<int64_t>{5, 5}));
  // The next query reads at most window - 1 = 7 cached tokens of a sequence.
  EXPECT_EQ(s.KvLiveTokens(), (std::vector<int64_t>{15, 7 + 5}));
  Step(s);  // a's 11th token: its sliding block 0 left the window; b finished (max_tokens)
  st = s.stats();
  EXPECT_EQ(st.num_running, 1);
  EXPECT_EQ(st.kv_blocks_used, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(s.KvLiveTokens(), (std::vector<int64_t>{11, 7}));
}

}  // namespace
}  // namespace tpserve
