// tpbench compare's pure part (bench/tpbench/compare.h): --prices parsing, prices from a router
// config, cost arithmetic, first-difference and agreement, and the written summary.
#include "bench/tpbench/compare.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve::bench {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr double kTol = 1e-12;

TEST(ParsePricesTest, ReadsModelsAndRejectsWhatItCannotRead) {
  absl::StatusOr<std::map<std::string, Price>> p = ParsePrices("gemma=0.1:0.4, llama3:8b = 2:3");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ(p->at("gemma").input_per_mtok, 0.1);
  EXPECT_EQ(p->at("gemma").output_per_mtok, 0.4);
  EXPECT_EQ(p->at("llama3:8b").input_per_mtok, 2);  // a ':' in the model name
  EXPECT_EQ(p->at("llama3:8b").output_per_mtok, 3);
  ASSERT_TRUE(ParsePrices("").ok());
  EXPECT_TRUE(ParsePrices("")->empty());

  for (const char* bad : {"gemma", "=1:2", "gemma=1", "gemma=1:2:3", "gemma=x:2", "gemma=-1:2", "gemma=1:inf",
                          "a=1:2,a=3:4"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<std::map<std::string, Price>> r = ParsePrices(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--prices: \""));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("MODEL=INPUT:OUTPUT"));
  }
}

TEST(PriceBookTest, ReadsARouterConfigsPricesPerModelAndBackend) {
  absl::StatusOr<PriceBook> book = PriceBook::FromRouterConfig(R"({"models": {
      "a": {"fallback": "cloud", "backends": [
              {"url": "http://n1:8000/v1", "price_per_mtok": {"input": 0.5, "output": 1.5}},
              "http://n2:8000/v1",
              {"url": "http://n3:8000/v1", "price_per_mtok": {"input": 0.5}}]},
      "b": {"backends": [{"url": "http://n1:8000/v1", "price_per_mtok": {"input": 2, "output": 4}}]},
      "cloud": {"backends": [{"url": "http://cloud/v1", "price_per_mtok": {"input": 0.59, "output": 0.79}}]}}})");
  ASSERT_TRUE(book.ok()) << book.status();
  std::optional<Price> p = book->Lookup("a", "http://n1:8000/v1");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->input_per_mtok, 0.5);
  EXPECT_EQ(p->output_per_mtok, 1.5);
  p = book->Lookup("b", "http://n1:8000/v1");  // the same URL under another model, its own price
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->output_per_mtok, 4);
  EXPECT_FALSE(book->Lookup("a", "http://n2:8000/v1").has_value());  // no price
  EXPECT_FALSE(book->Lookup("a", "http://n3:8000/v1").has_value());  // half a price
  // "a"'s fallback answered: the URL's one price across models.
  p = book->Lookup("a", "http://cloud/v1");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->input_per_mtok, 0.59);
  // A URL two models price differently, answering for a third: ambiguous, so none.
  EXPECT_FALSE(book->Lookup("other", "http://n1:8000/v1").has_value());

  absl::StatusOr<PriceBook> bad = PriceBook::FromRouterConfig(
      R"({"models": {"m": {"backends": [{"url": "http://n1/v1", "price_per_mtok": {"input": -1}}]}}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("price_per_mtok.input"));
}

RequestRecord Answer(int prompt, int prompt_tokens, int completion_tokens, std::string backend = "") {
  RequestRecord r;
  r.prompt_index = prompt;
  r.round = 0;
  r.concurrency = 1;
  r.outcome.success = true;
  r.outcome.prompt_tokens = prompt_tokens;
  r.outcome.completion_tokens = completion_tokens;
  r.outcome.ttft_ms = 10 + prompt;
  r.outcome.latency_ms = 10 + prompt + 2.0 * (completion_tokens - 1);
  r.outcome.backend = std::move(backend);
  return r;
}

TEST(CostTest, SumsPromptAndCompletionTokensAtTheirPrices) {
  std::vector<RequestRecord> records = {Answer(0, 100, 20, "http://n1/v1"), Answer(1, 50, 30, "http://n2/v1")};
  records.push_back(Answer(2, 1000, 1000));
  records.back().round = -1;  // warm-up: not counted
  records.push_back(Answer(3, 1000, 1000));
  records.back().outcome.success = false;  // failed: not counted
  records.push_back(Answer(4, -1, 10));
  records.back().expected_prompt_tokens = 40;  // no usage: the workload's count

  const Price n1{0.5, 1.5}, n2{2, 4};
  const Cost c = CostOf(records, [&](const RequestRecord& r) -> std::optional<Price> {
    return r.outcome.backend == "http://n2/v1" ? n2 : n1;
  });
  EXPECT_EQ(c.priced_requests, 3);
  EXPECT_EQ(c.unpriced_requests, 0);
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(c.input_tokens, 190);
  EXPECT_EQ(c.output_tokens, 60);
  // (100 * 0.5 + 20 * 1.5) + (50 * 2 + 30 * 4) + (40 * 0.5 + 10 * 1.5) = 80 + 220 + 35 = 335 micro-USD.
  EXPECT_NEAR(c.usd, 335e-6, kTol);
  EXPECT_NEAR(c.usd_per_mtok(), 335.0 / 250, kTol);
  EXPECT_NEAR(c.usd_per_output_mtok(), 335.0 / 60, kTol);

  // A request without a price (or without a prompt count) leaves the cost incomplete.
  records.push_back(Answer(5, -1, 10));
  const Cost partial = CostOf(records, [](const RequestRecord& r) -> std::optional<Price> {
    if (r.outcome.backend.empty() && r.prompt_index == 0) return std::nullopt;
    return Price{1, 1};
  });
  EXPECT_EQ(partial.unpriced_requests, 1);
  EXPECT_FALSE(partial.complete());
  EXPECT_EQ(partial.usd_per_mtok(), -1);
  EXPECT_EQ(partial.usd_per_output_mtok(), -1);
  EXPECT_FALSE(CostOf(records, nullptr).complete());
}

