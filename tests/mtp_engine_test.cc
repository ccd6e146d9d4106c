// Gemma 4's MTP drafter inside the engine (tests/fixtures/models/gemma4_mtp, ranks as
// threads): greedy decoding with its drafts gives the target's greedy tokens (transformers'
// and the engine's without drafts) under chunked prefill, scrambled blocks, prefix sharing
// and preemption, at TP 1 and 2, for the dense and the centroid head; a lone request
// reproduces the fixture's clean trace draft by draft (3 of 4 and 2 of 2 accepted with the
// dense assistant); seeded sampling draws the same tokens with and without drafts; a bad
// assistant directory is every rank's error before serving; a built-in assistant shape with
// dummy weights beside its built-in target keeps the greedy tokens.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/engine/engine_core.h"
#include "coordinator/engine/mtp_proposer.h"
#include "coordinator/engine/offline.h"
#include "gtest/gtest.h"
#include "launch/engine_setup.h"
#include "nlohmann/json.hpp"
#include "tests/offline_harness.h"
#include "tests/tp_harness.h"

namespace tpserve {
namespace {

using json = nlohmann::json;

constexpr int32_t kK = 4;  // the fixture's num_assistant_tokens

const json& MtpReference() {
  static const json* ref = [] {
    std::ifstream in(testing::FixtureDir("gemma4_mtp/reference.json"));
    std::stringstream ss;
    ss << in.rdbuf();
    return new json(json::parse(ss.str()));
  }();
  return *ref;
}

std::vector<int32_t> PromptIds() { return MtpReference()["prompt_ids"].get<std::vector<int32_t>>(); }
std::vector<int32_t> GreedyIds() { return MtpReference()["greedy_ids"].get<std::vector<int32_t>>(); }

// One draft pass's view of one sequence: where it drafted from and what.
struct Round {
  int32_t position = 0;
  std::vector<int32_t> drafts;
};

// The MTP proposer, recording every request's drafts (rank 0 only; the engine thread).
class RecordingProposer : public DraftProposer {
 public:
  RecordingProposer(StepExecutor& exec, std::vector<Round>* rounds) : inner_(exec), rounds_(rounds) {}
  absl::Status ProposeAll(absl::Span<const DraftRequest> requests, Scheduler& scheduler) override {
    TP_RETURN_IF_ERROR(inner_.ProposeAll(requests, scheduler));
    for (const DraftRequest& r : requests) rounds_->push_back(Round{r.seq->num_tokens() - 1, r.seq->draft_ids()});
    return absl::OkStatus();
  }

