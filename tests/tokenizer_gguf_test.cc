// Tests for coordinator/text/tokenizer_gguf.h: tokenizers built from GGUF metadata against what
// transformers makes of the same files (AutoTokenizer.from_pretrained(dir, gguf_file=...)):
// the vocab-only fixtures of tools/make_gguf_tokenizer_fixtures.py (tests/fixtures/gguf/
// tokenizers/<family>/), the real Gemma 3 270M file when TPSERVE_REAL_GGUF names it, and the
// errors for files it does not support.
#include "coordinator/text/tokenizer_gguf.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/fixture_files.h"

namespace tpserve {
namespace {

using Json = nlohmann::json;

// Printable form of a sample for failure messages.
std::string Show(const std::string& text) { return Json(text).dump(); }

std::vector<int32_t> Ids(const Json& j) { return j.get<std::vector<int32_t>>(); }

// The end-of-turn tokens each fixture's family adds to eos_ids (GgufTokenizerFiles), and
// whether each is special (Gemma 4's converter writes <|tool_response> USER_DEFINED).
const std::map<std::string, std::vector<std::pair<std::string, bool>>>& EndOfTurnTokens() {
  static const auto* const tokens =
      new std::map<std::string, std::vector<std::pair<std::string, bool>>>{
          {"gemma3", {{"<end_of_turn>", true}}},
          {"gemma4", {{"<turn|>", true}, {"<|tool_response>", false}}},
          {"llama", {}},
          {"llama3", {{"<|eot_id|>", true}, {"<|eom_id|>", true}, {"<|end_of_text|>", true}}},
          {"qwen2", {{"<|im_end|>", true}, {"<|endoftext|>", true}}},
      };
  return *tokens;
}

class GgufFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // The vocabulary arrays held back, read only by the tokenizer, as a real file's are (the
    // fixtures' are below GgufOpenOptions' default).
    auto file = GgufFile::Open(Fixture("gguf/tokenizers/" + GetParam() + "/tokenizer.gguf"),
                               GgufOpenOptions{.held_array_elements = 16});
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = std::move(file).value();
    ASSERT_EQ(file_->Find("tokenizer.ggml.tokens"), nullptr);
    auto tokenizer = TokenizerFromGguf(*file_);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(tokenizer).value();
    reference_ =
        Json::parse(ReadFile(Fixture("gguf/tokenizers/" + GetParam() + "/reference.json")));
    ASSERT_GT(reference_["samples"].size(), 80u);
  }
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Json reference_;
};

TEST_P(GgufFixtureTest, EncodeMatchesTransformers) {
  for (const Json& sample : reference_["samples"]) {
    const std::string text = sample["text"];
    EXPECT_EQ(tokenizer_->Encode(text, true), Ids(sample["ids_with_special"]))
        << "text: " << Show(text);
    EXPECT_EQ(tokenizer_->Encode(text, false), Ids(sample["ids_without_special"]))
        << "text: " << Show(text);
  }
}

TEST_P(GgufFixtureTest, DecodeMatchesTransformers) {
  for (const Json& sample : reference_["samples"]) {
    const auto ids = Ids(sample["ids_with_special"]);
    EXPECT_EQ(tokenizer_->Decode(ids, false), sample["decoded"].get<std::string>())
        << "text: " << Show(sample["text"]);
    EXPECT_EQ(tokenizer_->Decode(ids, true), sample["decoded_skip_special"].get<std::string>())
        << "text: " << Show(sample["text"]);
  }
}

TEST_P(GgufFixtureTest, SpecialTokensMatchTransformers) {
  EXPECT_EQ(tokenizer_->vocab_size(), reference_["vocab_size"].get<int32_t>());
  EXPECT_EQ(tokenizer_->bos_id(), reference_["bos_id"].get<int32_t>());
  ASSERT_FALSE(tokenizer_->eos_ids().empty());
  EXPECT_EQ(tokenizer_->eos_ids()[0], reference_["eos_id"].get<int32_t>());
  for (const Json& added : reference_["added_tokens"]) {
    const int32_t id = added[0];
    const std::string content = added[1];
    EXPECT_EQ(tokenizer_->TokenToId(content), id) << Show(content);
    EXPECT_EQ(tokenizer_->IsSpecial(id), added[2].get<bool>()) << Show(content);
  }
  EXPECT_FALSE(tokenizer_->IsSpecial(tokenizer_->Encode("a", false).at(0)));
}

