// The serving engine on a real model (the gemma4_text fixture at TP 2, ranks as threads):
// concurrent requests give the same greedy tokens as offline generation (batching must
// not change results), cancellation frees blocks, a tiny KV cache forces preemption and
// every request still completes correctly, bad requests are clear errors, drain works,
// per-step stats report KV occupancy and the time split; n-gram and MTP drafts keep the
// outputs and are counted.
#include "coordinator/engine/serving_engine.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/offline_harness.h"
#include "tests/tp_harness.h"
#include "worker/backend.h"
#include "worker/weight_source.h"

namespace tpserve {
namespace {

constexpr int kTp = 2;

struct Collected {
  std::vector<int32_t> ids;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  OutputEvent last;
};

Collected Drain(RequestStream& s) {
  Collected c;
  OutputEvent e;
  while (s.Next(&e, absl::Seconds(60))) {
    c.ids.insert(c.ids.end(), e.token_ids.begin(), e.token_ids.end());
    c.text += e.text;
    if (e.finish != FinishReason::kNone) {
      c.finish = e.finish;
      c.error = e.error;
      c.last = e;
      break;
    }
  }
  return c;
}

std::vector<int32_t> Prompt(int i, int len) {
  std::vector<int32_t> p;
  for (int k = 0; k < len; ++k) p.push_back(3 + (i * 131 + k * 17) % 500);
  return p;
}

// Starts the model on kTp thread-ranks, runs `body(engine, offline)` on rank 0 while the
// engine loop runs on its own thread; `offline` generates greedily without the engine.
void WithEngine(int64_t kv_blocks, int32_t max_num_seqs, int32_t max_queue,
                const std::function<void(ServingEngine&, const std::function<std::vector<int32_t>(
                                                               const std::vector<int32_t>&, int)>&)>& body,
                std::function<void(const EngineStepStats&)> on_step = nullptr,
                const SpeculativeConfig& speculative = {}) {
  auto tok = Tokenizer::FromFile(std::string(TPSERVE_FIXTURES) + "/tokenizers/gemma/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  // The MTP drafter's fixture assistant drafts for gemma4_text (gemma4_mtp/target is the same
  // checkpoint).
  const std::string drafter =
      speculative.method == SpeculativeConfig::Method::kMtp ? "gemma4_mtp/assistant" : "";
  testing::WithFixtureModel("gemma4_text", kTp, kv_blocks, [&](Model& model, StepExecutor& exec) {
    ServingConfig sc;
    sc.scheduler = SchedulerConfigFor(model, max_num_seqs, /*max_num_batched_tokens=*/64, /*max_model_len=*/256);
    sc.max_queue = max_queue;
    sc.on_step = on_step;
    sc.speculative = speculative;
    ModelInfo info;
    info.served_model_name = "tiny";
    ServingEngine engine(exec, **tok, sc, info);
    std::thread loop([&] { engine.Run(); });
    std::mutex offline_mu;
    auto offline = [&](const std::vector<int32_t>& prompt, int max_tokens) {
      // Offline generation shares the executor, so it runs between engine steps only
      // when the engine is idle: tests call it before submitting.
      std::lock_guard<std::mutex> lock(offline_mu);
      auto out = testing::GreedyGenerate(model, exec, {prompt}, max_tokens);
      EXPECT_TRUE(out.ok()) << out.status();
      return out.ok() ? out->outputs[0].output_ids : std::vector<int32_t>{};
    };
    body(engine, offline);
    engine.Shutdown(absl::Seconds(30));
    loop.join();
  }, /*block_size=*/16, drafter);
}

ServeRequest Greedy(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
  ServeRequest r;
  r.request_id = id;
  r.prompt_ids = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

TEST(ServingEngine, ConcurrentRequestsMatchOfflineGeneration) {
  WithEngine(/*kv_blocks=*/256, /*max_num_seqs=*/16, /*max_queue=*/100, [](ServingEngine& engine, auto& offline) {
    // Offline (no engine traffic yet): the engine loop is idle, waiting for requests.
    std::vector<std::vector<int32_t>> expect;
    constexpr int kN = 12;
    for (int i = 0; i < kN; ++i) expect.push_back(offline(Prompt(i, 5 + 9 * i), 6 + i % 5));
    // The reference prompt reproduces transformers' greedy tokens through the engine.
    const testing::Reference ref = testing::LoadReference("gemma4_text");
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < kN; ++i) {
      auto s = engine.Submit(Greedy("r" + std::to_string(i), Prompt(i, 5 + 9 * i), 6 + i % 5));
      ASSERT_TRUE(s.ok()) << s.status();
      streams.push_back(*s);
    }
    auto ref_stream = engine.Submit(Greedy("ref", ref.prompt_ids, 8));
    ASSERT_TRUE(ref_stream.ok());
    for (int i = 0; i < kN; ++i) {
      Collected c = Drain(*streams[i]);
      EXPECT_EQ(c.finish, FinishReason::kLength) << c.error;
      EXPECT_EQ(c.ids, expect[i]) << "request " << i;
      EXPECT_EQ(c.last.completion_tokens, static_cast<int>(expect[i].size()));
      EXPECT_EQ(c.last.prompt_tokens, 5 + 9 * i);
      EXPECT_GE(c.last.timings.first_token_ms, c.last.timings.queue_ms);
    }
    EXPECT_EQ(Drain(**ref_stream).ids, ref.greedy_ids);
    EngineStats st = engine.Stats();
    EXPECT_GT(st.generation_tokens, 0);
    // Every prompt was looked up in the prefix cache at least once (again after a preemption).
    int64_t prompt_tokens = static_cast<int64_t>(ref.prompt_ids.size());
    for (int i = 0; i < kN; ++i) prompt_tokens += 5 + 9 * i;
    EXPECT_GE(st.prefix_cache_queries, prompt_tokens);
    EXPECT_LE(st.prefix_cache_hits, st.prefix_cache_queries);
    EXPECT_DOUBLE_EQ(st.prefix_cache_hit_rate,
                     static_cast<double>(st.prefix_cache_hits) / static_cast<double>(st.prefix_cache_queries));
  });
}

// Stats counted drafts, and its speculative-decoding counters agree with each other.
void ExpectDraftsCounted(const EngineStats& st, const char* method) {
  EXPECT_GT(st.spec_num_drafts, 0) << method;
  EXPECT_GE(st.spec_num_draft_tokens, st.spec_num_drafts) << method;
  EXPECT_LE(st.spec_num_accepted_tokens, st.spec_num_draft_tokens) << method;
  int64_t per_pos = 0;
  for (int64_t n : st.spec_accepted_per_pos) per_pos += n;
  EXPECT_EQ(per_pos, st.spec_num_accepted_tokens) << method;
  EXPECT_GT(st.draft_ms, 0) << method << ": the drafting time has a phase of its own";
  std::printf("%s: %lld drafts, %lld/%lld draft tokens accepted\n", method, static_cast<long long>(st.spec_num_drafts),
              static_cast<long long>(st.spec_num_accepted_tokens), static_cast<long long>(st.spec_num_draft_tokens));
}

// n-gram speculative decoding in the serving engine: prompts that repeat a pattern get
// drafts; every request's greedy tokens are still those of offline generation without
// drafts, and Stats counts the drafts.
TEST(ServingEngine, SpeculativeDecodingKeepsOutputsAndCountsDrafts) {
  auto spec = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1,
                                        "prompt_lookup_max": 3})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  WithEngine(/*kv_blocks=*/256, /*max_num_seqs=*/8, /*max_queue=*/100, [](ServingEngine& engine, auto& offline) {
    constexpr int kN = 6;
    std::vector<std::vector<int32_t>> prompts, expect;
    for (int i = 0; i < kN; ++i) {
      std::vector<int32_t> p;
      for (int rep = 0; rep < 3 + i % 3; ++rep) {
        for (int k = 0; k < 4 + i; ++k) p.push_back(10 + 37 * i + k);
      }
      prompts.push_back(p);
      expect.push_back(offline(p, 10 + i));
    }
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < kN; ++i) {
      auto s = engine.Submit(Greedy("s" + std::to_string(i), prompts[i], 10 + i));
      ASSERT_TRUE(s.ok()) << s.status();
      streams.push_back(*s);
    }
    for (int i = 0; i < kN; ++i) {
      Collected c = Drain(*streams[i]);
      EXPECT_EQ(c.finish, FinishReason::kLength) << c.error;
      EXPECT_EQ(c.ids, expect[i]) << "request " << i;
      EXPECT_EQ(c.last.completion_tokens, static_cast<int>(expect[i].size()));
    }
    ExpectDraftsCounted(engine.Stats(), "n-gram");
  }, nullptr, *spec);
}

