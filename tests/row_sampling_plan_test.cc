// RowSamplingPlanner: request settings -> worker-side sampling rows and penalty entries,
// the one rule every backend samples by (counts, prompt tokens under the repetition
// penalty only, EOS and stop ids masked while short of min_tokens).
#include "coordinator/engine/row_sampling_plan.h"

#include <map>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

std::map<int32_t, int32_t> Entries(const StepDelta& p, size_t row) {
  std::map<int32_t, int32_t> m;
  for (int32_t e = p.penalty_offsets[row]; e < p.penalty_offsets[row + 1]; ++e) {
    EXPECT_TRUE(m.emplace(p.penalty_tokens[e], p.penalty_counts[e]).second) << "token listed twice";
  }
  return m;
}

TEST(RowSamplingPlanner, RowsCarryFiltersSeedsPenaltiesAndMasks) {
  RowSamplingPlanner planner(100, /*eos_token_ids=*/{1});
  StepDelta plan;
  SamplingParams plain;  // no penalties, no min_tokens: no entries
  plain.temperature = 0.7f;
  plain.top_k = -1;
  plain.top_p = 0.9f;
  planner.AddRow(plain, 5, {10, 11}, {20, 20}, plan);

  SamplingParams pen;
  pen.repetition_penalty = 1.2f;
  pen.frequency_penalty = 0.5f;
  pen.min_tokens = 4;
  pen.stop_token_ids = {7};
  planner.AddRow(pen, 6, {10, 11, 20}, {20, 20, 30}, plan);

  SamplingParams done = pen;  // min_tokens reached; ignore_eos: nothing masked
  done.min_tokens = 2;
  done.ignore_eos = true;
  done.repetition_penalty = 1.0f;
  planner.AddRow(done, 7, {10}, {20, 20, 30}, plan);

  ASSERT_EQ(plan.sampling.size(), 3u);
  EXPECT_EQ(plan.penalty_offsets.size(), 4u);
  EXPECT_EQ(plan.sampling[0].top_k, 0);  // -1 (off) becomes the rule's 0
  EXPECT_EQ(plan.sampling[0].top_p, 0.9f);
  EXPECT_EQ(plan.sampling[0].step, 2u);
  EXPECT_NE(plan.sampling[0].seed, plan.sampling[1].seed);
  EXPECT_TRUE(Entries(plan, 0).empty());
  // Output 20 twice and 30 once; prompt 10, 11 at count 0 (20 is also output); EOS 1 and
  // stop id 7 masked (3 outputs < min_tokens 4).
  EXPECT_EQ(Entries(plan, 1),
            (std::map<int32_t, int32_t>{{20, 2}, {30, 1}, {10, 0}, {11, 0}, {7, kMaskedCount}, {1, kMaskedCount}}));
  // No repetition penalty: the prompt is not listed; min_tokens met: nothing masked.
  EXPECT_EQ(Entries(plan, 2), (std::map<int32_t, int32_t>{{20, 2}, {30, 1}}));
  // The same request at the same output length draws with the same seed and step.
  StepDelta again;
  planner.AddRow(pen, 6, {10, 11, 20}, {20, 20, 30}, again);
  EXPECT_EQ(again.sampling[0].seed, plan.sampling[1].seed);
  EXPECT_EQ(again.sampling[0].step, plan.sampling[1].step);
  // Speculative decoding's row after draft 30: as if 30 were already an output token.
  StepDelta drafted;
  planner.AddRow(pen, 6, {10, 11, 20}, {20, 20}, drafted, /*drafts=*/{30});
  EXPECT_EQ(drafted.sampling[0].step, plan.sampling[1].step);
  EXPECT_EQ(Entries(drafted, 0), Entries(plan, 1));
}

}  // namespace
}  // namespace tpserve
