// Tests for coordinator/text/tokenizer.h and tokenizer_incremental_decoder.h: exact ids and
// text against references that tools/make_tokenizer_fixtures.py made with the Python
// `tokenizers` library (tests/fixtures/tokenizers/<name>/), streaming, and load errors.
#include "coordinator/text/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "coordinator/text/tokenizer_bpe.h"
#include "coordinator/text/tokenizer_incremental_decoder.h"
#include "coordinator/text/tokenizer_regex.h"
#include "coordinator/text/tokenizer_unicode.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using Json = nlohmann::json;

std::string FixturePath(const std::string& name, const std::string& file) {
  return std::string(TPSERVE_FIXTURES) + "/tokenizers/" + name + "/" + file;
}

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return Json::parse(buffer.str());
}

std::unique_ptr<Tokenizer> LoadFixture(const std::string& name) {
  auto tokenizer = Tokenizer::FromFile(FixturePath(name, "tokenizer.json"));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

// Printable form of a sample for failure messages.
std::string Show(const std::string& text) { return Json(text).dump(); }

class FixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    tokenizer_ = LoadFixture(GetParam());
    ASSERT_NE(tokenizer_, nullptr);
    reference_ = ReadJson(FixturePath(GetParam(), "reference.json"));
    ASSERT_GT(reference_["samples"].size(), 100u);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  Json reference_;
};

TEST_P(FixtureTest, EncodeMatchesReference) {
  for (const Json& sample : reference_["samples"]) {
    const std::string text = sample["text"];
    EXPECT_EQ(tokenizer_->Encode(text, true),
              sample["ids_with_special"].get<std::vector<int32_t>>())
        << "text: " << Show(text);
    EXPECT_EQ(tokenizer_->Encode(text, false),
              sample["ids_without_special"].get<std::vector<int32_t>>())
        << "text: " << Show(text);
  }
}

TEST_P(FixtureTest, DecodeMatchesReference) {
  for (const Json& sample : reference_["samples"]) {
    const auto ids = sample["ids_with_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->Decode(ids, false), sample["decoded"].get<std::string>())
        << "text: " << Show(sample["text"]);
    EXPECT_EQ(tokenizer_->Decode(ids, true), sample["decoded_skip_special"].get<std::string>())
        << "text: " << Show(sample["text"]);
  }
}

TEST_P(FixtureTest, IncrementalDecodeEqualsDecodeAndIsAlwaysValidUtf8) {
  for (const bool skip : {false, true}) {
    for (const Json& sample : reference_["samples"]) {
      const auto ids = sample["ids_with_special"].get<std::vector<int32_t>>();
      IncrementalDecoder stream(*tokenizer_, skip);
      std::string streamed;
      for (const int32_t id : ids) {
        const std::string chunk = stream.Push(id);
        EXPECT_TRUE(tokenizer_internal::IsValidUtf8(chunk)) << "text: " << Show(sample["text"]);
        streamed += chunk;
      }
      const std::string rest = stream.Flush();
      EXPECT_TRUE(tokenizer_internal::IsValidUtf8(rest));
      streamed += rest;
      EXPECT_EQ(streamed, tokenizer_->Decode(ids, skip))
          << "skip=" << skip << " text: " << Show(sample["text"]);
    }
  }
}

TEST_P(FixtureTest, MetadataMatchesReference) {
  EXPECT_EQ(tokenizer_->vocab_size(), reference_["vocab_size"].get<int32_t>());
  if (reference_["bos_id"].is_null()) {
    EXPECT_FALSE(tokenizer_->bos_id().has_value());
  } else {
    EXPECT_EQ(tokenizer_->bos_id(), reference_["bos_id"].get<int32_t>());
  }
  EXPECT_EQ(tokenizer_->eos_ids(), reference_["eos_ids"].get<std::vector<int32_t>>());
  const auto special = reference_["special_ids"].get<std::vector<int32_t>>();
  for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
    const bool expected = std::find(special.begin(), special.end(), id) != special.end();
    EXPECT_EQ(tokenizer_->IsSpecial(id), expected) << "id " << id;
  }
  // Added tokens matched after normalization read back in normalized form, as in
  // tokenizers (Llama 2's "<<SYS>>" is "▁<<SYS>>").
  for (const auto& [id, token] : reference_["added_token_strings"].items()) {
    EXPECT_EQ(tokenizer_->IdToToken(std::stoi(id)), token.get<std::string>());
  }
  const Json tokenizer_json = ReadJson(FixturePath(GetParam(), "tokenizer.json"));
  for (const auto& [token, id] : tokenizer_json["model"]["vocab"].items()) {
    EXPECT_EQ(tokenizer_->TokenToId(token), id.get<int32_t>()) << "token " << Show(token);
  }
  EXPECT_EQ(tokenizer_->IdToToken(-1), "");
  EXPECT_EQ(tokenizer_->IdToToken(tokenizer_->vocab_size()), "");
  EXPECT_FALSE(tokenizer_->TokenToId("no such token in any vocab").has_value());
}