TEST(AgreementTest, FirstDifferenceInTokensAndCharacters) {
  EXPECT_EQ(FirstDifferentToken({1, 2, 3}, {1, 2, 3}), -1);
  EXPECT_EQ(FirstDifferentToken({}, {}), -1);
  EXPECT_EQ(FirstDifferentToken({1, 2, 3}, {1, 9, 3}), 1);
  EXPECT_EQ(FirstDifferentToken({7}, {8}), 0);
  EXPECT_EQ(FirstDifferentToken({1, 2}, {1, 2, 3}), 2);  // a prefix: the shorter one's length
  EXPECT_EQ(FirstDifferentToken({1, 2, 3}, {1}), 1);

  EXPECT_EQ(FirstDifferentCharacter("abc", "abc"), -1);
  EXPECT_EQ(FirstDifferentCharacter("abc", "abd"), 2);
  EXPECT_EQ(FirstDifferentCharacter("ab", "abc"), 2);
  EXPECT_EQ(FirstDifferentCharacter("", "x"), 0);
  // Characters, not bytes: "é" is 2 bytes, "€" 3; "é€" and "é€x" differ at character 2.
  EXPECT_EQ(FirstDifferentCharacter("\xc3\xa9\xe2\x82\xac", "\xc3\xa9\xe2\x82\xacx"), 2);
  // "é" (c3 a9) vs "ê" (c3 aa) differ in the second byte of character 1.
  EXPECT_EQ(FirstDifferentCharacter("a\xc3\xa9", "a\xc3\xaa"), 1);
}

