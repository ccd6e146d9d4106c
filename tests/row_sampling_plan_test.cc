// RowSamplingPlanner: request settings -> worker-side sampling rows and penalty entries,
// the one rule every backend samples by (counts, prompt tokens under the repetition
// penalty only, EOS and stop ids masked while short of min_tokens).
#include "coordinator/engine/row_sampling_plan.h"

#include <map>

#include "coordinator/structured/grammar_compiler.h"
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

// Rank 0's edits: logit_bias entries and grammar masks per row, none for the rows before
// the first edit (the first row may be the first masked one), -1 / empty ranges after.
TEST(RowSamplingPlanner, EditsCarryBiasesAndGrammarMasks) {
  // Ids 0..5: "{", "}", " ", "\"", "a", and EOS.
  VocabularyBytes bytes;
  bytes.bytes = {"{", "}", " ", "\"", "a", ""};
  bytes.kinds = {TokenKind::kText, TokenKind::kText, TokenKind::kText, TokenKind::kText, TokenKind::kText,
                 TokenKind::kEos};
  GrammarCompiler compiler(TokenVocabulary::Create(bytes));
  auto grammar = compiler.CompileJsonObject();
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  const int64_t V = 70;  // the model's vocabulary is larger: a mask word and a half
  RowSamplingPlanner planner(V, {5});
  SamplingParams json;
  json.grammar = *grammar;
  SamplingParams biased;
  biased.logit_bias = {{3, 2.0f}, {69, -1.0f}};
  TokenMatcher start(*grammar);
  TokenMatcher open = start;
  ASSERT_TRUE(open.AcceptToken(0));  // "{": next is a key's quote, "}" or whitespace
  StepDelta plan;
  planner.AddRow(json, 1, {}, {}, plan, {}, &start);
  planner.AddRow(SamplingParams{}, 2, {}, {}, plan);
  planner.AddRow(biased, 3, {}, {}, plan);
  planner.AddRow(json, 4, {}, {0}, plan, {}, &open);
  const LogitEdits& e = plan.edits;
  EXPECT_EQ(e.mask_index, (std::vector<int32_t>{0, -1, -1, 1}));
  ASSERT_EQ(e.masks.size(), 2u * LogitEdits::mask_words(V));
  auto allowed = [&](int m) {
    std::vector<int32_t> ids;
    for (int32_t t = 0; t < V; ++t) {
      if ((e.masks[m * LogitEdits::mask_words(V) + t / 64] >> (t % 64)) & 1) ids.push_back(t);
    }
    return ids;
  };
  EXPECT_EQ(allowed(0), (std::vector<int32_t>{0, 2}));     // "{" or leading whitespace
  EXPECT_EQ(allowed(1), (std::vector<int32_t>{1, 2, 3}));  // "}", whitespace, a key
  EXPECT_EQ(e.bias_offsets, (std::vector<int32_t>{0, 0, 0, 2, 2}));
  EXPECT_EQ(e.bias_tokens, (std::vector<int32_t>{3, 69}));
  EXPECT_EQ(e.bias_values, (std::vector<float>{2.0f, -1.0f}));
  // A plan without edits keeps them empty.
  StepDelta none;
  planner.AddRow(SamplingParams{}, 1, {}, {}, none);
  EXPECT_TRUE(none.edits.empty());
}

}  // namespace
}  // namespace tpserve
