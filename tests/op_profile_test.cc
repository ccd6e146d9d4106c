// bench/op_profile.h: a step through the profiling decorator (put in place by StartEngine's
// wrap_backend hook) computes what it computes without it, and its rows count every op of
// the step once: the fused ops once per layer (residual joints twice), the embedding once.
#include "bench/op_profile.h"

#include <string>

#include "gtest/gtest.h"
#include "launch/engine_setup.h"
#include "tests/tp_harness.h"

namespace tpserve {
namespace {

int64_t Calls(const std::vector<OpProfileRow>& rows, const std::string& prefix) {
  int64_t n = 0;
  for (const OpProfileRow& r : rows) {
    if (r.op.rfind(prefix, 0) == 0) n += r.calls;
  }
  return n;
}

TEST(OpProfileTest, CountsEveryOpOfAStepAndChangesNothing) {
  testing::RunThreads(1, [](Communicator& comm) {
    OpProfileBackend* profiler = nullptr;
    EngineOptions eo;
    eo.model = "gemma-4-tiny";
    eo.load_format = "dummy";
    eo.device = "cpu";
    eo.threads = 1;
    eo.kv_cache_bytes = int64_t{16} << 20;
    eo.dummy_seed = 3;
    eo.wrap_backend = [&](std::unique_ptr<Backend> b) -> std::unique_ptr<Backend> {
      auto p = std::make_unique<OpProfileBackend>(std::move(b));
      profiler = p.get();
      return p;
    };
    auto engine = StartEngine(eo, WorldConfig{0, 1, 1, 0, 1, "local"}, comm);
    ASSERT_TRUE(engine.ok()) << engine.status();
    ASSERT_NE(profiler, nullptr);
    EXPECT_NE(engine->backend->name().find("op-profile"), std::string::npos);
    const int64_t L = engine->config.num_layers;

    StepPlan plan;  // one sequence of 5 prompt tokens in block 0 of each KV group
    plan.num_seqs = 1;
    for (int32_t t = 0; t < 5; ++t) {
      plan.token_ids.push_back(10 + 7 * t);
      plan.positions.push_back(t);
      plan.token_seq.push_back(0);
    }
    plan.kv.assign(engine->config.kv_group_windows.size(), KvGroupPlan{{0, 1, 2, 3, 4}, 1, {0}});
    plan.logit_rows = {4};
    auto plain = engine->model->Forward(plan, nullptr);
    ASSERT_TRUE(plain.ok()) << plain.status();

    profiler->Start();
    auto timed = engine->model->Forward(plan, nullptr);  // the same slots, rewritten alike
    profiler->Stop();
    ASSERT_TRUE(timed.ok()) << timed.status();
    EXPECT_EQ(timed->logits, plain->logits);
    const std::vector<OpProfileRow> rows = profiler->Rows();
    EXPECT_EQ(Calls(rows, "embedding"), 1);
    EXPECT_EQ(Calls(rows, "linear_split m=5"), L);  // q|k|v
    EXPECT_EQ(Calls(rows, "attention_prologue"), L);
    EXPECT_EQ(Calls(rows, "attention d="), L);
    EXPECT_EQ(Calls(rows, "residual_norm"), 2 * L);
    EXPECT_EQ(Calls(rows, "linear m=5"), 3 * L);  // o, gate|up, down
    EXPECT_EQ(Calls(rows, "linear m=1"), 1);      // the LM head over the one logit row
    EXPECT_EQ(Calls(rows, "gated_activation"), L);
    EXPECT_GE(Calls(rows, "copy_from_host"), 4);  // the plan's upload
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_GT(rows[i].calls, 0) << rows[i].op;
      EXPECT_GT(rows[i].total_us, 0.0) << rows[i].op << " was not timed";
      if (i > 0) {
        EXPECT_GE(rows[i - 1].total_us, rows[i].total_us) << "rows are by total time";
      }
    }

    ASSERT_TRUE(engine->model->Forward(plan, nullptr).ok());  // not recording
    EXPECT_EQ(Calls(profiler->Rows(), ""), Calls(rows, ""));
  });
}

// A decorator asks the backend it wraps which weights it reads quantized, so that a wrapped
// backend loads a GGUF file's blocks as they are rather than widening them (engine_bench
// --op_profile on a Q4_K_M file once timed a bf16 model).
TEST(OpProfileTest, KeepsTheInnerBackendsQuantizedWeights) {
  std::unique_ptr<Backend> inner = MakeCpuBackend(BackendOptions{.threads = 1});
  const bool q4_k = inner->SupportsQuantizedWeights(DType::kQ4_K);
  const bool q8_0 = inner->SupportsQuantizedWeights(DType::kQ8_0);
  ASSERT_TRUE(q4_k && q8_0) << "the CPU backend reads Q4_K and Q8_0 blocks";
  OpProfileBackend wrapped(std::move(inner));
  EXPECT_EQ(wrapped.SupportsQuantizedWeights(DType::kQ4_K), q4_k);
  EXPECT_EQ(wrapped.SupportsQuantizedWeights(DType::kQ8_0), q8_0);
  EXPECT_FALSE(wrapped.SupportsQuantizedWeights(DType::kBF16));
}

}  // namespace
}  // namespace tpserve