TEST(AgreementTest, MatchesPromptsAndBinsTheFirstDifferences) {
  std::vector<RequestRecord> a, b;
  const std::vector<std::pair<std::string, std::string>> texts = {
      {"same", "same"}, {"xyz", "abc"}, {"hello", "help"}, {"0123456789", "0123456x"}, {"ab", "ab"}};
  for (int i = 0; i < 5; ++i) {
    a.push_back(Answer(i, 5, 3));
    a.back().outcome.output_text = texts[i].first;
    b.push_back(Answer(4 - i, 5, 3));  // answered in another order
    b.back().outcome.output_text = texts[4 - i].second;
  }
  b.push_back(Answer(5, 5, 3));  // only B sent prompt 5
  b.back().outcome.output_text = "";
  a.push_back(Answer(0, 5, 3));  // warm-up: ignored
  a.back().round = -1;
  a.back().outcome.output_text = "different";

  Agreement g = CompareOutputs(a, b);
  EXPECT_EQ(g.unit, "character");
  EXPECT_EQ(g.prompts, 6);
  EXPECT_EQ(g.compared, 5);
  EXPECT_EQ(g.identical, 2);
  EXPECT_EQ(g.not_compared, 1);
  EXPECT_NEAR(g.identical_fraction(), 0.4, kTol);
  EXPECT_EQ(g.first_difference, (std::vector<std::pair<int, int64_t>>{{1, 0}, {2, 3}, {3, 7}}));
  // 0 -> "0"; 3 -> "2-3"; 7 -> "4-7".
  EXPECT_EQ(g.histogram, (std::vector<std::pair<std::string, int64_t>>{{"0", 1}, {"1", 0}, {"2-3", 1}, {"4-7", 1}}));

  // A failed side: not compared. Token ids on every pair: compared in tokens.
  a[2].outcome.success = false;
  for (RequestRecord& r : a) r.outcome.output_token_ids = std::vector<int32_t>{1, 2, r.prompt_index};
  for (RequestRecord& r : b) r.outcome.output_token_ids = std::vector<int32_t>{1, 2, r.prompt_index == 4 ? 9 : r.prompt_index};
  g = CompareOutputs(a, b);
  EXPECT_EQ(g.unit, "token");
  EXPECT_EQ(g.compared, 4);
  EXPECT_EQ(g.not_compared, 2);
  EXPECT_EQ(g.identical, 3);
  EXPECT_EQ(g.first_difference, (std::vector<std::pair<int, int64_t>>{{4, 2}}));
  EXPECT_EQ(g.histogram, (std::vector<std::pair<std::string, int64_t>>{{"0", 0}, {"1", 0}, {"2-3", 1}}));

  const Agreement none = CompareOutputs({}, {});
  EXPECT_EQ(none.unit, "");
  EXPECT_EQ(none.identical_fraction(), -1);
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(WriteCompareTest, WritesTheSummaryTableAndPlots) {
  CompareInput input;
  input.api = "openai-chat";
  input.workload = "random in=8 out=4 range=0";
  input.concurrency = 1;
  input.num_prompts = 2;
  for (CompareSide* s : {&input.a, &input.b}) {
    LevelRecord level;
    level.concurrency = 1;
    level.rounds = 1;
    level.start_s = 0;
    level.end_s = 2;
    s->run.levels = {level};
    s->target = "http://router:8080/v1";
  }
  input.a.name = "A";
  input.a.model = "tiny-a";
  input.a.records = {Answer(0, 8, 4, "http://n1/v1"), Answer(1, 8, 4, "http://n1/v1")};
  input.a.records[0].outcome.output_text = "abcd";
  input.a.records[1].outcome.output_text = "wxyz";
  input.a.price_source = "--prices";
  input.a.price_of = [](const RequestRecord&) { return std::optional<Price>(Price{1, 2}); };
  input.b.name = "B";
  input.b.model = "tiny-b";
  input.b.records = {Answer(0, 8, 4, "http://n2/v1"), Answer(1, 8, 4, "http://n2/v1")};
  input.b.records[0].outcome.output_text = "abcd";
  input.b.records[1].outcome.output_text = "wxQ";
  input.b.price_source = "nowhere";

  char pattern[] = "/tmp/tpbench_compare_test_XXXXXX";
  const fs::path dir = mkdtemp(pattern);
  absl::StatusOr<std::string> md = WriteCompare(input, dir.string());
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_EQ(ReadAll(dir / "compare.md"), *md);
  EXPECT_THAT(*md, HasSubstr("| Metric | A: tiny-a | B: tiny-b |\n"));
  EXPECT_THAT(*md, HasSubstr("| Requests | 2 | 2 |\n"));
  EXPECT_THAT(*md, HasSubstr("| TTFT median ms | 10.5 | 10.5 |\n"));  // TTFT 10 and 11
  EXPECT_THAT(*md, HasSubstr("| Output tok/s | 4.0 | 4.0 |\n"));      // 8 tokens / 2 s
  // A: 2 x (8 x 1 + 4 x 2) = 32 micro-USD over 24 tokens, 8 of them output; B has no prices.
  EXPECT_THAT(*md, HasSubstr("| Cost USD | 0.000032 | - |\n"));
  EXPECT_THAT(*md, HasSubstr("| USD per 1M tokens | 1.333333 | - |\n"));
  EXPECT_THAT(*md, HasSubstr("| USD per 1M output tokens | 4.000000 | - |\n"));
  EXPECT_THAT(*md, HasSubstr("B: 2 successful requests had no price"));
  EXPECT_THAT(*md, HasSubstr("Compared by characters (the OpenAI API returns text, not token ids): 1 of 2 prompts "
                             "identical (50.0%)."));
  EXPECT_THAT(*md, HasSubstr("| 2-3 | 1 |\n"));
  EXPECT_THAT(*md, HasSubstr("answered by http://n1/v1 (2)"));

  const nlohmann::json j = nlohmann::json::parse(ReadAll(dir / "compare.json"));
  EXPECT_EQ(j["sides"][0]["model"], "tiny-a");
  EXPECT_NEAR(j["sides"][0]["cost"]["usd"].get<double>(), 32e-6, kTol);
  EXPECT_TRUE(j["sides"][1]["cost"]["usd"].is_null());
  EXPECT_EQ(j["sides"][1]["backends"]["http://n2/v1"], 2);
  EXPECT_EQ(j["agreement"]["unit"], "character");
  EXPECT_EQ(j["agreement"]["identical"], 1);
  EXPECT_EQ(j["agreement"]["first_difference"][0]["index"], 2);
  for (const char* name : {"ttft_cdf.svg", "tpot_cdf.svg", "agreement.svg"}) {
    SCOPED_TRACE(name);
    const std::string svg = ReadAll(dir / name);
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_THAT(svg, HasSubstr("</svg>\n"));
    EXPECT_THAT(*md, HasSubstr(std::string("![](") + name + ")"));
  }
  EXPECT_THAT(ReadAll(dir / "ttft_cdf.svg"), HasSubstr("A: tiny-a"));
  EXPECT_THAT(ReadAll(dir / "agreement.svg"), HasSubstr("first differs at 2-3"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tpserve::bench
