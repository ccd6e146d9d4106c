// Tests for worker/persistent_batch.h and StepDelta (worker/step.h): deltas round-trip
// through bytes, expand to the plan the scheduler would have sent whole (positions, slot
// mapping, dense tables, logit rows), sliding-window freeing, slot reuse, and every
// inconsistency is an error; a DraftDelta (the MTP drafter's pass) likewise. The scheduler
// side is checked against it step by step in tests/scheduler_random_test.cc.
#include "worker/persistent_batch.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int32_t kBlock = 4;

TEST(StepDeltaTest, RoundTripsThroughBytes) {
  StepDelta d;
  d.removed_slots = {3};
  d.added_slots = {0, 1};
  d.table_edits = {0, 0, 0, 2, 7, 8, 1, 1, 1, 1, 9};
  d.slots = {0, 1};
  d.starts = {0, 4};
  d.num_tokens = {5, 1};
  d.token_ids = {1, 2, 3, 4, 5, 6};
  d.sampled_rows = {0, 1};
  d.sampling.resize(2);
  d.sampling[1].temperature = 0.5f;
  d.sampling[1].seed = 1ull << 40;
  d.penalty_offsets = {0, 1, 1};
  d.penalty_tokens = {5};
  d.penalty_counts = {kMaskedCount};
  d.return_logits = true;
  const std::vector<uint8_t> bytes = d.Serialize();
  EXPECT_EQ(StepMessageKind(bytes), static_cast<int32_t>(StepPlan::Kind::kDelta));
  auto back = StepDelta::Deserialize(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->table_edits, d.table_edits);
  EXPECT_EQ(back->token_ids, d.token_ids);
  EXPECT_EQ(back->sampling[1].seed, 1ull << 40);
  EXPECT_EQ(back->penalty_counts, d.penalty_counts);
  EXPECT_TRUE(back->return_logits);
  std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 4);
  EXPECT_FALSE(StepDelta::Deserialize(cut).ok());
  EXPECT_FALSE(StepDelta::Deserialize(StepPlan{}.Serialize()).ok());  // a whole plan is not a delta
}

TEST(DraftDeltaTest, RoundTripsThroughBytes) {
  DraftDelta d;
  d.table_edits = {1, 1, 1, 0};
  d.slots = {1, 0};
  d.hidden_rows = {4, 0};
  d.token_ids = {17, 9};
  d.positions = {30, 12};
  d.num_steps = 3;
  const std::vector<uint8_t> bytes = d.Serialize();
  EXPECT_EQ(StepMessageKind(bytes), static_cast<int32_t>(StepPlan::Kind::kDraft));
  // 16 bytes per sequence, the edits, and 7 words of kind, steps and lengths.
  EXPECT_EQ(bytes.size(), (7 + d.table_edits.size() + 4 * d.slots.size()) * 4);
  auto back = DraftDelta::Deserialize(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->table_edits, d.table_edits);
  EXPECT_EQ(back->slots, d.slots);
  EXPECT_EQ(back->hidden_rows, d.hidden_rows);
  EXPECT_EQ(back->token_ids, d.token_ids);
  EXPECT_EQ(back->positions, d.positions);
  EXPECT_EQ(back->num_steps, 3);
  std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 4);
  EXPECT_FALSE(DraftDelta::Deserialize(cut).ok());
  EXPECT_FALSE(DraftDelta::Deserialize(StepDelta{}.Serialize()).ok());
  DraftDelta uneven = d;
  uneven.positions.pop_back();
  EXPECT_FALSE(DraftDelta::Deserialize(uneven.Serialize()).ok());
  DraftDelta no_steps = d;
  no_steps.num_steps = 0;
  EXPECT_FALSE(DraftDelta::Deserialize(no_steps.Serialize()).ok());
}

// A draft pass applies its table edits (blocks the step's update freed) and gives the dense
// tables of its slots, in its order, padded with -1; the next step delta continues from there.
TEST(PersistentBatchTest, DraftPassAppliesEditsAndGivesItsSlotsTables) {
  PersistentBatch batch(/*num_kv_groups=*/2, kBlock);
  StepDelta d;
  d.added_slots = {0, 1};
  d.table_edits = {0, 0, 0, 3, 10, 11, 12, 0, 1, 0, 3, 20, 21, 22, 1, 0, 0, 1, 13, 1, 1, 0, 1, 23};
  d.slots = {0, 1};
  d.starts = {0, 0};
  d.num_tokens = {9, 2};
  d.token_ids.assign(11, 5);
  d.sampled_rows = {0, 1};
  ASSERT_TRUE(batch.Apply(d).ok());
  DraftDelta draft;
  draft.table_edits = {0, 1, 1, 0};  // slot 0's first sliding block left the window
  draft.slots = {1, 0};
  draft.hidden_rows = {1, 0};
  draft.token_ids = {6, 7};
  draft.positions = {2, 9};
  draft.num_steps = 2;
  std::vector<KvGroupPlan> kv;
  ASSERT_TRUE(batch.ApplyDraft(draft, kv).ok());
  ASSERT_EQ(kv.size(), 2u);
  EXPECT_EQ(kv[0].max_blocks_per_seq, 3);
  EXPECT_THAT(kv[0].block_tables, ElementsAre(13, -1, -1, 10, 11, 12));
  EXPECT_THAT(kv[1].block_tables, ElementsAre(23, -1, -1, -1, 21, 22));
  EXPECT_TRUE(kv[0].slot_mapping.empty());
  EXPECT_THAT(batch.Table(0, 1), ElementsAre(-1, 21, 22));
  // A slot not in the batch is an error naming it.
  draft.table_edits.clear();
  draft.slots = {1, 5};
  const absl::Status bad = batch.ApplyDraft(draft, kv);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.message()), HasSubstr("slot 5"));
}

