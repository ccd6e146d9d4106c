// Greedy offline generation through the engine core, as `tpserve generate` runs it, and a
// fixture model on thread ranks, for the tests that run the engine on real checkpoints
// (tests/model_test.cc, tests/engine_core_test.cc, tests/serving_engine_test.cc and friends).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "coordinator/engine/offline.h"
#include "coordinator/engine/speculative.h"
#include "gtest/gtest.h"
#include "tests/tp_harness.h"
#include "worker/backend.h"
#include "worker/gguf_file.h"
#include "worker/gguf_model.h"
#include "worker/mtp_drafter.h"
#include "worker/weight_source.h"

namespace tpserve::testing {

struct OfflineOptions {
  int32_t max_num_batched_tokens = 2048;  // the prefill chunk
  int32_t max_num_seqs = 256;
  bool scramble_blocks = false;  // KV blocks in a scrambled order: attention must follow the tables
  bool enable_prefix_caching = true;
  // Fewer KV blocks per group than the model has (0: all): forces preemption.
  int64_t kv_blocks = 0;
  // Speculative decoding: drafts of up to this many tokens from `proposer` (made per run).
  int32_t num_speculative_tokens = 0;
  std::function<std::unique_ptr<DraftProposer>()> proposer;
  // SchedulerConfig::sliding_lookback: kMtpDrafterLookback for the MTP drafter's proposer.
  int32_t sliding_lookback = 0;
};

// A fixture checkpoint directory (tests/fixtures/models/NAME), or a GGUF fixture file
// (tests/fixtures/gguf/models/NAME.gguf) where `fixture` names one: its config and weights.
inline absl::StatusOr<ModelConfig> FixtureModelConfig(const std::string& fixture) {
  if (!absl::EndsWith(fixture, ".gguf")) return LoadModelConfig(FixtureDir(fixture));
  TP_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(GgufFixturePath(fixture)));
  return GgufModelConfig(*file);
}
inline absl::StatusOr<std::unique_ptr<WeightSource>> FixtureWeights(const std::string& fixture) {
  if (!absl::EndsWith(fixture, ".gguf")) return OpenCheckpointSource(FixtureDir(fixture));
  TP_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(GgufFixturePath(fixture)));
  return OpenGgufSource(std::move(file));
}

// Loads `fixture` (FixtureModelConfig's) on `tp` thread-ranks and runs `body(model, exec)` on rank 0. `drafter`:
// an MTP drafter fixture (e.g. "gemma4_mtp/assistant") loaded beside the model on every
// rank; the executor and the worker loops then run draft passes. `backend_options`: every
// rank's CPU backend.
inline void WithFixtureModel(const std::string& fixture, int tp, int64_t kv_blocks,
                             const std::function<void(Model&, StepExecutor&)>& body, int32_t block_size = 16,
                             const std::string& drafter = "",
                             const BackendOptions& backend_options = BackendOptions{.threads = 1}) {
  RunThreads(tp, [&](Communicator& comm) {
    auto config = FixtureModelConfig(fixture);
    ASSERT_TRUE(config.ok()) << config.status();
    auto source = FixtureWeights(fixture);
    ASSERT_TRUE(source.ok()) << source.status();
    auto backend = MakeCpuBackend(backend_options);
    ModelOptions mo;
    mo.block_size = block_size;
    auto model = Model::Load(*config, **source, *backend, comm, mo);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE((*model)->AllocateKvCache(kv_blocks).ok());
    std::unique_ptr<MtpDrafter> mtp;
    if (!drafter.empty()) {
      auto loaded = MtpDrafter::LoadDir(FixtureDir(drafter), **model, *backend, comm);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      mtp = std::move(*loaded);
    }
    if (comm.rank() != 0) {
      ASSERT_TRUE(RunWorkerLoop(**model, comm, mtp.get()).ok());
      return;
    }
    StepExecutor exec(**model, comm, mtp.get());
    body(**model, exec);
    exec.Shutdown();
  });
}

// For speculative decoding tests: knows the answer (`truth`, the tokens after `prompt`)
// and proposes it, wrong at one position in three proposals, so that steps keep some
// drafts and reject others.
class OracleProposer : public SequenceProposer {
 public:
  OracleProposer(std::vector<int32_t> prompt, std::vector<int32_t> truth)
      : prompt_(std::move(prompt)), truth_(std::move(truth)) {}
  std::vector<int32_t> Propose(absl::Span<const int32_t> tokens, int32_t max_tokens) override {
    const size_t done = tokens.size() - prompt_.size();
    std::vector<int32_t> draft;
    for (size_t i = done; i < truth_.size() && draft.size() < static_cast<size_t>(max_tokens); ++i) {
      draft.push_back(truth_[i]);
    }
    if (!draft.empty() && ++calls_ % 3 == 0) {
      const size_t at = calls_ % draft.size();
      draft[at] = (draft[at] + 1) % 100;
    }
    return draft;
  }

 private:
  std::vector<int32_t> prompt_, truth_;
  int64_t calls_ = 0;
};

// Greedy tokens with every step's logits, EOS ignored, `max_tokens` per prompt.
inline absl::StatusOr<OfflineResult> GreedyGenerate(Model& model, StepExecutor& exec,
                                                    const std::vector<std::vector<int32_t>>& prompts,
                                                    int32_t max_tokens, const OfflineOptions& o = {}) {
  SchedulerConfig sc = SchedulerConfigFor(model, o.max_num_seqs, o.max_num_batched_tokens);
  sc.scramble_blocks = o.scramble_blocks;
  sc.enable_prefix_caching = o.enable_prefix_caching;
  if (o.kv_blocks > 0) {
    for (int64_t& n : sc.num_kv_blocks) n = std::min(n, o.kv_blocks);
  }
  sc.num_speculative_tokens = o.num_speculative_tokens;
  sc.sliding_lookback = o.sliding_lookback;
  TP_RETURN_IF_ERROR(sc.Validate());
  EngineCore core(exec, sc, std::nullopt, o.proposer ? o.proposer() : nullptr);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.return_logits = true;
  return GenerateOffline(core, prompts, p);
}

}  // namespace tpserve::testing