// 1 MB encodes (no clock: the speed is bench/coordinator_bench's to print). The size is
// the guard against a superlinear encoder: a merge loop or regex scan that restarts from
// the start of the text would take ~n^2/2 = 5e11 steps here (Gemma's tokenizer, which does
// not split on spaces, merges the whole megabyte as one sequence), which is past ctest's
// TIMEOUT (300 s, tests/CMakeLists.txt) even at a step per nanosecond; the linear encoder
// takes 0.1-0.2 s per family.
TEST_P(FixtureTest, EncodesOneMegabyte) {
  std::string text;
  while (text.size() < (1 << 20)) {
    for (const Json& sample : reference_["samples"])
      text += sample["text"].get<std::string>() + " ";
  }
  const std::vector<int32_t> ids = tokenizer_->Encode(text, false);
  EXPECT_GT(ids.size(), text.size() / 16);
  for (int32_t id : ids) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, tokenizer_->vocab_size());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FixtureTest,
                         ::testing::Values("gemma", "llama2", "mistral", "llama3", "qwen2", "gpt2"),
                         [](const auto& info) { return info.param; });

// No sample is fewer tokens than its non-whitespace bytes allow
// (Tokenizer::max_text_bytes_per_token, what the front end refuses unfit prompts by).
TEST_P(FixtureTest, TextBytesPerTokenBoundsEverySample) {
  const std::optional<int64_t> bound = tokenizer_->max_text_bytes_per_token();
  ASSERT_TRUE(bound.has_value());
  for (const Json& sample : reference_["samples"]) {
    const std::string text = sample["text"];
    const int64_t tokens = static_cast<int64_t>(tokenizer_->Encode(text, false).size());
    EXPECT_GE(tokens * *bound, Tokenizer::NonWhitespaceBytes(text)) << "text: " << Show(text);
  }
}

TEST(IncrementalDecoder, HoldsBytesOfASplitCharacterUntilComplete) {
  auto tokenizer = LoadFixture("gemma");
  ASSERT_NE(tokenizer, nullptr);
  // U+9F98 is not in the vocabulary, so it encodes as three <0xNN> byte tokens.
  const std::vector<int32_t> ids = tokenizer->Encode("a龘b", false);
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(tokenizer->IdToToken(ids[1]), "<0xE9>");
  IncrementalDecoder stream(*tokenizer, true);
  EXPECT_EQ(stream.Push(ids[0]), "a");
  EXPECT_EQ(stream.Push(ids[1]), "");
  EXPECT_EQ(stream.Push(ids[2]), "");
  EXPECT_EQ(stream.Push(ids[3]), "龘");
  EXPECT_EQ(stream.Push(ids[4]), "b");
  EXPECT_EQ(stream.Flush(), "");
}