 private:
  MtpProposer inner_;
  std::vector<Round>* rounds_;
};

testing::OfflineOptions MtpOptions(StepExecutor& exec, std::vector<Round>* rounds = nullptr) {
  testing::OfflineOptions o;
  o.num_speculative_tokens = kK;
  o.sliding_lookback = kMtpDrafterLookback;
  o.proposer = [&exec, rounds]() -> std::unique_ptr<DraftProposer> {
    if (rounds != nullptr) return std::make_unique<RecordingProposer>(exec, rounds);
    return std::make_unique<MtpProposer>(exec);
  };
  return o;
}

class MtpEngineTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Three copies of the prompt (shared cached prefix blocks), 5-token prefill chunks,
// scrambled blocks of 4 and a KV cache that holds one sequence and a bit: preemption and
// recompute, drafting right after each last prefill chunk and each verification. Every
// output is the target's greedy tokens, every token's logits transformers'.
TEST_P(MtpEngineTest, GreedyEqualsTheTargetUnderChunkingAndPreemption) {
  const auto& [assistant, tp] = GetParam();
  const testing::Reference ref = testing::LoadReference("gemma4_text");  // the same target, byte for byte
  ASSERT_EQ(ref.prompt_ids, PromptIds());
  ASSERT_EQ(ref.greedy_ids, GreedyIds());
  const std::string what = absl::StrCat(assistant, " tp ", tp);
  testing::WithFixtureModel(
      "gemma4_mtp/target", tp, 64,
      [&](Model& model, StepExecutor& exec) {
        ASSERT_TRUE(exec.has_drafter());
        testing::OfflineOptions o = MtpOptions(exec);
        o.max_num_batched_tokens = 5;
        o.scramble_blocks = true;
        // Full group: 31 KV tokens in blocks of 4 for one sequence; the sliding group (window
        // 8, kept 10 for the drafter) needs 4 of them.
        o.kv_blocks = (ref.prompt_ids.size() + ref.greedy_ids.size() + 3) / 4;
        auto r = testing::GreedyGenerate(model, exec, {ref.prompt_ids, ref.prompt_ids, ref.prompt_ids},
                                         static_cast<int32_t>(ref.greedy_ids.size()), o);
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_GT(r->preemptions, 0) << what << ": the cache was meant to run short";
        EXPECT_GT(r->spec.num_draft_tokens, 0) << what;
        if (assistant == "assistant") {
          EXPECT_GT(r->spec.num_accepted_tokens, 0) << what;
        }
        for (const GenerationOutput& out : r->outputs) {
          EXPECT_EQ(out.output_ids, ref.greedy_ids) << what;
          ASSERT_EQ(out.logits.size(), ref.greedy_logits.size());
          for (size_t s = 0; s < out.logits.size(); ++s) {
            EXPECT_LE(testing::ToleranceRatio(out.logits[s], ref.greedy_logits[s], 2e-3, 2e-3), 1.0)
                << what << " step " << s;
          }
        }
        double draft_ms = 0;
        for (const StepSummary& s : r->steps) draft_ms += s.draft_ms;
        std::printf("[ numbers  ] %s: %lld preemptions, %lld/%lld draft tokens accepted, drafting %.1f ms\n",
                    what.c_str(), static_cast<long long>(r->preemptions),
                    static_cast<long long>(r->spec.num_accepted_tokens),
                    static_cast<long long>(r->spec.num_draft_tokens), draft_ms);
      },
      /*block_size=*/4, "gemma4_mtp/" + assistant);
}

// A lone request, its prompt in one step: the engine's draft passes are the clean trace's
// rounds exactly (position, drafts), the verification steps accept what the trace accepts
// (dense: 3 of 4, then 2 of 2), and the metrics count them.
TEST_P(MtpEngineTest, ReproducesTheCleanTraceRoundByRound) {
  const auto& [assistant, tp] = GetParam();
  const json& trace = MtpReference()["assistants"][assistant]["traces"]["clean"];
  const std::string what = absl::StrCat(assistant, " tp ", tp);
  testing::WithFixtureModel(
      "gemma4_mtp/target", tp, 64,
      [&](Model& model, StepExecutor& exec) {
        std::vector<Round> rounds;
        auto r = testing::GreedyGenerate(model, exec, {PromptIds()}, static_cast<int32_t>(GreedyIds().size()),
                                         MtpOptions(exec, &rounds));
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(r->outputs[0].output_ids, trace["generated"].get<std::vector<int32_t>>()) << what;
        ASSERT_EQ(rounds.size(), trace["rounds"].size()) << what;
        std::vector<int32_t> accepted;  // per verification step
        for (const StepSummary& s : r->steps) {
          if (s.num_draft_tokens > 0) accepted.push_back(s.num_accepted_tokens);
        }
        ASSERT_EQ(accepted.size(), rounds.size()) << what;
        int64_t draft_tokens = 0, accepted_tokens = 0;
        std::vector<int64_t> per_pos(kK, 0);
        for (size_t i = 0; i < rounds.size(); ++i) {
          const json& want = trace["rounds"][i];
          EXPECT_EQ(rounds[i].position, want["position"].get<int32_t>()) << what << " round " << i;
          EXPECT_EQ(rounds[i].drafts, want["draft_ids"].get<std::vector<int32_t>>()) << what << " round " << i;
          EXPECT_EQ(accepted[i], want["accepted"].get<int32_t>()) << what << " round " << i;
          draft_tokens += static_cast<int64_t>(rounds[i].drafts.size());
          accepted_tokens += want["accepted"].get<int32_t>();
          for (int32_t p = 0; p < want["accepted"].get<int32_t>(); ++p) ++per_pos[p];
        }
        EXPECT_EQ(r->spec.num_drafts, static_cast<int64_t>(rounds.size())) << what;
        EXPECT_EQ(r->spec.num_draft_tokens, draft_tokens) << what;
        EXPECT_EQ(r->spec.num_accepted_tokens, accepted_tokens) << what;
        per_pos.resize(r->spec.accepted_per_pos.size(), 0);
        EXPECT_EQ(r->spec.accepted_per_pos, per_pos) << what;
        if (assistant == "assistant") {
          EXPECT_EQ(accepted, (std::vector<int32_t>{3, 2})) << what;
          EXPECT_EQ(r->spec.accepted_per_pos, (std::vector<int64_t>{2, 2, 1, 0})) << what;
        }
        std::printf("[ numbers  ] %s: %zu verification steps, %lld/%lld draft tokens accepted, mean acceptance "
                    "length %.2f\n",
                    what.c_str(), rounds.size(), static_cast<long long>(r->spec.num_accepted_tokens),
                    static_cast<long long>(r->spec.num_draft_tokens), r->spec.mean_acceptance_length());
      },
      /*block_size=*/4, "gemma4_mtp/" + assistant);
}

INSTANTIATE_TEST_SUITE_P(Assistants, MtpEngineTest,
                         ::testing::Combine(::testing::Values("assistant", "assistant_ordered"),
                                            ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_tp" + std::to_string(std::get<1>(info.param));
                         });

// Seeded sampling at temperature 1 with top-p, top-k and a repetition penalty: the same
// tokens and logprobs with and without MTP drafts (each row draws with its output position's
// uniform), several requests of different lengths drafting in one batch, at TP 1 and 2.
TEST(MtpEngineSamplingTest, SeededSamplingIsTheSameWithAndWithoutDrafts) {
  for (int tp : {1, 2}) {
    testing::WithFixtureModel(
        "gemma4_mtp/target", tp, 128,
        [&](Model& model, StepExecutor& exec) {
          std::vector<std::vector<int32_t>> prompts;
          for (int i = 0; i < 4; ++i) {
            std::vector<int32_t> p = PromptIds();
            p.resize(6 + 5 * i);
            prompts.push_back(p);
          }
          SamplingParams params;
          params.temperature = 1.0f;
          params.top_p = 0.95f;
          params.top_k = 50;
          params.repetition_penalty = 1.1f;
          params.seed = 4242;
          params.max_tokens = 12;
          params.ignore_eos = true;
          params.logprobs = 2;
          auto run = [&](bool drafts) -> absl::StatusOr<OfflineResult> {
            SchedulerConfig sc = SchedulerConfigFor(model, 8, 64);
            SpeculativeConfig spec;
            if (drafts) {
              spec.method = SpeculativeConfig::Method::kMtp;
              spec.num_speculative_tokens = 3;
              spec.model = testing::FixtureDir("gemma4_mtp/assistant");  // loaded by the harness
            }
            EngineCore core(exec, WithSpeculation(sc, spec), std::nullopt, MakeDraftProposer(spec, exec));
            return GenerateOffline(core, prompts, params);
          };
          auto plain = run(false);
          auto drafted = run(true);
          ASSERT_TRUE(plain.ok()) << plain.status();
          ASSERT_TRUE(drafted.ok()) << drafted.status();
          EXPECT_GT(drafted->spec.num_draft_tokens, 0);
          for (size_t i = 0; i < prompts.size(); ++i) {
            EXPECT_EQ(drafted->outputs[i].output_ids, plain->outputs[i].output_ids) << "tp " << tp << " request " << i;
            ASSERT_EQ(drafted->outputs[i].output_logprobs.size(), plain->outputs[i].output_logprobs.size());
            for (size_t t = 0; t < plain->outputs[i].output_logprobs.size(); ++t) {
              EXPECT_NEAR(drafted->outputs[i].output_logprobs[t], plain->outputs[i].output_logprobs[t], 1e-4)
                  << "tp " << tp << " request " << i << " token " << t;
            }
          }
          std::printf("[ numbers  ] seeded, tp %d: %lld/%lld draft tokens accepted\n", tp,
                      static_cast<long long>(drafted->spec.num_accepted_tokens),
                      static_cast<long long>(drafted->spec.num_draft_tokens));
        },
        /*block_size=*/4, "gemma4_mtp/assistant");
  }
}

// A draft pass that cannot run (here: no drafter beside the model) fails the step's requests
// with an error that says so, as a failed forward does; nothing hangs.
TEST(MtpEngineSamplingTest, AFailedDraftPassEndsTheRequestsWithAnError) {
  testing::WithFixtureModel("gemma4_mtp/target", 2, 64, [&](Model& model, StepExecutor& exec) {
    ASSERT_FALSE(exec.has_drafter());
    SchedulerConfig sc = SchedulerConfigFor(model, 4, 64);
    sc.num_speculative_tokens = 2;
    sc.sliding_lookback = kMtpDrafterLookback;
    EngineCore core(exec, sc, std::nullopt, std::make_unique<MtpProposer>(exec));
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 4;
    auto r = GenerateOffline(core, {PromptIds()}, p);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(absl::StrContains(r.status().message(), "drafting")) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "MTP drafter")) << r.status();
    EXPECT_FALSE(core.HasUnfinished());
  }, /*block_size=*/4);
}

