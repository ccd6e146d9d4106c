// Pipeline parallelism's layout: the layer split by cost (worker/pipeline.h), which stage
// reads which tensor, and the launcher's choice of tensor x pipeline sizes
// (launch/ranks.h). The stages' numerics: tests/model_test.cc and tests/mpi_model_test.cc.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "launch/ranks.h"
#include "worker/pipeline.h"

namespace tpserve {
namespace {

int64_t StageCost(const ModelConfig& c, int begin, int end, bool last) {
  int64_t cost = last ? HeadCost(c) : 0;
  for (int i = begin; i < end; ++i) cost += LayerCost(c, i);
  return cost;
}

// The least possible largest stage cost, by trying every split.
int64_t BruteForceBest(const ModelConfig& c, int stages) {
  int64_t best = INT64_MAX;
  std::function<void(int, int, int64_t)> go = [&](int s, int begin, int64_t worst) {
    if (s == stages - 1) {
      best = std::min(best, std::max(worst, StageCost(c, begin, c.num_layers, true)));
      return;
    }
    for (int end = begin + 1; end <= c.num_layers - (stages - 1 - s); ++end) {
      go(s + 1, end, std::max(worst, StageCost(c, begin, end, false)));
    }
  };
  go(0, 0, 0);
  return best;
}

TEST(Pipeline, SplitBalancesTheSlowestStage) {
  for (const char* preset : {"gemma-4-31b", "gemma-4-1b", "gemma-4-tiny"}) {
    auto c = PresetModelConfig(preset);
    ASSERT_TRUE(c.ok()) << c.status();
    for (int stages : {1, 2, 3, 4}) {
      if (stages > c->num_layers) continue;
      auto bounds = SplitLayers(*c, stages);
      ASSERT_TRUE(bounds.ok()) << bounds.status();
      ASSERT_EQ(bounds->size(), static_cast<size_t>(stages + 1));
      EXPECT_EQ(bounds->front(), 0);
      EXPECT_EQ(bounds->back(), c->num_layers);
      int64_t worst = 0;
      for (int s = 0; s < stages; ++s) {
        EXPECT_LT((*bounds)[s], (*bounds)[s + 1]) << preset << " stage " << s << " is empty";
        worst = std::max(worst, StageCost(*c, (*bounds)[s], (*bounds)[s + 1], s == stages - 1));
      }
      if (stages <= 3 || c->num_layers <= 40) { EXPECT_EQ(worst, BruteForceBest(*c, stages)) << preset << " " << stages; }
    }
  }
}

TEST(Pipeline, TheLastStageTakesFewerLayersForItsHead) {
  auto c = PresetModelConfig("gemma-4-31b");
  ASSERT_TRUE(c.ok());
  auto bounds = SplitLayers(*c, 2);
  ASSERT_TRUE(bounds.ok());
  // The 262144 x 5376 LM head weighs as much as a few layers: the first stage holds more.
  EXPECT_GT((*bounds)[1], c->num_layers - (*bounds)[1]) << DescribeStages(*bounds);
  EXPECT_EQ(DescribeStages({0, 31, 60}), "layers 0-30 | 31-59");
  EXPECT_EQ(DescribeStages({0, 1, 2}), "layers 0 | 1");
}

TEST(Pipeline, MoreStagesThanLayersIsAnError) {
  auto c = PresetModelConfig("gemma-4-tiny");
  ASSERT_TRUE(c.ok());
  auto bounds = SplitLayers(*c, c->num_layers + 1);
  ASSERT_FALSE(bounds.ok());
  EXPECT_NE(std::string(bounds.status().message()).find("--pipeline-parallel-size"), std::string::npos);
  EXPECT_FALSE(MakePipelineStage(*c, 2, 2).ok());
}

TEST(Pipeline, EachStageOwnsItsTensors) {
  auto c = PresetModelConfig("gemma-4-tiny");
  ASSERT_TRUE(c.ok());
  ModelConfig tied = *c, untied = *c;
  tied.tie_word_embeddings = true;
  untied.tie_word_embeddings = false;
  const PipelineStage first{3, 0, 0, 1}, middle{3, 1, 1, 2}, last{3, 2, 2, 4};
  EXPECT_TRUE(OwnsTensor(tied, first, "embed_tokens.weight"));
  EXPECT_FALSE(OwnsTensor(tied, middle, "embed_tokens.weight"));
  EXPECT_TRUE(OwnsTensor(tied, last, "embed_tokens.weight"));  // the tied LM head
  EXPECT_FALSE(OwnsTensor(untied, last, "embed_tokens.weight"));
  EXPECT_TRUE(OwnsTensor(untied, last, "lm_head.weight"));
  EXPECT_FALSE(OwnsTensor(untied, first, "lm_head.weight"));
  EXPECT_TRUE(OwnsTensor(tied, last, "norm.weight"));
  EXPECT_FALSE(OwnsTensor(tied, first, "norm.weight"));
  EXPECT_TRUE(OwnsTensor(tied, first, "layers.0.mlp.up_proj.weight"));
  EXPECT_FALSE(OwnsTensor(tied, first, "layers.1.mlp.up_proj.weight"));
  EXPECT_TRUE(OwnsTensor(tied, last, "layers.3.self_attn.q_proj.weight"));
  EXPECT_FALSE(OwnsTensor(tied, last, "layers.10.self_attn.q_proj.weight"));
  EXPECT_TRUE(OwnsTensor(tied, middle, "something.else"));  // unknown: every stage's to explain
}

TEST(ParallelLayout, OneStagePerNodeByDefault) {
  // mpirun -np 8 --host a:4,b:4: TP 4 x PP 2.
  auto l = ChooseParallelLayout({4, 4, 4, 4, 4, 4, 4, 4}, {"a", "a", "a", "a", "b", "b", "b", "b"}, {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->tp, 4);
  EXPECT_EQ(l->pp, 2);
  EXPECT_NE(l->why.find("2 nodes"), std::string::npos) << l->why;
  // One node: tensor parallel only.
  l = ChooseParallelLayout({2, 2}, {"a", "a"}, {});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->tp, 2);
  EXPECT_EQ(l->pp, 1);
}

TEST(ParallelLayout, FlagsOverride) {
  const std::vector<int> sizes(4, 4);
  const std::vector<std::string> nodes(4, "a");
  auto l = ChooseParallelLayout(sizes, nodes, {2, 2});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->tp * 10 + l->pp, 22);
  l = ChooseParallelLayout(sizes, nodes, {1, 0});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->tp * 10 + l->pp, 14);
  l = ChooseParallelLayout(sizes, nodes, {0, 2});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->tp * 10 + l->pp, 22);
}