TEST(IncrementalDecoder, FlushReturnsAnIncompleteTailAsReplacementCharacters) {
  auto tokenizer = LoadFixture("gemma");
  ASSERT_NE(tokenizer, nullptr);
  const auto e9 = tokenizer->TokenToId("<0xE9>");
  ASSERT_TRUE(e9.has_value());
  IncrementalDecoder stream(*tokenizer, true);
  EXPECT_EQ(stream.Push(*e9), "");
  EXPECT_EQ(stream.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(tokenizer->Decode({*e9}, true), "\xEF\xBF\xBD");
}

// Random ids include byte tokens that form no valid UTF-8. Chunks must still be valid;
// they equal Decode() except where a ByteFallback run is invalid (see the header).
TEST(IncrementalDecoder, RandomIdsGiveValidUtf8Chunks) {
  for (const std::string name : {"gemma", "llama3"}) {
    auto tokenizer = LoadFixture(name);
    ASSERT_NE(tokenizer, nullptr);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> pick(0, tokenizer->vocab_size() - 1);
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<int32_t> ids(1 + trial % 17);
      for (int32_t& id : ids) id = pick(rng);
      IncrementalDecoder stream(*tokenizer, trial % 2 == 0);
      std::string streamed;
      for (const int32_t id : ids) {
        const std::string chunk = stream.Push(id);
        ASSERT_TRUE(tokenizer_internal::IsValidUtf8(chunk));
        streamed += chunk;
      }
      streamed += stream.Flush();
      const std::string full = tokenizer->Decode(ids, trial % 2 == 0);
      if (full.find("\xEF\xBF\xBD") == std::string::npos) {
        EXPECT_EQ(streamed, full);
      }
    }
  }
}

TEST(IncrementalDecoder, KeepsSpacesThatADecoderStripsAtTheStart) {
  auto tokenizer = LoadFixture("llama2");  // decoder ends with Strip(" ", 1, 0)
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int32_t> ids = tokenizer->Encode("Hello world again", true);
  IncrementalDecoder stream(*tokenizer, true);
  std::string streamed;
  for (const int32_t id : ids) streamed += stream.Push(id);
  streamed += stream.Flush();
  EXPECT_EQ(streamed, "Hello world again");
}

TEST(Tokenizer, InvalidUtf8InputIsReadAsReplacementCharacters) {
  auto tokenizer = LoadFixture("llama3");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->Encode("a\xFF"
                              "b",
                              false),
            tokenizer->Encode("a\xEF\xBF\xBD"
                              "b",
                              false));
}

TEST(Tokenizer, ConfigAddBosTokenReplacesThePostProcessor) {
  const std::string json = R"({"model": {"type": "BPE", "vocab": {"<s>": 0, "a": 1}, "merges": []},
      "added_tokens": [{"id": 0, "content": "<s>", "special": true}]})";
  auto plain = Tokenizer::FromJson(json, "inline.json");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->Encode("a", true), std::vector<int32_t>({1}));
  EXPECT_FALSE((*plain)->bos_id().has_value());
  auto with_bos =
      Tokenizer::FromJson(json, "inline.json", R"({"bos_token": "<s>", "add_bos_token": true})");
  ASSERT_TRUE(with_bos.ok()) << with_bos.status();
  EXPECT_EQ((*with_bos)->Encode("a", true), std::vector<int32_t>({0, 1}));
  EXPECT_EQ((*with_bos)->Encode("a<s>", false), std::vector<int32_t>({1, 0}));
  EXPECT_EQ((*with_bos)->bos_id(), 0);
}

TEST(Tokenizer, GenerationConfigTextAddsEosIds) {
  const std::string json = R"({"model": {"type": "BPE", "vocab": {"<s>": 0, "</s>": 1, "<eot>": 2},
      "merges": []}})";
  auto tokenizer = Tokenizer::FromJson(json, "inline.json", R"({"eos_token": "</s>"})",
                                       R"({"eos_token_id": [2, 1]})");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->eos_ids(), std::vector<int32_t>({1, 2}));
  EXPECT_FALSE(Tokenizer::FromJson(json, "inline.json", "", R"({"eos_token_id": [3]})").ok());
}