// StartEngine with --speculative-config {"method": "mtp", ...}: the drafter loads on every
// rank beside the target; a directory that is missing, not an assistant, or one made for
// another target is every rank's error naming it, before anything is served.
// `target`: a fixture, or with load_format "dummy" a built-in model.
EngineOptions MtpEngineOptions(const std::string& target, const std::string& drafter,
                               const std::string& load_format = "auto") {
  EngineOptions o;
  o.model = load_format == "dummy" ? target : testing::FixtureDir(target);
  o.load_format = load_format;
  o.device = "cpu";
  o.threads = 1;
  o.kv_cache_bytes = 4 << 20;
  o.block_size = 4;
  auto spec = ParseSpeculativeConfig(
      json{{"method", "mtp"}, {"model", drafter}, {"num_speculative_tokens", 4}}.dump());
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (spec.ok()) o.speculative = *spec;
  return o;
}

std::vector<absl::StatusOr<Engine>> StartOnThreads(int tp, const std::string& target, const std::string& drafter,
                                                   const std::string& load_format = "auto") {
  const EngineOptions o = MtpEngineOptions(target, drafter, load_format);
  std::vector<absl::StatusOr<Engine>> out;
  for (int r = 0; r < tp; ++r) out.emplace_back(absl::UnknownError("not run"));
  testing::RunThreads(tp, [&](Communicator& comm) {
    WorldConfig w{comm.rank(), tp, tp, comm.rank(), tp, "local"};
    out[comm.rank()] = StartEngine(o, w, comm);
  });
  return out;
}