// eos_ids: the file's eos_token_id, then the family's end-of-turn control tokens.
TEST_P(GgufFixtureTest, EosIdsAddTheFamilysEndOfTurnTokens) {
  std::vector<int32_t> expected = {reference_["eos_id"].get<int32_t>()};
  for (const auto& [name, special] : EndOfTurnTokens().at(GetParam())) {
    const auto id = tokenizer_->TokenToId(name);
    ASSERT_TRUE(id.has_value()) << name;
    ASSERT_EQ(tokenizer_->IsSpecial(*id), special) << name;
    if (std::find(expected.begin(), expected.end(), *id) == expected.end()) expected.push_back(*id);
  }
  EXPECT_EQ(tokenizer_->eos_ids(), expected);
}

// The conversion as files is transformers' tokenizer.json (as far as the reference records it),
// and Tokenizer::FromJson of the files is the same tokenizer as TokenizerFromGguf.
TEST_P(GgufFixtureTest, FilesMatchTransformersConversion) {
  auto files = GgufTokenizerFilesFromMetadata(*file_->MetadataWithLargeArrays(), file_->path());
  ASSERT_TRUE(files.ok()) << files.status();
  const Json tokenizer_json = Json::parse(files->tokenizer_json);
  const Json& model = tokenizer_json["model"];
  EXPECT_EQ(model["vocab"].size(), reference_["model_vocab_count"].get<size_t>());
  const Json& merges = model["merges"];
  ASSERT_EQ(merges.size(), reference_["merges_count"].get<size_t>());
  const Json& head = reference_["merges_head"];
  for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(merges[i], head[i]) << "merge " << i;
  const Json& tail = reference_["merges_tail"];
  for (size_t i = 0; i < tail.size(); ++i) {
    EXPECT_EQ(merges[merges.size() - tail.size() + i], tail[i])
        << "merge " << merges.size() - tail.size() + i;
  }
  Json added = Json::array();
  for (const Json& t : tokenizer_json["added_tokens"])
    added.push_back({t["id"], t["content"], t["special"]});
  EXPECT_EQ(added, reference_["added_tokens"]);

  auto from_files =
      Tokenizer::FromJson(files->tokenizer_json, "converted.json", files->tokenizer_config_json,
                          files->generation_config_json);
  ASSERT_TRUE(from_files.ok()) << from_files.status();
  EXPECT_EQ((*from_files)->eos_ids(), tokenizer_->eos_ids());
  EXPECT_EQ((*from_files)->bos_id(), tokenizer_->bos_id());
  EXPECT_EQ((*from_files)->vocab_size(), tokenizer_->vocab_size());
  for (const Json& sample : reference_["samples"]) {
    const std::string text = sample["text"];
    EXPECT_EQ((*from_files)->Encode(text, true), tokenizer_->Encode(text, true))
        << "text: " << Show(text);
  }
}