// One id listed for two tokens: the later names the id (decoding), both encode to it (the
// tokenizers library's token -> id map keeps the earlier), and the earlier still counts as a
// single-character token.
TEST(Tokenizer, AnIdListedTwiceKeepsBothTokensEncoding) {
  tokenizer_internal::BpeVocabulary v;
  v.tokens = {{"x", 0}, {"a", 0}, {"b", 1}, {"ab", 2}};
  v.merges = {{0, 1, 2}};
  auto tokenizer = Tokenizer::FromJsonWithVocabulary(R"({"model": {"type": "BPE"}})", "inline.json", "", "",
                                                     std::move(v));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->IdToToken(0), "a");
  EXPECT_EQ((*tokenizer)->TokenToId("a"), 0);
  EXPECT_EQ((*tokenizer)->TokenToId("x"), 0);
  EXPECT_EQ((*tokenizer)->Encode("abx", false), std::vector<int32_t>({2, 0}));
}

// The vocabulary and merges as data: the same model as the JSON would give.
TEST(Tokenizer, FromJsonWithVocabularyTakesTheModelAsData) {
  const auto vocabulary = [] {
    tokenizer_internal::BpeVocabulary v;
    // "a" first at 3 then at 0: the later id wins, 3 is left without a token.
    v.tokens = {{"a", 3}, {"b", 1}, {"ab", 2}, {"a", 0}};
    v.merges = {{0, 1, 2}};
    return v;
  };
  const std::string json = R"({"model": {"type": "BPE"}})";
  auto tokenizer = Tokenizer::FromJsonWithVocabulary(json, "inline.json", "", "", vocabulary());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->Encode("abba", false), std::vector<int32_t>({2, 1, 0}));
  EXPECT_EQ((*tokenizer)->TokenToId("a"), 0);
  EXPECT_EQ((*tokenizer)->IdToToken(3), "");
  EXPECT_EQ((*tokenizer)->vocab_size(), 4);

  auto twice = Tokenizer::FromJsonWithVocabulary(
      R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})", "inline.json", "", "", vocabulary());
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("inline.json: model.vocab: must be absent"), std::string::npos)
      << twice.status();
  tokenizer_internal::BpeVocabulary bad = vocabulary();
  bad.merges = {{0, 1, 3}};  // 3 has no token
  auto unknown = Tokenizer::FromJsonWithVocabulary(json, "inline.json", "", "", std::move(bad));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("model.merges[0]: id 3 is not in the vocabulary"),
            std::string::npos)
      << unknown.status();
}