TEST(ParallelLayout, LayoutsThatCannotWorkAreErrors) {
  auto message = [](const absl::StatusOr<ParallelLayout>& l) {
    return l.ok() ? std::string("ok") : std::string(l.status().message());
  };
  const std::vector<int> four(4, 4);
  const std::vector<std::string> one_node(4, "a");
  EXPECT_NE(message(ChooseParallelLayout(four, one_node, {3, 0})).find("does not divide the MPI world size 4"),
            std::string::npos);
  EXPECT_NE(message(ChooseParallelLayout(four, one_node, {2, 3})).find("but the MPI world has 4"), std::string::npos);
  // Ranks per node differ: a:3, b:1.
  EXPECT_NE(message(ChooseParallelLayout({3, 3, 3, 1}, {"a", "a", "a", "b"}, {})).find("a:3, b:1"),
            std::string::npos);
  // A node's ranks interleaved with another's.
  EXPECT_NE(message(ChooseParallelLayout({2, 2, 2, 2}, {"a", "b", "a", "b"}, {})).find("not consecutive"),
            std::string::npos);
  // ...which flags make work.
  EXPECT_TRUE(ChooseParallelLayout({2, 2, 2, 2}, {"a", "b", "a", "b"}, {2, 2}).ok());
}

}  // namespace
}  // namespace tpserve
