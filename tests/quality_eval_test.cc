// bench/quality_eval.h on fixture checkpoints: a model scored against itself (KL exactly 0,
// full agreement, equal perplexities), against a bf16-rounded copy of itself and against a
// different model (KL > 0); llama-perplexity's chunk layout; the vocabulary check.
#include "bench/quality_eval.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/communicator.h"

namespace tpserve::bench {
namespace {

std::string ModelFixture(const std::string& name) { return std::string(TPSERVE_FIXTURES) + "/models/" + name; }
std::string GgufFixture(const std::string& file) { return std::string(TPSERVE_FIXTURES) + "/gguf/models/" + file; }

constexpr int32_t kCtx = 32;  // four times the gemma3 fixtures' sliding window
constexpr int32_t kBos = 2;

// A pseudo-text of `n` ids in [3, vocab), BOS first (as a tokenizer that adds one writes it).
std::vector<int32_t> PseudoText(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids = {kBos};
  uint64_t x = 88172645463325252ull;
  while (static_cast<int64_t>(ids.size()) < n) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    ids.push_back(static_cast<int32_t>(3 + x % (vocab - 3)));
  }
  return ids;
}

EngineOptions Options(const std::string& model, const std::string& dtype = "auto") {
  EngineOptions o;
  o.model = model;
  o.dtype = dtype;
  o.threads = 2;
  return o;
}

// Starts both models on one rank and scores three chunks of the pseudo-text.
std::vector<TokenScore> ScoreText(const EngineOptions& ref_o, const EngineOptions& cand_o) {
  LocalGroup group(1);
  std::unique_ptr<Communicator> comm = group.Rank(0);
  absl::StatusOr<Engine> ref = StartScoringEngine(ref_o, kCtx, *comm);
  EXPECT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<Engine> cand = StartScoringEngine(cand_o, kCtx, *comm);
  EXPECT_TRUE(cand.ok()) << cand.status();
  std::vector<TokenScore> scores;
  if (!ref.ok() || !cand.ok()) return scores;
  const auto chunks = SplitIntoChunks(PseudoText(3 * kCtx + 5, ref->config.vocab_size), kCtx, 0, kBos);
  EXPECT_EQ(chunks.size(), 3u);
  for (const auto& chunk : chunks) {
    absl::StatusOr<std::vector<TokenScore>> s = ScoreChunk(*ref->model, *cand->model, chunk);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return {};
    EXPECT_EQ(s->size(), static_cast<size_t>(kCtx - 1 - kCtx / 2));
    scores.insert(scores.end(), s->begin(), s->end());
  }
  return scores;
}

TEST(QualityEvalTest, ChunksFollowLlamaPerplexity) {
  const std::vector<int32_t> tokens = {kBos, 10, 11, 12, 13, 14, 15, 16, 17, 18};
  const auto chunks = SplitIntoChunks(tokens, 4, 0, kBos);
  ASSERT_EQ(chunks.size(), 2u);  // the last 2 tokens fill no chunk
  EXPECT_EQ(chunks[0], (std::vector<int32_t>{kBos, 10, 11, 12}));
  EXPECT_EQ(chunks[1], (std::vector<int32_t>{kBos, 14, 15, 16}));  // 13 replaced by BOS
  EXPECT_EQ(SplitIntoChunks(tokens, 4, 1, kBos).size(), 1u);
  EXPECT_EQ(SplitIntoChunks(tokens, 4, 0, std::nullopt)[1], (std::vector<int32_t>{13, 14, 15, 16}));
  EXPECT_TRUE(SplitIntoChunks(tokens, 11, 0, kBos).empty());
  EXPECT_EQ(FirstScoredPosition(512), 256);
}

TEST(QualityEvalTest, EngineSettings) {
  EngineOptions o;
  ASSERT_TRUE(ApplyEngineSettings("dtype=float32, load_format=gguf,cpu_huge_pages=false,threads=3", o).ok());
  EXPECT_EQ(o.dtype, "float32");
  EXPECT_EQ(o.load_format, "gguf");
  EXPECT_FALSE(o.cpu_huge_pages);
  EXPECT_EQ(o.threads, 3);
  EXPECT_TRUE(ApplyEngineSettings("", o).ok());
  EXPECT_FALSE(ApplyEngineSettings("colour=blue", o).ok());
  EXPECT_FALSE(ApplyEngineSettings("dtype", o).ok());
  EXPECT_FALSE(ApplyEngineSettings("threads=many", o).ok());
}

TEST(QualityEvalTest, ModelAgainstItselfScoresZero) {
  const std::vector<TokenScore> scores =
      ScoreText(Options(ModelFixture("gemma3_text")), Options(ModelFixture("gemma3_text")));
  ASSERT_EQ(scores.size(), 3u * (kCtx - 1 - kCtx / 2));
  for (const TokenScore& t : scores) {
    EXPECT_EQ(t.kl, 0.0);
    EXPECT_EQ(t.ref_nll, t.cand_nll);
    EXPECT_TRUE(t.same_top1);
  }
  const QualityStats s = Summarize(scores);
  EXPECT_EQ(s.kl_max, 0.0);
  EXPECT_EQ(s.top1_agreement, 1.0);
  EXPECT_EQ(s.ref_ppl, s.cand_ppl);
  EXPECT_GT(s.ref_ppl, 1.0);
}

TEST(QualityEvalTest, Bf16RoundedCopyScoresSmallPositiveKl) {
  // The float32 fixture against its weights rounded to bfloat16: a perturbation of about
  // 2^-9 relative per weight.
  const QualityStats s = Summarize(ScoreText(Options(ModelFixture("gemma3_text"), "float32"),
                                             Options(ModelFixture("gemma3_text"), "bfloat16")));
  ASSERT_GT(s.tokens, 0);
  EXPECT_GT(s.kl_mean, 0.0);
  EXPECT_LT(s.kl_mean, 1e-2);
  EXPECT_GT(s.top1_agreement, 0.8);
}

TEST(QualityEvalTest, DifferentModelScoresPositiveKl) {
  // The GGUF fixture is another seeded Gemma 3 of the same shape (tools/make_gguf_model_fixtures.py).
  const QualityStats s =
      Summarize(ScoreText(Options(ModelFixture("gemma3_text")), Options(GgufFixture("gemma3.gguf"))));
  ASSERT_GT(s.tokens, 0);
  EXPECT_GT(s.kl_mean, 1e-3);
  EXPECT_LT(s.top1_agreement, 1.0);
  EXPECT_NE(s.ref_ppl, s.cand_ppl);
}

TEST(QualityEvalTest, VocabularySizesMustMatch) {
  ModelConfig a, b;
  a.vocab_size = 512;
  b.vocab_size = 256;
  const absl::Status st = CheckSameVocabulary(a, b);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("512"), std::string::npos);
  EXPECT_TRUE(CheckSameVocabulary(a, a).ok());
}

}  // namespace
}  // namespace tpserve::bench