TEST(PersistentBatchTest, ExpandsPrefillThenDecodeWithOnlyNewBlocksSent) {
  PersistentBatch batch(/*num_kv_groups=*/2, kBlock);
  // Step 1: slot 2 prefills 6 tokens: blocks 10, 11 in group 0 and 20, 21 in group 1.
  StepDelta d;
  d.added_slots = {2};
  d.table_edits = {2, 0, 0, 2, 10, 11, 2, 1, 0, 2, 20, 21};
  d.slots = {2};
  d.starts = {0};
  d.num_tokens = {6};
  d.token_ids = {5, 6, 7, 8, 9, 10};
  d.sampled_rows = {0};
  d.sampling.resize(1);
  d.penalty_offsets = {0, 0};
  auto plan = batch.Apply(d);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_seqs, 1);
  EXPECT_THAT(plan->positions, ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT(plan->kv[0].slot_mapping, ElementsAre(40, 41, 42, 43, 44, 45));
  EXPECT_THAT(plan->kv[1].block_tables, ElementsAre(20, 21));
  EXPECT_THAT(plan->logit_rows, ElementsAre(5));
  EXPECT_TRUE(plan->Validate({32, 32}, kBlock).ok());

  // Step 2: slot 2 decodes at 6 with no change; slot 0 joins with a prefix-cached block
  // and a first block group 1 no longer needs (a sliding window): freed = 1.
  StepDelta e;
  e.added_slots = {0};
  e.table_edits = {0, 0, 0, 2, 10, 12, 0, 1, 1, 2, -1, 22};
  e.slots = {2, 0};
  e.starts = {6, 4};
  e.num_tokens = {1, 2};
  e.token_ids = {11, 30, 31};
  e.sampled_rows = {1};
  e.sampling.resize(1);
  e.penalty_offsets = {0, 0};
  plan = batch.Apply(e);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->token_seq, ElementsAre(0, 1, 1));
  EXPECT_THAT(plan->positions, ElementsAre(6, 4, 5));
  EXPECT_THAT(plan->kv[0].slot_mapping, ElementsAre(46, 48, 49));
  EXPECT_THAT(plan->kv[1].slot_mapping, ElementsAre(86, 88, 89));
  EXPECT_THAT(plan->kv[1].block_tables, ElementsAre(20, 21, -1, 22));
  EXPECT_THAT(plan->logit_rows, ElementsAre(2));

  // Step 3: slot 2's first block leaves group 1's window; slot 0 is gone and its slot is
  // reused by a new sequence in the same delta.
  StepDelta f;
  f.removed_slots = {0};
  f.added_slots = {0};
  f.table_edits = {2, 1, 1, 0, 0, 0, 0, 1, 13, 0, 1, 0, 1, 14};
  f.slots = {2, 0};
  f.starts = {7, 0};
  f.num_tokens = {1, 1};
  f.token_ids = {12, 40};
  plan = batch.Apply(f);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(batch.Table(2, 1), ElementsAre(-1, 21));
  EXPECT_THAT(batch.Table(0, 0), ElementsAre(13));
  EXPECT_THAT(batch.Table(0, 1), ElementsAre(14));
  EXPECT_TRUE(batch.Table(1, 0).empty());  // never a sequence there
  EXPECT_EQ(batch.num_live(), 2);
}

TEST(PersistentBatchTest, InconsistentDeltasAreErrors) {
  auto error = [](StepDelta d, std::vector<StepDelta> before = {}) {
    PersistentBatch batch(1, kBlock);
    for (const StepDelta& b : before) EXPECT_TRUE(batch.Apply(b).ok());
    auto plan = batch.Apply(d);
    return plan.ok() ? std::string("ok") : std::string(plan.status().message());
  };
  StepDelta add;
  add.added_slots = {1};
  add.table_edits = {1, 0, 0, 1, 3};
  StepDelta row;
  row.slots = {1};
  row.starts = {0};
  row.num_tokens = {1};
  row.token_ids = {9};
  EXPECT_THAT(error(row), HasSubstr("slot 1 holds no sequence"));
  StepDelta beyond = row;
  beyond.starts = {4};  // block 1 was never sent
  EXPECT_THAT(error(beyond, {add}), HasSubstr("position 4 has no block"));
  StepDelta ids = row;
  ids.token_ids = {9, 9};
  EXPECT_THAT(error(ids, {add}), HasSubstr("2 token ids for 1 tokens"));
  StepDelta remove;
  remove.removed_slots = {5};
  EXPECT_THAT(error(remove), HasSubstr("slot 5 holds no sequence"));
  StepDelta freed;
  freed.table_edits = {1, 0, 3, 0};
  EXPECT_THAT(error(freed, {add}), HasSubstr("3 freed blocks of 1"));
  StepDelta truncated;
  truncated.table_edits = {1, 0, 0, 5, 1};
  EXPECT_THAT(error(truncated, {add}), HasSubstr("malformed table edit"));
  StepDelta sampled = row;
  sampled.sampled_rows = {1};
  EXPECT_THAT(error(sampled, {add}), HasSubstr("sampled rows"));
}

}  // namespace
}  // namespace tpserve
