// One sequence stepped through Model::Forward by hand, on any backend: the prompt in one
// step with logits at every position, then one decode step per teacher-forced token.
// Shared by tests/cuda_model_test.cc (the GPU against the bf16 CPU reference) and
// tests/rounding_envelope_test.cc (the reference against itself, jittered).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/bf16_reference_backend.h"
#include "tests/tp_harness.h"
#include "worker/weight_source.h"

namespace tpserve::testing {

constexpr int32_t kStepsBlock = 16;

// The GPU model test's tolerance, |got - want| <= atol + rtol * |want| (tests/cuda_model_test.cc);
// tests/rounding_envelope_test.cc checks that rounding flips alone stay inside it.
constexpr double kModelAtol = 0.25;
constexpr double kModelRtol = 0.03;

// One sequence, or `copies` identical ones in interleaved blocks (prefill only).
struct Steps {
  std::vector<int32_t> prompt;
  std::vector<int32_t> forced;  // decode inputs
  int copies = 1;
  // > 0: Model::TuneKernels(tune_max_tokens, copies) after loading (the backend's measured
  // kernel choice, used where its KernelOptions say tuned).
  int64_t tune_max_tokens = 0;
};

inline StepPlan PrefillPlan(const Steps& s, size_t groups, int32_t max_blocks) {
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
      kv.slot_mapping.push_back(kv.block_tables[c * max_blocks + p / kStepsBlock] * kStepsBlock + p % kStepsBlock);
      if (s.copies == 1 || p == n - 1) plan.logit_rows.push_back(c * n + p);
    }
  }
  plan.kv.assign(groups, kv);
  return plan;
}

inline StepPlan DecodePlan(int32_t token, int32_t pos, size_t groups, int32_t max_blocks) {
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

// Runs the steps on every rank of `comm` with `backend` and bf16 weights; rank 0 returns
// the logits rows, [rows][vocab].
inline std::vector<std::vector<float>> RunSteps(const std::string& fixture, Backend& backend, Communicator& comm,
                                                const Steps& s) {
  std::vector<std::vector<float>> rows;
  auto config = LoadModelConfig(FixtureDir(fixture));
  EXPECT_TRUE(config.ok()) << config.status();
  auto source = OpenCheckpointSource(FixtureDir(fixture));
  EXPECT_TRUE(source.ok()) << source.status();
  if (!config.ok() || !source.ok()) return rows;
  ModelOptions mo;
  mo.weight_dtype = DType::kBF16;
  mo.block_size = kStepsBlock;
  auto model = Model::Load(*config, **source, backend, comm, mo);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return rows;
  if (s.tune_max_tokens > 0) {
    auto report = (*model)->TuneKernels(s.tune_max_tokens, s.copies);
    EXPECT_TRUE(report.ok()) << report.status();
  }
  const int32_t total = static_cast<int32_t>(s.prompt.size() + s.forced.size());
  const int32_t max_blocks = (total + kStepsBlock - 1) / kStepsBlock;
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

// The steps on the bf16 CPU reference, one rank; a nonzero seed jitters its Linear outputs.
inline std::vector<std::vector<float>> RunOnCpu(const std::string& fixture, const Steps& s,
                                                uint64_t jitter_seed = 0) {
  std::vector<std::vector<float>> rows;
  RunThreads(1, [&](Communicator& comm) {
    Bf16ReferenceBackend backend(jitter_seed);
    rows = RunSteps(fixture, backend, comm, s);
  });
  return rows;
}

inline int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// The fixture's prompt, teacher-forced with the bf16 reference's own greedy tokens:
// `decode_steps` decode steps after the prompt.
inline Steps GreedySteps(const std::string& fixture, int decode_steps) {
  Steps s;
  s.prompt = LoadReference(fixture).prompt_ids;
  for (int i = 0; i < decode_steps; ++i) {
    const auto rows = RunOnCpu(fixture, s);
    if (rows.empty()) break;
    s.forced.push_back(Argmax(rows.back()));
  }
  return s;
}

inline float MaxAbsDiff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  float worst = 0;
  for (size_t r = 0; r < a.size() && r < b.size(); ++r) {
    for (size_t i = 0; i < a[r].size() && i < b[r].size(); ++i) worst = std::max(worst, std::abs(a[r][i] - b[r][i]));
  }
  return worst;
}

}  // namespace tpserve::testing