TEST(MtpEngineStartTest, LoadsTheDrafterOnEveryRank) {
  for (absl::StatusOr<Engine>& e : StartOnThreads(2, "gemma4_mtp/target", testing::FixtureDir("gemma4_mtp/assistant"))) {
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_NE(e->drafter, nullptr);
    EXPECT_EQ(e->drafter->config().backbone_hidden_size, e->config.hidden_size);
  }
}

TEST(MtpEngineStartTest, BadAssistantIsEveryRanksErrorNamingIt) {
  const std::string missing = "/nonexistent/gemma-4-assistant";
  const struct {
    std::string target, drafter, want;
  } cases[] = {
      {"gemma4_mtp/target", missing, missing},
      // A target checkpoint, not an assistant.
      {"gemma4_mtp/target", testing::FixtureDir("gemma4_text"), "gemma4_assistant"},
      // An assistant for Gemma 4 on a Llama target.
      {"llama3", testing::FixtureDir("gemma4_mtp/assistant"), "Gemma 4"},
  };
  for (const auto& c : cases) {
    for (const absl::StatusOr<Engine>& e : StartOnThreads(2, c.target, c.drafter)) {
      ASSERT_FALSE(e.ok()) << c.drafter;
      EXPECT_TRUE(absl::StrContains(e.status().message(), c.drafter)) << e.status();
      EXPECT_TRUE(absl::StrContains(e.status().message(), c.want)) << e.status();
      EXPECT_TRUE(absl::StrContains(e.status().message(), "MTP drafter")) << e.status();
    }
  }
}