// The MTP drafter in the serving engine: concurrent requests draft in one batched pass per
// step; every request's greedy tokens are offline generation's without drafts, and Stats
// counts the MTP drafts as it counts n-gram ones.
TEST(ServingEngine, MtpDrafterKeepsOutputsAndCountsDrafts) {
  auto spec = ParseSpeculativeConfig(absl::StrCat(R"({"method": "mtp", "model": ")",
                                                  testing::FixtureDir("gemma4_mtp/assistant"),
                                                  R"(", "num_speculative_tokens": 3})"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  WithEngine(/*kv_blocks=*/256, /*max_num_seqs=*/8, /*max_queue=*/100, [](ServingEngine& engine, auto& offline) {
    constexpr int kN = 5;
    std::vector<std::vector<int32_t>> expect;
    for (int i = 0; i < kN; ++i) expect.push_back(offline(Prompt(40 + i, 8 + 3 * i), 9 + i));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < kN; ++i) {
      auto s = engine.Submit(Greedy("m" + std::to_string(i), Prompt(40 + i, 8 + 3 * i), 9 + i));
      ASSERT_TRUE(s.ok()) << s.status();
      streams.push_back(*s);
    }
    for (int i = 0; i < kN; ++i) {
      Collected c = Drain(*streams[i]);
      EXPECT_EQ(c.finish, FinishReason::kLength) << c.error;
      EXPECT_EQ(c.ids, expect[i]) << "request " << i;
    }
    ExpectDraftsCounted(engine.Stats(), "MTP");
  }, nullptr, *spec);
}