// What the model's compact tables (token strings end to end; merges in rows by left id, a long
// row hashed into buckets) must keep: tokens that are empty or hold NUL bytes, ids with gaps, an
// id listed twice, a left token with 200 merges (far more than one bucket holds) among which a
// pair listed twice keeps its later rank, two more with buckets (one in the same 64 ids as the
// first, for the rank dictionary that finds a row's buckets), and one with 16 merges (the longest
// row searched without buckets). The same model is built from data and from JSON.
TEST(Tokenizer, CompactTablesKeepEveryTokenAndMerge) {
  constexpr int kChars = 200;
  // Character i is U+0100 + i (two UTF-8 bytes) with id 20 + 2 i; "a" + character i has id
  // 1000 + 3 i, "b" + character i (i < 16) 3000 + i, "d" + character i (i < 17) 4000 + i, "c" +
  // character i (i < 20) 4100 + i. The gaps in between have no token.
  const auto chr = [](int i) {
    const char32_t c = 0x100 + i;
    return std::string{static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
  };
  const std::string nul(1, '\0');
  const std::string n_nul = "n" + nul;
  const std::string n_nul_l = "n" + nul + "l";
  const std::string c1c2 = chr(1) + chr(2);
  tokenizer_internal::BpeVocabulary v;
  v.tokens = {{"a", 0}, {"n", 2}, {nul, 3}, {"l", 4}, {"", 5}, {n_nul, 6}, {n_nul_l, 7},
              {"b", 8}, {c1c2, 9}, {"d", 10}, {"c", 1999}, {"q", 950}, {"r", 950}, {"z", 5000}};
  for (int i = 0; i < kChars; ++i) v.tokens.push_back({chr(i), 20 + 2 * i});
  for (int i = 0; i < kChars; ++i) v.tokens.push_back({"a" + chr(i), 1000 + 3 * i});
  for (int i = 0; i < 16; ++i) v.tokens.push_back({"b" + chr(i), 3000 + i});
  for (int i = 0; i < 17; ++i) v.tokens.push_back({"d" + chr(i), 4000 + i});
  for (int i = 0; i < 20; ++i) v.tokens.push_back({"c" + chr(i), 4100 + i});
  // (a, character 1) first ranks above (character 1, character 2), then is listed again below
  // it: the later entry wins, so "a" + characters 1 and 2 merges the characters first.
  v.merges = {{0, 22, 1003}, {2, 3, 6}, {6, 4, 7}, {22, 24, 9}};
  for (int i = kChars - 1; i >= 0; --i) v.merges.push_back({0, 20 + 2 * i, 1000 + 3 * i});
  for (int i = 0; i < 16; ++i) v.merges.push_back({8, 20 + 2 * i, 3000 + i});
  for (int i = 0; i < 17; ++i) v.merges.push_back({10, 20 + 2 * i, 4000 + i});
  for (int i = 0; i < 20; ++i) v.merges.push_back({1999, 20 + 2 * i, 4100 + i});

  Json vocab = Json::object();
  for (const auto& [token, id] : v.tokens) {
    if (token != "q") vocab[token] = id;  // a JSON object cannot list "q" and "r" in order
  }
  Json merges = Json::array();
  std::vector<std::string> by_id(5001);
  for (const auto& [token, id] : v.tokens) by_id[id] = token;
  for (const auto& m : v.merges) merges.push_back(Json::array({by_id[m.left], by_id[m.right]}));
  const std::string json =
      Json{{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}}.dump();

  auto from_data = Tokenizer::FromJsonWithVocabulary(R"({"model": {"type": "BPE"}})", "inline.json",
                                                     "", "", std::move(v));
  ASSERT_TRUE(from_data.ok()) << from_data.status();
  auto from_json = Tokenizer::FromJson(json, "inline.json");
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  for (const Tokenizer* tokenizer : {from_data->get(), from_json->get()}) {
    EXPECT_EQ(tokenizer->vocab_size(), 5001);
    for (int i = 0; i < kChars; ++i) {
      EXPECT_EQ(tokenizer->IdToToken(20 + 2 * i), chr(i));
      EXPECT_EQ(tokenizer->IdToToken(21 + 2 * i), "");
      EXPECT_EQ(tokenizer->TokenToId("a" + chr(i)), 1000 + 3 * i);
      EXPECT_EQ(tokenizer->Encode("a" + chr(i), false), std::vector<int32_t>({1000 + 3 * i})) << i;
      EXPECT_EQ(tokenizer->Encode(chr(i) + "a", false), std::vector<int32_t>({20 + 2 * i, 0})) << i;
      for (const auto& [left, left_id, merges, first_id] :
           {std::tuple("b", 8, 16, 3000), std::tuple("d", 10, 17, 4000),
            std::tuple("c", 1999, 20, 4100)}) {
        const std::vector<int32_t> expected = i < merges
                                                  ? std::vector<int32_t>{first_id + i}
                                                  : std::vector<int32_t>{left_id, 20 + 2 * i};
        EXPECT_EQ(tokenizer->Encode(left + chr(i), false), expected) << left << " " << i;
      }
    }
    EXPECT_EQ(tokenizer->Encode("a" + c1c2, false), std::vector<int32_t>({0, 9}));
    EXPECT_EQ(tokenizer->Encode("a" + c1c2 + "a" + chr(3), false),
              std::vector<int32_t>({0, 9, 1009}));
    EXPECT_EQ(tokenizer->Encode(n_nul_l + "n" + nul, false), std::vector<int32_t>({7, 6}));
    EXPECT_EQ(tokenizer->Decode({7, 1, 6}, false), n_nul_l + " " + n_nul);
    EXPECT_EQ(tokenizer->IdToToken(3), nul);
    EXPECT_EQ(tokenizer->IdToToken(7), n_nul_l);
    EXPECT_EQ(tokenizer->TokenToId(n_nul_l), 7);
    EXPECT_EQ(tokenizer->TokenToId(n_nul), 6);
    EXPECT_EQ(tokenizer->TokenToId(""), 5);
    EXPECT_EQ(tokenizer->IdToToken(5), "");
    EXPECT_EQ(tokenizer->IdToToken(950), "r");
    EXPECT_EQ(tokenizer->TokenToId("r"), 950);
    EXPECT_EQ(tokenizer->IdToToken(4999), "");
    EXPECT_EQ(tokenizer->IdToToken(5000), "z");
    EXPECT_EQ(tokenizer->TokenToId("n" + nul + "x"), std::nullopt);
  }
  EXPECT_EQ((*from_data)->TokenToId("q"), 950);  // listed before "r" took its id
}

TEST(Tokenizer, TextBytesPerTokenIsAbsentWhereTextCanVanish) {
  const auto bound = [](const std::string& sections) {
    auto t = Tokenizer::FromJson(
        R"({"model": {"type": "BPE", "vocab": {"<unk>": 0, "a": 1, "abcdef": 2}, "merges": [], "unk_token": "<unk>")" +
            sections + "}",
        "inline.json");
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? (*t)->max_text_bytes_per_token() : std::optional<int64_t>(-1);
  };
  EXPECT_EQ(bound("}"), 6);
  EXPECT_EQ(bound(R"(}, "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"})"), 6);
  EXPECT_EQ(bound(R"(}, "normalizer": {"type": "NFKC"})"), 24);  // U+1D400 (4 bytes) -> "A"
  EXPECT_EQ(bound(R"(}, "normalizer": {"type": "Sequence", "normalizers": [{"type": "Strip"}, {"type": "NFC"}]})"),
            24);
  EXPECT_EQ(bound(R"(}, "normalizer": {"type": "StripAccents"})"), std::nullopt);
  EXPECT_EQ(bound(R"(}, "normalizer": {"type": "Replace", "pattern": {"String": "ab"}, "content": ""})"),
            std::nullopt);
  EXPECT_EQ(bound(R"(}, "pre_tokenizer": {"type": "Split", "pattern": {"String": "a"}, "behavior": "Removed"})"),
            std::nullopt);
  EXPECT_EQ(bound(R"(, "fuse_unk": true})"), std::nullopt);  // "<unk>" for any run of unknowns
  EXPECT_EQ(Tokenizer::NonWhitespaceBytes(" a\tb\n\u00e9\u3000\u2028x \xff"), 6);
}

// ---- Load errors name the file and the field ----

// Passes when the status message contains `needle`.
::testing::AssertionResult MessageHas(const absl::Status& status, const std::string& needle) {
  if (std::string(status.message()).find(needle) != std::string::npos)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "message \"" << status.message() << "\" lacks \"" << needle << "\"";
}

absl::Status LoadError(const std::string& json, const std::string& config = "") {
  auto tokenizer = Tokenizer::FromJson(json, "my/tokenizer.json", config);
  EXPECT_FALSE(tokenizer.ok());
  return tokenizer.status();
}

constexpr char kMinimalModel[] =
    R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";

TEST(TokenizerErrors, MalformedJson) {
  const absl::Status status = LoadError(R"({"model": {"type": "BPE",)");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(status, "my/tokenizer.json: invalid JSON"));
}