// A built-in assistant shape with dummy weights (what spec_decode_bench --mode mtp-cost
// runs) beside its built-in target loads on every rank, and its drafts keep the greedy
// tokens at TP 1 and 2 (dummy weights accept few drafts: the steps verify them all the same).
TEST(MtpEngineStartTest, BuiltInAssistantDraftsKeepTheGreedyTokens) {
  std::vector<std::vector<int32_t>> prompts(2);
  for (int32_t i = 0; i < 40; ++i) {  // past the tiny target's window of 16
    prompts[0].push_back((5 + 37 * i) % 4096);
    prompts[1].push_back((11 + 53 * i) % 4096);
  }
  for (int tp : {1, 2}) {
    const EngineOptions o = MtpEngineOptions("gemma-4-tiny", "gemma-4-tiny-assistant", "dummy");
    testing::RunThreads(tp, [&](Communicator& comm) {
      WorldConfig w{comm.rank(), tp, tp, comm.rank(), tp, "local"};
      absl::StatusOr<Engine> e = StartEngine(o, w, comm);
      ASSERT_TRUE(e.ok()) << e.status();
      ASSERT_NE(e->drafter, nullptr);
      EXPECT_EQ(e->drafter->config().backbone_hidden_size, e->config.hidden_size);
      if (comm.rank() != 0) {
        EXPECT_TRUE(RunWorkerLoop(*e->model, comm, e->drafter.get()).ok());
        return;
      }
      StepExecutor exec(*e->model, comm, e->drafter.get());
      auto plain = testing::GreedyGenerate(*e->model, exec, prompts, 24);
      auto drafted = testing::GreedyGenerate(*e->model, exec, prompts, 24, MtpOptions(exec));
      exec.Shutdown();
      ASSERT_TRUE(plain.ok()) << plain.status();
      ASSERT_TRUE(drafted.ok()) << drafted.status();
      EXPECT_GT(drafted->spec.num_draft_tokens, 0) << "tp " << tp;
      ASSERT_EQ(plain->outputs.size(), drafted->outputs.size());
      for (size_t i = 0; i < plain->outputs.size(); ++i) {
        EXPECT_EQ(drafted->outputs[i].output_ids, plain->outputs[i].output_ids) << "tp " << tp << " prompt " << i;
      }
    });
  }
}

TEST(MtpEngineStartTest, BuiltInAssistantNeedsDummyWeightsAndItsTarget) {
  // A checkpoint target with a built-in shape: there are no weights to read.
  for (const absl::StatusOr<Engine>& e : StartOnThreads(2, "gemma4_mtp/target", "gemma-4-tiny-assistant")) {
    ASSERT_FALSE(e.ok());
    EXPECT_TRUE(absl::StrContains(e.status().message(), "gemma-4-tiny-assistant")) << e.status();
    EXPECT_TRUE(absl::StrContains(e.status().message(), "--load-format dummy")) << e.status();
  }
  // The 1B shape's assistant beside the tiny target.
  for (const absl::StatusOr<Engine>& e : StartOnThreads(2, "gemma-4-tiny", "gemma-4-1b-assistant", "dummy")) {
    ASSERT_FALSE(e.ok());
    EXPECT_TRUE(absl::StrContains(e.status().message(), "gemma-4-1b-assistant")) << e.status();
    EXPECT_TRUE(absl::StrContains(e.status().message(), "backbone_hidden_size")) << e.status();
  }
}

}  // namespace
}  // namespace tpserve