TEST(ServingEngine, TinyKvCacheForcesPreemptionAndEveryRequestCompletes) {
  // 8 blocks of 16 tokens: far less than 8 concurrent sequences of ~60 tokens need.
  WithEngine(/*kv_blocks=*/8, /*max_num_seqs=*/8, /*max_queue=*/100, [](ServingEngine& engine, auto& offline) {
    std::vector<std::vector<int32_t>> expect;
    for (int i = 0; i < 8; ++i) expect.push_back(offline(Prompt(100 + i, 30), 24));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 8; ++i) {
      auto s = engine.Submit(Greedy("p" + std::to_string(i), Prompt(100 + i, 30), 24));
      ASSERT_TRUE(s.ok()) << s.status();
      streams.push_back(*s);
    }
    for (int i = 0; i < 8; ++i) {
      Collected c = Drain(*streams[i]);
      EXPECT_EQ(c.finish, FinishReason::kLength) << c.error;
      EXPECT_EQ(c.ids, expect[i]) << "request " << i;
    }
    EXPECT_GT(engine.Stats().preemptions, 0);
  });
}

TEST(ServingEngine, CancelFreesBlocksAndBadRequestsAreClearErrors) {
  WithEngine(/*kv_blocks=*/64, /*max_num_seqs=*/4, /*max_queue=*/3, [](ServingEngine& engine, auto&) {
    auto s = engine.Submit(Greedy("long", Prompt(7, 20), 200));
    ASSERT_TRUE(s.ok());
    OutputEvent e;
    ASSERT_TRUE((*s)->Next(&e, absl::Seconds(30)));  // first token arrived
    (*s)->Cancel();
    Collected c = Drain(**s);
    EXPECT_EQ(c.finish, FinishReason::kCancelled);
    // Freed by the engine's next step: a bounded wait (30 s, a hang guard), not a speed limit.
    for (int i = 0; i < 1500 && engine.Stats().kv_usage > 0; ++i) absl::SleepFor(absl::Milliseconds(20));
    EXPECT_EQ(engine.Stats().kv_usage, 0.0);
    EXPECT_EQ(engine.Stats().running, 0);
    // Applied at the step boundary after it arrived: at most one step completed meanwhile.
    EXPECT_EQ(engine.Stats().aborts, 1);
    EXPECT_LE(engine.Stats().abort_delay_steps_max, 1);
    EXPECT_EQ(engine.Stats().abort_delay_steps, engine.Stats().abort_delay_steps_max);

    auto too_long = engine.Submit(Greedy("x", Prompt(1, 100), 200));
    ASSERT_FALSE(too_long.ok());
    EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(too_long.status().message()).find("max-model-len"), std::string::npos);
    ServeRequest bad = Greedy("t", Prompt(1, 4), 4);
    bad.params.temperature = -1;
    auto neg = engine.Submit(bad);
    ASSERT_FALSE(neg.ok());
    EXPECT_NE(std::string(neg.status().message()).find("temperature"), std::string::npos);
    EXPECT_FALSE(engine.Submit(Greedy("e", {}, 4)).ok());
    ServeRequest zero = Greedy("z", Prompt(1, 4), 0);
    EXPECT_FALSE(engine.Submit(zero).ok());
  });
}