TEST_P(GgufFixtureTest, ChatTemplateIsCarried) {
  const auto chat_template = GgufChatTemplate(file_->metadata(), file_->path());
  ASSERT_TRUE(chat_template.ok()) << chat_template.status();
  if (reference_["chat_template"].is_null()) {
    EXPECT_FALSE(chat_template->has_value());
  } else {
    EXPECT_EQ(*chat_template, reference_["chat_template"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GgufFixtureTest,
                         ::testing::Values("gemma3", "gemma4", "llama", "llama3", "qwen2"),
                         [](const auto& info) { return info.param; });

// The gemma3 fixture spells "▁▁" twice (the user-defined "  " at 18, then a normal "▁▁"): as in
// the Python dict transformers builds, the later id wins and the earlier one decodes to nothing.
TEST(GgufTokenizer, ATokenSpelledTwiceKeepsItsLastId) {
  auto file = GgufFile::Open(Fixture("gguf/tokenizers/gemma3/tokenizer.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  auto tokenizer = TokenizerFromGguf(**file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const int32_t last = (*tokenizer)->vocab_size() - 1;
  EXPECT_EQ((*tokenizer)->TokenToId("\u2581\u2581"), last);
  EXPECT_EQ((*tokenizer)->IdToToken(18), "");
  EXPECT_EQ((*tokenizer)->Encode("  ", false), std::vector<int32_t>{last});
}

// The gemma4 fixture says add_bos_token true, as llama.cpp's converter writes it; transformers
// adds no BOS to a "gemma4" vocabulary, and neither does the tokenizer built here. eos_ids are
// <eos>, <turn|> and <|tool_response>, Gemma 4's generation_config.json's.
TEST(GgufTokenizer, Gemma4AddsNoBosAndStopsAtTheEndOfTurn) {
  auto file = GgufFile::Open(Fixture("gguf/tokenizers/gemma4/tokenizer.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->metadata().at("tokenizer.ggml.add_bos_token"), true);
  auto tokenizer = TokenizerFromGguf(**file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->bos_id(), 2);
  EXPECT_EQ((*tokenizer)->Encode("Hello world", true), (*tokenizer)->Encode("Hello world", false));
  EXPECT_NE((*tokenizer)->Encode("Hello world", true).at(0), 2);
  EXPECT_EQ((*tokenizer)->TokenToId("<turn|>"), 9);
  EXPECT_EQ((*tokenizer)->TokenToId("<|tool_response>"), 7);
  EXPECT_EQ((*tokenizer)->eos_ids(), (std::vector<int32_t>{1, 9, 7}));
}

// The real Gemma 3 270M file (262,144 tokens, 514,906 derived merges): set TPSERVE_REAL_GGUF to
// its path (~/.cache/tpserve/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf).
TEST(GgufTokenizer, RealGemma3MatchesTransformers) {
  const char* path = std::getenv("TPSERVE_REAL_GGUF");
  if (path == nullptr || !std::filesystem::exists(path)) {
    GTEST_SKIP() << "set TPSERVE_REAL_GGUF to the Gemma 3 270M GGUF file to run this test";
  }
  const Json reference =
      Json::parse(ReadFile(Fixture("gguf/gemma3_270m_tokenizer_reference.json")));
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const auto start = std::chrono::steady_clock::now();
  auto tokenizer = TokenizerFromGguf(**file);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::cout << "TokenizerFromGguf(" << path << "): " << seconds << " s\n";
  ::testing::Test::RecordProperty("build_seconds", std::to_string(seconds));
  // transformers takes ~80 s; a quadratic slip here would take minutes.
  EXPECT_LT(seconds, 20.0);
  EXPECT_EQ((*tokenizer)->vocab_size(), reference["vocab_size"].get<int32_t>());
  EXPECT_EQ((*tokenizer)->bos_id(), reference["bos_id"].get<int32_t>());
  // <eos>, then <end_of_turn> as Gemma 3's generation_config.json has it.
  EXPECT_EQ((*tokenizer)->eos_ids(), (std::vector<int32_t>{1, 106}));
  for (const Json& sample : reference["samples"]) {
    const std::string text = sample["text"];
    const auto ids = Ids(sample["ids_with_special"]);
    EXPECT_EQ((*tokenizer)->Encode(text, true), ids) << "text: " << Show(text);
    EXPECT_EQ((*tokenizer)->Encode(text, false), Ids(sample["ids_without_special"]))
        << "text: " << Show(text);
    EXPECT_EQ((*tokenizer)->Decode(ids, false), sample["decoded"].get<std::string>())
        << "text: " << Show(text);
    EXPECT_EQ((*tokenizer)->Decode(ids, true), sample["decoded_skip_special"].get<std::string>())
        << "text: " << Show(text);
  }
}

// A small "llama" (Llama 2 style) vocabulary, to break one key at a time.
GgufMetadata SmallLlama() {
  GgufMetadata m;
  m["general.architecture"] = "llama";
  m["tokenizer.ggml.model"] = "llama";
  m["tokenizer.ggml.pre"] = "default";
  m["tokenizer.ggml.tokens"] = {"<unk>", "<s>",     "</s>", "\u2581",  "a",
                                "b",     "\u2581a", "ab",   "\u2581ab"};
  m["tokenizer.ggml.scores"] = {0.0, 0.0, 0.0, -5.0, -6.0, -7.0, -1.0, -2.0, -3.0};
  m["tokenizer.ggml.token_type"] = {2, 3, 3, 1, 1, 1, 1, 1, 1};
  m["tokenizer.ggml.bos_token_id"] = 1;
  m["tokenizer.ggml.eos_token_id"] = 2;
  m["tokenizer.ggml.unknown_token_id"] = 0;
  return m;
}

// The error for `metadata`, or "" when it converts.
std::string ErrorOf(const GgufMetadata& metadata) {
  const auto tokenizer = TokenizerFromGgufMetadata(metadata, "model.gguf");
  return tokenizer.ok() ? "" : std::string(tokenizer.status().message());
}

TEST(GgufTokenizer, SmallLlamaVocabularyConverts) {
  const auto tokenizer = TokenizerFromGgufMetadata(SmallLlama(), "model.gguf");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  // Merges ranked by score: "▁a" (-1) first, then "ab" (-2), then "▁ab" (-3) from "▁a"+"b"
  // (the longer left part first) or "▁"+"ab".
  EXPECT_EQ((*tokenizer)->Encode("ab ab", true), (std::vector<int32_t>{1, 8, 8}));
  EXPECT_EQ((*tokenizer)->Decode({1, 8, 8}, true), "ab ab");
  EXPECT_EQ((*tokenizer)->eos_ids(), (std::vector<int32_t>{2}));
}

// Merges derived from tokens of equal score (and equal part lengths) rank in file order, as
// Python's stable sort leaves them: "bc" before "ab" makes "abc" a + bc.
TEST(GgufTokenizer, EqualScoresRankDerivedMergesInFileOrder) {
  GgufMetadata m = SmallLlama();
  m["tokenizer.ggml.tokens"] = {"<unk>", "<s>", "</s>", "\u2581", "a", "b", "c", "bc", "ab"};
  m["tokenizer.ggml.scores"] = {0.0, 0.0, 0.0, -5.0, -6.0, -7.0, -8.0, -1.0, -1.0};
  m["tokenizer.ggml.token_type"] = {2, 3, 3, 1, 1, 1, 1, 1, 1};
  auto tokenizer = TokenizerFromGgufMetadata(m, "model.gguf");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->Encode("abc", false), (std::vector<int32_t>{3, 4, 7}));
  m["tokenizer.ggml.tokens"][7] = "ab";
  m["tokenizer.ggml.tokens"][8] = "bc";
  tokenizer = TokenizerFromGgufMetadata(m, "model.gguf");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->Encode("abc", false), (std::vector<int32_t>{3, 7, 6}));
}

// A small "gemma4" vocabulary as llama.cpp's converter writes one: scores -1000, merges.
GgufMetadata SmallGemma4() {
  GgufMetadata m;
  m["general.architecture"] = "gemma4";
  m["tokenizer.ggml.model"] = "gemma4";
  m["tokenizer.ggml.tokens"] = {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "\u2581",
                                "a",     "b",     "c",     "bc",    "ab"};
  m["tokenizer.ggml.scores"] = std::vector<double>(11, -1000.0);
  m["tokenizer.ggml.token_type"] = {3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1};
  m["tokenizer.ggml.merges"] = {"a b", "b c"};
  m["tokenizer.ggml.bos_token_id"] = 2;
  m["tokenizer.ggml.eos_token_id"] = 1;
  m["tokenizer.ggml.unknown_token_id"] = 3;
  m["tokenizer.ggml.padding_token_id"] = 0;
  m["tokenizer.ggml.add_bos_token"] = true;
  return m;
}

// Gemma 4's merges are the file's, in the file's order (Gemma 1-3's are derived from the token
// order); without them they are derived ranked by the scores, as transformers' get_merges does.
TEST(GgufTokenizer, Gemma4MergesAreTheFilesOrRankedByScore) {
  GgufMetadata m = SmallGemma4();
  auto tokenizer = TokenizerFromGgufMetadata(m, "model.gguf");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->Encode("abc", true), (std::vector<int32_t>{10, 8}));  // ab + c
  EXPECT_EQ((*tokenizer)->Decode({10, 8}, false), "abc");
  m.erase("tokenizer.ggml.merges");
  m["tokenizer.ggml.scores"][9] = -1.0;  // "bc" above "ab"
  m["tokenizer.ggml.scores"][10] = -2.0;
  tokenizer = TokenizerFromGgufMetadata(m, "model.gguf");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->Encode("abc", true), (std::vector<int32_t>{6, 9}));  // a + bc
}

TEST(GgufTokenizer, Gemma4VocabularyNeedsTheGemma4Architecture) {
  GgufMetadata m = SmallGemma4();
  m["general.architecture"] = "gemma3";
  std::string error = ErrorOf(m);
  EXPECT_NE(error.find("model.gguf: general.architecture: \"gemma3\" with tokenizer.ggml.model "
                       "\"gemma4\" is not supported"),
            std::string::npos)
      << error;
  m = SmallGemma4();
  m["tokenizer.ggml.pre"] = "llama-bpe";
  error = ErrorOf(m);
  EXPECT_NE(error.find("model.gguf: tokenizer.ggml.pre: \"llama-bpe\" is not supported with "
                       "tokenizer.ggml.model \"gemma4\""),
            std::string::npos)
      << error;
  for (const char* pre : {"default", "gemma4"}) {
    m["tokenizer.ggml.pre"] = pre;
    EXPECT_EQ(ErrorOf(m), "") << pre;
  }
}

TEST(GgufTokenizer, UnsupportedTokenizerModelIsAnErrorListingTheSupportedOnes) {
  GgufMetadata m = SmallLlama();
  m["tokenizer.ggml.model"] = "t5";
  const std::string error = ErrorOf(m);
  EXPECT_NE(error.find("model.gguf: tokenizer.ggml.model: \"t5\" is not supported"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("\"gpt2\""), std::string::npos) << error;
  EXPECT_NE(error.find("\"llama\""), std::string::npos) << error;
  EXPECT_NE(error.find("\"gemma4\""), std::string::npos) << error;
}

TEST(GgufTokenizer, UnknownPreTokenizerIsAnError) {
  GgufMetadata m = SmallLlama();
  m["tokenizer.ggml.model"] = "gpt2";
  m["tokenizer.ggml.pre"] = "deepseek-llm";
  m["tokenizer.ggml.merges"] = Json::array();
  std::string error = ErrorOf(m);
  EXPECT_NE(error.find("tokenizer.ggml.pre: \"deepseek-llm\" is not supported"), std::string::npos)
      << error;
  EXPECT_NE(error.find("\"llama-bpe\""), std::string::npos) << error;
  m.erase("tokenizer.ggml.pre");
  error = ErrorOf(m);
  EXPECT_NE(error.find("tokenizer.ggml.pre: missing"), std::string::npos) << error;
  m = SmallLlama();
  m["tokenizer.ggml.pre"] = "llama-bpe";  // a byte-level name on a SentencePiece vocabulary
  error = ErrorOf(m);
  EXPECT_NE(
      error.find(
          "tokenizer.ggml.pre: \"llama-bpe\" is not supported with tokenizer.ggml.model \"llama\""),
      std::string::npos)
      << error;
}

TEST(GgufTokenizer, UnsupportedArchitectureIsAnError) {
  GgufMetadata m = SmallLlama();
  m["general.architecture"] = "phi3";  // transformers gives Phi-3 its own normalizer
  const std::string error = ErrorOf(m);
  EXPECT_NE(error.find("general.architecture: \"phi3\""), std::string::npos) << error;
}

TEST(GgufTokenizer, MissingOrMalformedVocabularyIsAnError) {
  GgufMetadata m = SmallLlama();
  m.erase("tokenizer.ggml.model");
  EXPECT_NE(ErrorOf(m).find("tokenizer.ggml.model: missing: the file carries no tokenizer"),
            std::string::npos)
      << ErrorOf(m);
  m = SmallLlama();
  m.erase("tokenizer.ggml.tokens");
  EXPECT_NE(ErrorOf(m).find("model.gguf: tokenizer.ggml.tokens: missing"), std::string::npos)
      << ErrorOf(m);
  m = SmallLlama();
  m["tokenizer.ggml.tokens"][4] = 7;
  EXPECT_NE(ErrorOf(m).find("tokenizer.ggml.tokens: entry 4 is not a string"), std::string::npos)
      << ErrorOf(m);
  m = SmallLlama();
  m["tokenizer.ggml.tokens"][4] = "\xff";
  EXPECT_NE(ErrorOf(m).find("entry 4 is not valid UTF-8"), std::string::npos) << ErrorOf(m);
  m = SmallLlama();
  m["tokenizer.ggml.scores"].erase(0);
  EXPECT_NE(ErrorOf(m).find("tokenizer.ggml.scores: expected an array of 9 numbers"),
            std::string::npos)
      << ErrorOf(m);
  m = SmallLlama();
  m.erase("tokenizer.ggml.scores");  // nothing to rank derived merges by
  EXPECT_NE(ErrorOf(m).find("tokenizer.ggml.scores: missing"), std::string::npos) << ErrorOf(m);
  m = SmallLlama();
  m["tokenizer.ggml.eos_token_id"] = 9;
  EXPECT_NE(
      ErrorOf(m).find(
          "tokenizer.ggml.eos_token_id: 9 is not a token id (tokenizer.ggml.tokens has 9 tokens)"),
      std::string::npos)
      << ErrorOf(m);
  m = SmallLlama();
  m["tokenizer.ggml.add_bos_token"] = "yes";
  EXPECT_NE(ErrorOf(m).find("tokenizer.ggml.add_bos_token: expected a bool"), std::string::npos)
      << ErrorOf(m);
}

TEST(GgufTokenizer, BadMergesAreAnError) {
  GgufMetadata m = SmallLlama();
  m["general.architecture"] = "qwen2";
  m["tokenizer.ggml.model"] = "gpt2";
  m["tokenizer.ggml.pre"] = "qwen2";
  EXPECT_NE(ErrorOf(m).find("tokenizer.ggml.merges: missing"), std::string::npos) << ErrorOf(m);
  m["tokenizer.ggml.merges"] = {"a b", "ab"};
  EXPECT_NE(ErrorOf(m).find(
                "tokenizer.ggml.merges: entry 1 \"ab\" is not two tokens separated by one space"),
            std::string::npos)
      << ErrorOf(m);
  m["tokenizer.ggml.merges"] = {"a b", "b a"};
  EXPECT_NE(ErrorOf(m).find("entry 1 \"b a\": \"ba\" is not in tokenizer.ggml.tokens"),
            std::string::npos)
      << ErrorOf(m);
  m["tokenizer.ggml.merges"] = {"a b"};
  EXPECT_EQ(ErrorOf(m), "");
}

TEST(GgufTokenizer, ChatTemplateMustBeAString) {
  GgufMetadata m = SmallLlama();
  EXPECT_FALSE(GgufChatTemplate(m, "model.gguf")->has_value());
  m["tokenizer.chat_template"] = 3;
  const auto chat_template = GgufChatTemplate(m, "model.gguf");
  ASSERT_FALSE(chat_template.ok());
  EXPECT_NE(chat_template.status().message().find("tokenizer.chat_template: expected a string"),
            std::string::npos);
  EXPECT_NE(ErrorOf(m), "");
}

}  // namespace
}  // namespace tpserve