TEST(TokenizerErrors, MissingModelSection) {
  const absl::Status status = LoadError(R"({"version": "1.0", "normalizer": null})");
  EXPECT_TRUE(MessageHas(status, "my/tokenizer.json"));
  EXPECT_TRUE(MessageHas(status, "\"model\""));
}

TEST(TokenizerErrors, UnsupportedModelType) {
  const absl::Status status = LoadError(R"({"model": {"type": "Unigram", "vocab": []}})");
  EXPECT_TRUE(
      MessageHas(status, "my/tokenizer.json: model.type: unsupported model type \"Unigram\""));
}

TEST(TokenizerErrors, UnsupportedPreTokenizerType) {
  const absl::Status status =
      LoadError(std::string(R"({"pre_tokenizer": {"type": "Whitespace"}, )") + kMinimalModel + "}");
  EXPECT_TRUE(MessageHas(
      status, "my/tokenizer.json: pre_tokenizer: unsupported pre_tokenizer type \"Whitespace\""));
}

TEST(TokenizerErrors, UnsupportedNestedNormalizerNamesItsPath) {
  const absl::Status status = LoadError(
      std::string(
          R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Precompiled"}]}, )") +
      kMinimalModel + "}");
  EXPECT_TRUE(MessageHas(
      status,
      "my/tokenizer.json: normalizer.normalizers[1]: unsupported normalizer type \"Precompiled\""));
}