TEST(ServingEngine, SeededSamplingIsReproducibleAndStopStringsEndOutput) {
  WithEngine(/*kv_blocks=*/64, /*max_num_seqs=*/8, /*max_queue=*/100, [](ServingEngine& engine, auto&) {
    auto sampled = [&](const std::string& id) {
      ServeRequest r = Greedy(id, Prompt(3, 12), 12);
      r.params.temperature = 0.8f;
      r.params.top_p = 0.9f;
      r.params.seed = 1234;
      auto s = engine.Submit(r);
      EXPECT_TRUE(s.ok());
      return Drain(**s);
    };
    Collected a = sampled("s1"), b = sampled("s2");
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(a.finish, FinishReason::kLength);
    // Stop at the text of the greedy output's 3rd token (when it decodes to visible text).
    Collected g = [&] {
      auto s = engine.Submit(Greedy("g", Prompt(4, 10), 10));
      return Drain(**s);
    }();
    ASSERT_GE(g.text.size(), 4u) << "the fixture's greedy text is too short for this test";
    // A stop token id ends the output with its token id but without its text: the text is
    // what the tokens before it make, held-back text included. The stop id: the first
    // greedy token not seen before it, on the first prompt that has one. (This random model's
    // tokens are mostly partial UTF-8 that decodes to nothing, so the text comparison is
    // weak here; tests/output_processor_test.cc checks the rule with real text.)
    bool checked = false;
    for (int prompt = 4; prompt < 12 && !checked; ++prompt) {
      Collected greedy = Drain(**engine.Submit(Greedy("greedy", Prompt(prompt, 10), 10)));
      size_t k = 1;
      while (k < greedy.ids.size() &&
             std::find(greedy.ids.begin(), greedy.ids.begin() + k, greedy.ids[k]) != greedy.ids.begin() + k) {
        ++k;
      }
      if (k == greedy.ids.size()) continue;
      const Collected before = Drain(**engine.Submit(Greedy("before", Prompt(prompt, 10), static_cast<int>(k))));
      ServeRequest stop_id = Greedy("stop_id", Prompt(prompt, 10), 10);
      stop_id.params.stop_token_ids = {greedy.ids[k]};
      Collected c = Drain(**engine.Submit(stop_id));
      EXPECT_EQ(c.finish, FinishReason::kStop);
      EXPECT_EQ(c.ids, std::vector<int32_t>(greedy.ids.begin(), greedy.ids.begin() + k + 1));
      EXPECT_EQ(c.text, before.text);
      checked = true;
    }
    EXPECT_TRUE(checked) << "no prompt gave a greedy output with two distinct tokens";
    const int64_t generated_before = engine.Stats().generation_tokens;
    ServeRequest r = Greedy("stop", Prompt(4, 10), 200);
    r.params.stop = {g.text.substr(2, 2)};
    auto s = engine.Submit(r);
    ASSERT_TRUE(s.ok());
    Collected c = Drain(**s);
    EXPECT_EQ(c.finish, FinishReason::kStop);
    EXPECT_EQ(c.text, g.text.substr(0, 2));
    // The output processor's abort stopped the sequence within a few steps of the match,
    // not at max_tokens (200).
    for (int i = 0; i < 500 && engine.Stats().running > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
    EXPECT_EQ(engine.Stats().running, 0);
    EXPECT_LE(engine.Stats().generation_tokens - generated_before, static_cast<int64_t>(c.ids.size()) + 8);
  });
}

// Sampling is the workers' (the one rule, kernels/row_sampling.h): greedy requests give
// offline generation's tokens, seeded ones repeat whether or not a request that wants
// logprobs shares their steps (the host computes logprobs of the workers' choice), and
// that request gets its logprobs.
TEST(ServingEngine, WorkerSideSamplingMatchesOfflineAndKeepsLogprobs) {
  WithEngine(
      /*kv_blocks=*/256, /*max_num_seqs=*/16, /*max_queue=*/100,
      [](ServingEngine& engine, auto& offline) {
        constexpr int kN = 6;
        std::vector<std::vector<int32_t>> expect;
        for (int i = 0; i < kN; ++i) expect.push_back(offline(Prompt(i, 7 + 5 * i), 5 + i));
        std::vector<std::shared_ptr<RequestStream>> streams;
        for (int i = 0; i < kN; ++i) {
          auto s = engine.Submit(Greedy("w" + std::to_string(i), Prompt(i, 7 + 5 * i), 5 + i));
          ASSERT_TRUE(s.ok()) << s.status();
          streams.push_back(*s);
        }
        ServeRequest lp = Greedy("lp", Prompt(9, 11), 6);
        lp.params.logprobs = 2;
        auto lp_stream = engine.Submit(lp);
        ASSERT_TRUE(lp_stream.ok());
        auto seeded = [&](const std::string& id) {
          ServeRequest r = Greedy(id, Prompt(3, 12), 10);
          r.params.temperature = 0.9f;
          r.params.top_k = 40;
          r.params.repetition_penalty = 1.2f;
          r.params.seed = 77;
          auto s = engine.Submit(r);
          EXPECT_TRUE(s.ok());
          return *s;
        };
        auto s1 = seeded("s1"), s2 = seeded("s2");
        for (int i = 0; i < kN; ++i) {
          Collected c = Drain(*streams[i]);
          EXPECT_EQ(c.finish, FinishReason::kLength) << c.error;
          EXPECT_EQ(c.ids, expect[i]) << "request " << i;
        }
        int logprob_tokens = 0;
        OutputEvent e;
        while ((*lp_stream)->Next(&e, absl::Seconds(60))) {
          for (const TokenLogprob& t : e.logprobs) {
            ++logprob_tokens;
            EXPECT_LE(t.logprob, 0.0f);
            ASSERT_EQ(t.top.size(), 2u);
            // Greedy: the chosen token is the most likely one.
            EXPECT_EQ(t.top[0].first, t.token_id);
            EXPECT_EQ(t.top[0].second, t.logprob);
          }
          if (e.finish != FinishReason::kNone) break;
        }
        EXPECT_EQ(logprob_tokens, 6);
        Collected a = Drain(*s1), b = Drain(*s2);
        EXPECT_EQ(a.finish, FinishReason::kLength) << a.error;
        EXPECT_EQ(a.ids.size(), 10u);
        EXPECT_EQ(a.ids, b.ids);
        // The same seed again, alone: no logprobs request in any of its steps.
        Collected c = Drain(*seeded("s3"));
        EXPECT_EQ(c.ids, a.ids) << "a seeded request's tokens depend on its batch";
      });
}

TEST(ServingEngine, StepStatsReportKvOccupancyAndTimes) {
  std::vector<EngineStepStats> steps;  // written on the engine thread, read after it ended
  auto config = LoadModelConfig(testing::FixtureDir("gemma4_text"));
  ASSERT_TRUE(config.ok());
  const std::vector<int32_t> windows = config->kv_group_windows;  // one full, one sliding
  WithEngine(
      /*kv_blocks=*/64, /*max_num_seqs=*/4, /*max_queue=*/100,
      [&](ServingEngine& engine, auto&) {
        auto s = engine.Submit(Greedy("a", Prompt(1, 20), 5));
        ASSERT_TRUE(s.ok());
        EXPECT_EQ(Drain(**s).finish, FinishReason::kLength);
      },
      [&](const EngineStepStats& st) { steps.push_back(st); });
  // One prefill step (20 tokens, within the 64-token budget), then 4 decodes; the 5th
  // token finishes the request and frees its blocks.
  ASSERT_EQ(steps.size(), 5u);
  ASSERT_EQ(windows.size(), 2u);
  for (int k = 0; k < 5; ++k) {
    const EngineStepStats& st = steps[k];
    EXPECT_EQ(st.num_seqs, 1);
    EXPECT_EQ(st.num_tokens, k == 0 ? 20 : 1);
    EXPECT_GT(st.forward_ms, 0);
    EXPECT_GT(st.coordinator_ms, 0);
    EXPECT_GE(st.allreduce_ms, 0);
    EXPECT_LE(st.allreduce_ms, st.forward_ms);
    const int64_t computed = 20 + k;  // tokens with KV after the step
    for (int g = 0; g < 2; ++g) {
      const int32_t w = windows[g];
      if (k == 4) {
        EXPECT_EQ(st.scheduler.num_running, 0);
        EXPECT_EQ(st.scheduler.kv_blocks_used[g], 0);
        EXPECT_EQ(st.kv_live_tokens[g], 0);
        continue;
      }
      EXPECT_EQ(st.scheduler.num_running, 1);
      // Blocks of 16 tokens: [first block under the next query's window, last written].
      const int64_t first = w == 0 ? 0 : std::max<int64_t>(0, computed - w + 1) / 16;
      EXPECT_EQ(st.scheduler.kv_blocks_used[g], (computed + 15) / 16 - first) << "step " << k << " group " << g;
      EXPECT_EQ(st.kv_live_tokens[g], w == 0 ? computed : std::min<int64_t>(computed, w - 1));
    }
  }
}

// A rank died: the engine thread is stuck (here: held in on_step, as it would be in a
// collective), so FailAll ends every stream from another thread, running or still queued.
TEST(ServingEngine, FailAllEndsEveryOpenStreamWhileTheEngineThreadIsStuck) {
  std::mutex mu;
  std::condition_variable cv;
  bool hold = false, stuck = false, release = false;
  auto on_step = [&](const EngineStepStats&) {
    std::unique_lock<std::mutex> lock(mu);
    if (!hold) return;
    stuck = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  };
  WithEngine(/*kv_blocks=*/256, /*max_num_seqs=*/16, /*max_queue=*/100, [&](ServingEngine& engine, auto&) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 3; ++i) {
      auto s = engine.Submit(Greedy("run" + std::to_string(i), Prompt(i, 8), 150));
      ASSERT_TRUE(s.ok()) << s.status();
      streams.push_back(*s);
    }
    OutputEvent first;
    for (auto& s : streams) ASSERT_TRUE(s->Next(&first, absl::Seconds(60)));  // all running
    {
      std::unique_lock<std::mutex> lock(mu);
      hold = true;
      cv.wait(lock, [&] { return stuck; });
    }
    auto queued = engine.Submit(Greedy("queued", Prompt(9, 8), 4));  // the engine never sees it
    ASSERT_TRUE(queued.ok()) << queued.status();
    streams.push_back(*queued);
    EXPECT_TRUE(engine.Ready());

    const std::string why = "rank 1 of 2 (host h) is gone: the job is stopping; retry on another server";
    engine.FailAll(absl::UnavailableError(why));
    EXPECT_FALSE(engine.Ready());
    for (auto& s : streams) {
      ASSERT_TRUE(s->finished()) << s->request_id();  // ended on this thread, before any step
      Collected c = Drain(*s);
      EXPECT_EQ(c.finish, FinishReason::kError) << s->request_id();
      EXPECT_EQ(c.last.error_code, absl::StatusCode::kUnavailable);
      EXPECT_EQ(c.error, why);
    }
    auto refused = engine.Submit(Greedy("late", Prompt(1, 8), 4));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(refused.status().message(), why);
    engine.FailAll(absl::InternalError("a second failure"));  // no effect
    EXPECT_EQ(engine.Submit(Greedy("later", Prompt(1, 8), 4)).status().message(), why);
    {
      std::lock_guard<std::mutex> lock(mu);
      release = true;
    }
    cv.notify_all();  // the engine's later events go nowhere; it still drains and stops
  }, on_step);
}

}  // namespace
}  // namespace tpserve
