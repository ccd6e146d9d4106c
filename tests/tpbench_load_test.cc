// tpbench's load generator (bench/tpbench/runner.h) against a fake target, and its
// workloads (bench/tpbench/workload.h) on the fixture tokenizer and small files.
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "bench/tpbench/runner.h"
#include "bench/tpbench/workload.h"
#include "coordinator/text/tokenizer.h"
#include "gtest/gtest.h"

namespace tpserve::bench {
namespace {

// Answers every request with max_tokens tokens after a short sleep; fails requests whose
// prompt says "fail"; counts the requests in flight at once.
class FakeTarget : public Target {
 public:
  std::string Name() const override { return "fake://"; }
  bool AcceptsTokenIds() const override { return true; }
  RequestOutcome Send(const BenchRequest& request, absl::Duration timeout) override {
    const int now = ++in_flight_;
    int seen = max_in_flight_.load();
    while (now > seen && !max_in_flight_.compare_exchange_weak(seen, now)) {
    }
    StreamClock clock;
    RequestOutcome out;
    for (int i = 0; i < request.max_tokens; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      clock.OnChunk(1);
    }
    out.prompt_tokens = static_cast<int>(request.token_ids.size());
    out.success = request.text != "fail";
    if (!out.success) out.error = "told to fail";
    clock.Finish(&out);
    --in_flight_;
    std::lock_guard<std::mutex> lock(mu_);
    sent_.push_back(request.seq);
    return out;
  }
  absl::StatusOr<ServerCounters> Counters() override {
    ServerCounters c;
    c.steps = ++counter_reads_ * 10;
    c.compute_ms = c.steps * 2.0;
    c.allreduce_ms = c.steps * 0.5;
    return c;
  }
  std::atomic<int> in_flight_{0}, max_in_flight_{0};
  int counter_reads_ = 0;
  std::mutex mu_;
  std::vector<int64_t> sent_;
};

std::vector<BenchRequest> Prompts(int n, int max_tokens) {
  std::vector<BenchRequest> v;
  for (int i = 0; i < n; ++i) {
    BenchRequest r;
    r.seq = i;
    r.text = "p";
    r.token_ids = {1, 2, 3};
    r.max_tokens = max_tokens;
    v.push_back(r);
  }
  return v;
}

// tpbench compare's load: every prompt exactly once at the given concurrency, after the
// warm-up (which sends the first prompt and is sent again in the level).
TEST(RunnerTest, RunEachOnceSendsEveryPromptOnce) {
  FakeTarget target;
  LoadOptions o;
  o.rounds = 4;  // ignored
  o.warmup_requests = 1;
  o.progress = false;
  std::vector<RequestRecord> records;
  Runner runner(target, Prompts(7, 2), o, [&](const RequestRecord& r) { records.push_back(r); });
  RunRecord run;
  ASSERT_TRUE(runner.RunEachOnce(3, &run).ok());
  ASSERT_EQ(records.size(), 1u + 7);
  EXPECT_EQ(records[0].round, -1);
  EXPECT_EQ(records[0].prompt_index, 0);
  std::multiset<int> prompts;
  for (size_t i = 1; i < records.size(); ++i) {
    EXPECT_EQ(records[i].round, 0);
    EXPECT_EQ(records[i].concurrency, 3);
    prompts.insert(records[i].prompt_index);
  }
  EXPECT_EQ(prompts, (std::multiset<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(target.max_in_flight_.load(), 3);
  ASSERT_EQ(run.levels.size(), 1u);
  EXPECT_EQ(run.levels[0].concurrency, 3);
  EXPECT_EQ(run.levels[0].rounds, 1);
  EXPECT_GT(run.warmup_ms, 0);
  Runner bad(target, Prompts(2, 1), o, [](const RequestRecord&) {});
  EXPECT_FALSE(bad.RunEachOnce(0, &run).ok());
}

TEST(RunnerTest, ClosedLoopLevelsRoundsAndWarmup) {
  FakeTarget target;
  LoadOptions o;
  o.concurrencies = {1, 3};
  o.rounds = 4;
  o.warmup_requests = 2;
  o.progress = false;
  std::vector<RequestRecord> records;
  Runner runner(target, Prompts(5, 3), o, [&](const RequestRecord& r) { records.push_back(r); });
  RunRecord run;
  ASSERT_TRUE(runner.Run(&run).ok());
  ASSERT_EQ(records.size(), 2u + 1 * 4 + 3 * 4);
  std::map<std::pair<int, int>, int> per_level_round;
  std::set<int64_t> seqs;
  for (const RequestRecord& r : records) {
    EXPECT_TRUE(r.outcome.success);
    EXPECT_EQ(r.outcome.completion_tokens, 3);
    EXPECT_EQ(r.outcome.itl_ms.size(), 2u);
    EXPECT_GT(r.outcome.ttft_ms, 0);
    EXPECT_EQ(r.expected_prompt_tokens, 3);
    EXPECT_EQ(r.target, "fake://");
    EXPECT_FALSE(r.timestamp.empty());
    seqs.insert(r.seq);
    if (r.round >= 0) ++per_level_round[{r.concurrency, r.round}];
  }
  EXPECT_EQ(seqs.size(), records.size()) << "seq numbers are unique";
  EXPECT_EQ(records[0].round, -1);
  EXPECT_EQ(records[1].round, -1);
  for (int round = 0; round < 4; ++round) {
    EXPECT_EQ((per_level_round[{1, round}]), 1);
    EXPECT_EQ((per_level_round[{3, round}]), 3);
  }
  EXPECT_EQ(target.max_in_flight_.load(), 3) << "level 3 runs 3 clients at once, never more";
  EXPECT_GT(run.warmup_ms, 0);
  ASSERT_EQ(run.levels.size(), 2u);
  EXPECT_EQ(run.levels[1].concurrency, 3);
  EXPECT_LT(run.levels[0].end_s, run.levels[1].start_s + 1e-9);
  // Counters are read before and after each level: the fake adds 10 steps per read.
  EXPECT_TRUE(run.levels[0].server.available);
  EXPECT_EQ(run.levels[0].server.steps, 10);
  EXPECT_DOUBLE_EQ(run.levels[0].server.allreduce_ms, 5.0);
  EXPECT_FALSE(run.start_time.empty());
  EXPECT_FALSE(run.end_time.empty());
}

TEST(RunnerTest, OpenLoopArrivalsAndFailuresAreRecords) {
  FakeTarget target;
  LoadOptions o;
  o.concurrencies = {};
  o.request_rates = {200};
  o.rounds = 3;
  o.round_size = 4;
  o.warmup_requests = 0;
  o.progress = false;
  std::vector<BenchRequest> prompts = Prompts(4, 2);
  prompts[1].text = "fail";
  std::vector<RequestRecord> records;
  Runner runner(target, prompts, o, [&](const RequestRecord& r) { records.push_back(r); });
  RunRecord run;
  ASSERT_TRUE(runner.Run(&run).ok());
  ASSERT_EQ(records.size(), 12u);
  int failed = 0;
  std::map<int, int> per_round;
  for (const RequestRecord& r : records) {
    EXPECT_EQ(r.request_rate, 200);
    EXPECT_EQ(r.concurrency, 0);
    ++per_round[r.round];
    if (!r.outcome.success) {
      ++failed;
      EXPECT_EQ(r.outcome.error, "told to fail");
    }
  }
  EXPECT_EQ(failed, 3) << "prompt 1 of 4, cycled over 12 arrivals";
  EXPECT_EQ(per_round[0], 4);
  EXPECT_EQ(per_round[2], 4);
  ASSERT_EQ(run.levels.size(), 1u);
  EXPECT_EQ(run.levels[0].request_rate, 200);
}

TEST(RunnerTest, InvalidOptionsAreErrors) {
  FakeTarget target;
  LoadOptions o;
  o.concurrencies = {0};
  EXPECT_NE(o.Validate().message().find("--concurrency 0"), std::string::npos);
  o.concurrencies = {};
  EXPECT_FALSE(o.Validate().ok());
  o.concurrencies = {1};
  o.rounds = 0;
  EXPECT_NE(o.Validate().message().find("--rounds"), std::string::npos);
  Runner empty(target, {}, LoadOptions{}, [](const RequestRecord&) {});
  RunRecord run;
  EXPECT_FALSE(empty.Run(&run).ok());
}

std::unique_ptr<Tokenizer> FixtureTokenizer() {
  auto t = Tokenizer::FromFile(std::string(TPSERVE_FIXTURES) + "/tokenizers/gemma/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(WorkloadTest, RandomWithTokenizerHasExactLengthsAndNoSpecialTokens) {
  auto tokenizer = FixtureTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  WorkloadOptions o;
  o.num_prompts = 20;
  o.input_len = 40;
  o.output_len = 10;
  o.range_ratio = 0.5;
  o.seed = 7;
  auto w = MakeWorkload(o, tokenizer.get());
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), 20u);
  std::set<size_t> lengths;
  for (const BenchRequest& r : *w) {
    EXPECT_GE(r.token_ids.size(), 20u);
    EXPECT_LE(r.token_ids.size(), 60u);
    EXPECT_EQ(r.expected_prompt_tokens, static_cast<int>(r.token_ids.size()));
    EXPECT_GE(r.max_tokens, 5);
    EXPECT_LE(r.max_tokens, 15);
    EXPECT_FALSE(r.text.empty());
    for (int32_t id : r.token_ids) EXPECT_FALSE(tokenizer->IsSpecial(id));
    lengths.insert(r.token_ids.size());
  }
  EXPECT_GT(lengths.size(), 3u) << "range_ratio 0.5 spreads the lengths";
  auto again = MakeWorkload(o, tokenizer.get());
  EXPECT_EQ((*again)[3].token_ids, (*w)[3].token_ids) << "seeded: the same prompts every time";
  o.seed = 8;
  EXPECT_NE((*MakeWorkload(o, tokenizer.get()))[3].token_ids, (*w)[3].token_ids);
}

TEST(WorkloadTest, RandomWithoutTokenizerIsWords) {
  WorkloadOptions o;
  o.num_prompts = 3;
  o.input_len = 12;
  auto w = MakeWorkload(o, nullptr);
  ASSERT_TRUE(w.ok());
  for (const BenchRequest& r : *w) {
    EXPECT_TRUE(r.token_ids.empty());
    EXPECT_EQ(std::count(r.text.begin(), r.text.end(), ' '), 11);
    EXPECT_EQ(r.expected_prompt_tokens, -1);
  }
}

class FileWorkloadTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (std::filesystem::temp_directory_path() / ("tpbench_" + name)).string();
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(FileWorkloadTest, JsonlPromptsIdsAndErrors) {
  WorkloadOptions o;
  o.kind = "jsonl";
  o.output_len = 9;
  o.path = Write("a.jsonl", "{\"prompt\": \"hello world\", \"max_tokens\": 5}\n\n{\"prompt_token_ids\": [5, 6, 7]}\n");
  auto w = MakeWorkload(o, nullptr);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), 2u);
  EXPECT_EQ((*w)[0].text, "hello world");
  EXPECT_EQ((*w)[0].max_tokens, 5);
  EXPECT_EQ((*w)[1].token_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ((*w)[1].max_tokens, 9);
  EXPECT_EQ((*w)[1].seq, 1);

  o.path = Write("b.jsonl", "{\"prompt\": \"ok\"}\n{\"prompt\": 3}\n");
  auto bad = MakeWorkload(o, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("b.jsonl:2"), std::string::npos) << bad.status();
  o.path = Write("c.jsonl", "not json\n");
  EXPECT_NE(MakeWorkload(o, nullptr).status().message().find("c.jsonl:1"), std::string::npos);
  o.path = "/nonexistent/x.jsonl";
  EXPECT_EQ(MakeWorkload(o, nullptr).status().code(), absl::StatusCode::kNotFound);
  o.kind = "csv";
  EXPECT_NE(MakeWorkload(o, nullptr).status().message().find("random, jsonl or sharegpt"), std::string::npos);
}

TEST_F(FileWorkloadTest, ShareGptTakesFirstTurnAndSkipsShortPairs) {
  auto tokenizer = FixtureTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  WorkloadOptions o;
  o.kind = "sharegpt";
  o.path = Write("s.json", R"([
    {"id": "a", "conversations": [{"from": "human", "value": "Tell me a long story about the sea and the ships on it"},
                                  {"from": "gpt", "value": "Once upon a time a ship sailed the sea for many days and nights"}]},
    {"id": "b", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello there, how are you today?"}]},
    {"id": "c", "conversations": [{"from": "human", "value": "only one turn"}]}
  ])");
  auto w = MakeWorkload(o, tokenizer.get());
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), 1u) << "b's prompt is under 4 tokens, c has one turn";
  EXPECT_EQ((*w)[0].text, "Tell me a long story about the sea and the ships on it");
  EXPECT_EQ((*w)[0].max_tokens,
            static_cast<int>(tokenizer->Encode("Once upon a time a ship sailed the sea for many days and nights", false).size()));
  o.fixed_output_len = 7;
  EXPECT_EQ((*MakeWorkload(o, tokenizer.get()))[0].max_tokens, 7);
  o.max_model_len = 10;  // the one usable prompt no longer fits
  EXPECT_FALSE(MakeWorkload(o, tokenizer.get()).ok());
  o.path = Write("t.json", "{\"not\": \"an array\"}");
  EXPECT_NE(MakeWorkload(o, tokenizer.get()).status().message().find("JSON array"), std::string::npos);
}

}  // namespace
}  // namespace tpserve::bench