TEST(TokenizerErrors, UnsupportedDecoderAndPostProcessor) {
  EXPECT_TRUE(MessageHas(
      LoadError(std::string(R"({"decoder": {"type": "WordPiece"}, )") + kMinimalModel + "}"),
      "decoder: unsupported decoder type \"WordPiece\""));
  EXPECT_TRUE(MessageHas(
      LoadError(std::string(R"({"post_processor": {"type": "Foo"}, )") + kMinimalModel + "}"),
      "post_processor: unsupported post_processor type \"Foo\""));
}

TEST(TokenizerErrors, MergeWithUnknownToken) {
  const absl::Status status =
      LoadError(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "zz"]]}})");
  EXPECT_TRUE(
      MessageHas(status, "my/tokenizer.json: model.merges[0]: token \"zz\" is not in model.vocab"));
}

TEST(TokenizerErrors, BadRegexNamesThePattern) {
  const absl::Status status = LoadError(
      std::string(
          R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated", "invert": false}, )") +
      kMinimalModel + "}");
  EXPECT_TRUE(MessageHas(status, "pre_tokenizer.pattern: cannot compile regex \"(unclosed\""));
}

TEST(TokenizerErrors, DropoutIsRejected) {
  const absl::Status status =
      LoadError(R"({"model": {"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []}})");
  EXPECT_TRUE(MessageHas(status, "model.dropout"));
}

TEST(TokenizerErrors, ConfigNamesAnUnknownBosToken) {
  const absl::Status status =
      LoadError(std::string("{") + kMinimalModel + "}", R"({"bos_token": "<nope>"})");
  EXPECT_TRUE(MessageHas(status, "tokenizer_config.json: bos_token: \"<nope>\" is not a token"));
}

TEST(TokenizerErrors, MissingFile) {
  auto tokenizer = Tokenizer::FromFile("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(tokenizer.status(), "/nonexistent/dir/tokenizer.json"));
}

// ---- Internals whose behaviour the fixtures exercise only indirectly ----

TEST(TokenizerUnicode, Utf8LossyReplacesMaximalInvalidSubsequences) {
  using tokenizer_internal::Utf8Lossy;
  EXPECT_EQ(Utf8Lossy("ok"), "ok");
  EXPECT_EQ(Utf8Lossy("\xE4\xBD"), "\xEF\xBF\xBD");  // truncated 3-byte
  EXPECT_EQ(Utf8Lossy("\xE4\xBD"
                      "a"),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(Utf8Lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // two stray bytes
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(TokenizerRegex, FollowsOnigurumaSemantics) {
  using tokenizer_internal::TokenizerRegex;
  // \s includes U+0085 (NEL), as Oniguruma's does.
  auto space = TokenizerRegex::Compile(R"(\s+)");
  ASSERT_TRUE(space.ok());
  EXPECT_EQ((*space)
                ->FindAll("a\xC2\x85"
                          "b")
                .size(),
            1u);
  // Empty matches: none right after a match, the search moves on one character.
  auto star = TokenizerRegex::Compile("x*");
  ASSERT_TRUE(star.ok());
  const std::vector<tokenizer_internal::MatchRange> expected = {{0, 0}, {1, 1}, {2, 4}, {5, 5}};
  EXPECT_EQ((*star)->FindAll("abxxc"), expected);
  // `$` is a line anchor (Ruby syntax).
  auto eol = TokenizerRegex::Compile("b$");
  ASSERT_TRUE(eol.ok());
  EXPECT_EQ((*eol)->FindAll("ab\nab").size(), 2u);
  // A literal pattern matches regex metacharacters verbatim.
  auto literal = TokenizerRegex::CompileLiteral("a.b(");
  ASSERT_TRUE(literal.ok());
  EXPECT_EQ((*literal)->FindAll("axb( a.b("),
            std::vector<tokenizer_internal::MatchRange>({{5, 9}}));
}

}  // namespace
}  // namespace tpserve
