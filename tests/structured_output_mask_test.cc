// Tests for coordinator/structured/ token masks: TokenBytesTable against the tokenizer
// fixtures (token_vocabulary.h), the vocabulary trie, FillNextTokenMask against brute
// force over random walks whose outputs must parse and validate (token_matcher.h), and
// the compiled-grammar cache (grammar_compiler.h).
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/structured/grammar_compiler.h"
#include "coordinator/structured/json_schema.h"
#include "coordinator/structured/token_matcher.h"
#include "coordinator/structured/token_vocabulary.h"
#include "coordinator/text/tokenizer.h"
#include "coordinator/text/tokenizer_gguf.h"
#include "coordinator/text/tokenizer_unicode.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/fixture_files.h"
#include "tests/json_schema_validator.h"
#include "worker/gguf_file.h"

namespace tpserve {
namespace {

using Json = nlohmann::json;

// EOS (id 0), a special token (1), every single byte (2 + b), then multi-byte tokens that
// span structural characters, partial UTF-8 and whitespace runs, one of them twice.
std::shared_ptr<const TokenVocabulary> SyntheticVocabulary() {
  VocabularyBytes v;
  v.bytes = {"", "<special>"};
  v.kinds = {TokenKind::kEos, TokenKind::kNever};
  for (int b = 0; b < 256; ++b) {
    v.bytes.emplace_back(1, static_cast<char>(b));
    v.kinds.push_back(TokenKind::kText);
  }
  for (const char* t : {"{\"",
                        "\"}",
                        "\":\"",
                        "\": \"",
                        "\",\"",
                        "\", \"",
                        "\"},",
                        "},{",
                        "[{",
                        "}]",
                        "]}",
                        "\"]",
                        "[\"",
                        "true",
                        "false",
                        "null",
                        "nu",
                        "ll",
                        "12",
                        "3.",
                        ".5",
                        "e+",
                        "E-1",
                        "-0",
                        "00",
                        "\\u",
                        "\\n",
                        "\\\"",
                        "ab",
                        "ab",
                        "abc",
                        "name",
                        "\"name\"",
                        "\"name\": \"",
                        "age",
                        "\xC3\xA9",
                        "\xE2\x82",
                        "\x82\xAC",
                        "\xF0\x9F\x98\x80",
                        "\n  ",
                        "  ",
                        "    ",
                        " \"",
                        "a\"",
                        "\"a",
                        "b\"}",
                        "\"x\"",
                        "1,",
                        "1}",
                        "1]",
                        ",\"",
                        "[]",
                        "{}",
                        "{ }",
                        "\"\"",
                        "\": ",
                        "\", ",
                        "}\n",
                        "ud83d",
                        "\\ud83d\\ude00",
                        "kind",
                        "\"kind\":\"a\"",
                        "children",
                        "value\":",
                        "\"value\": 1"}) {
    v.bytes.emplace_back(t);
    v.kinds.push_back(TokenKind::kText);
  }
  v.bytes.emplace_back("");  // a text token without bytes: never allowed
  v.kinds.push_back(TokenKind::kText);
  return TokenVocabulary::Create(std::move(v));
}

// Exactly the tokens whose bytes the byte matcher accepts (EOS when it can end).
void ExpectMaskIsExact(const TokenMatcher& matcher, const BitMask& mask, const std::string& context) {
  const TokenVocabulary& vocab = matcher.compiled().vocabulary();
  for (int32_t id = 0; id < vocab.size(); ++id) {
    bool allowed = false;
    if (vocab.kind(id) == TokenKind::kEos) {
      allowed = matcher.CanEnd();
    } else if (vocab.kind(id) == TokenKind::kText) {
      GrammarMatcher copy = matcher.byte_matcher();
      allowed = copy.AdvanceBytes(vocab.bytes(id));
    }
    ASSERT_EQ(mask.Test(id), allowed) << "token " << id << " "
                                      << Json(tokenizer_internal::Utf8Lossy(vocab.bytes(id))).dump() << " after "
                                      << Json(tokenizer_internal::Utf8Lossy(context)).dump();
  }
}

// Random walks over the mask: the mask equals brute force at every step, every state has
// a completion, and the finished output parses and validates.
void RandomWalks(const std::string& schema_text, const std::shared_ptr<const TokenVocabulary>& vocab, int walks,
                 int budget, bool brute_force, uint32_t seed) {
  SCOPED_TRACE(schema_text);
  auto grammar = GrammarFromJsonSchemaText(schema_text);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  const auto compiled = CompiledGrammar::Create(*grammar, vocab);
  const Json schema = Json::parse(schema_text);
  const testing_json::SchemaValidator validator(schema);
  std::mt19937 rng(seed);
  BitMask mask;
  for (int walk = 0; walk < walks; ++walk) {
    TokenMatcher matcher(compiled);
    std::string out;
    for (int step = 0; step < 10 * budget + 1000; ++step) {
      FillNextTokenMask(matcher, &mask);
      if (brute_force) {
        ExpectMaskIsExact(matcher, mask, out);
        if (::testing::Test::HasFatalFailure()) return;
      }
      GrammarMatcher probe = matcher.byte_matcher();
      const std::string completion = probe.ShortestCompletion();
      ASSERT_TRUE(probe.AdvanceBytes(completion) && probe.CanEnd()) << "no completion after " << out;
      std::vector<int32_t> allowed, multi;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if (!mask.Test(id)) continue;
        allowed.push_back(id);
        if (vocab->bytes(id).size() > 1) multi.push_back(id);
      }
      ASSERT_FALSE(allowed.empty()) << "empty mask after " << out;
      int32_t pick;
      if (step >= budget) {  // finish: EOS, or a token that keeps to the shortest completion
        pick = -1;
        if (matcher.CanEnd()) pick = vocab->eos_ids()[0];
        for (size_t i = 0; pick < 0 && i < allowed.size(); ++i) {
          const std::string_view b = vocab->bytes(allowed[i]);
          if (!b.empty() && completion.compare(0, b.size(), b) == 0) pick = allowed[i];
        }
        ASSERT_GE(pick, 0) << "the mask refuses the shortest completion " << completion << " after " << out;
      } else if (matcher.CanEnd() && rng() % 3 == 0) {
        pick = vocab->eos_ids()[0];
      } else if (!multi.empty() && rng() % 2 == 0) {
        pick = multi[rng() % multi.size()];
      } else {
        pick = allowed[rng() % allowed.size()];
      }
      ASSERT_TRUE(matcher.AcceptToken(pick)) << pick;
      if (vocab->kind(pick) == TokenKind::kEos) break;
      out += vocab->bytes(pick);
    }
    ASSERT_TRUE(matcher.IsTerminated()) << out;
    const Json parsed = Json::parse(out, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << "does not parse: " << out;
    if (schema.is_object() && schema.contains("type") && schema["type"] == "json_object") {
      EXPECT_TRUE(parsed.is_object()) << out;
    } else {
      EXPECT_EQ(validator.Check(parsed), "") << out;
    }
    // After EOS only EOS is allowed.
    FillNextTokenMask(matcher, &mask);
    EXPECT_EQ(mask.Count(), static_cast<int32_t>(vocab->eos_ids().size()));
  }
}

const char* const kWalkSchemas[] = {
    R"({"type": "json_object"})",
    R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}, "required": ["name"]})",
    R"({"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 4})",
    R"({"enum": ["ab", "abc", "name", 12, null, true, {"a": [1]}]})",
    R"({"type": "object", "properties": {"s": {"type": "string", "minLength": 1, "maxLength": 4},
        "p": {"type": "string", "pattern": "^[a-c]+\\.[0-9]{2}$"}, "u": {"type": ["string", "null"]}}, "required": ["s", "p"]})",
    R"({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind", "x"]},
                  {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "boolean"}}, "required": ["kind", "y"]}]})",
    R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["value"]}},
        "$ref": "#/$defs/node"})",
    R"({"type": "string"})",
    R"({"type": "number"})",
    R"({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "string", "pattern": "x+"}, {"type": "integer"}]})",
    // Longer than the synthetic vocabulary's longest token: far slots share token tables.
    R"({"type": "array", "items": {"type": "string", "minLength": 20, "maxLength": 40}, "maxItems": 2})",
};

TEST(TokenMaskTest, SyntheticVocabularyRandomWalksMatchBruteForce) {
  const auto vocab = SyntheticVocabulary();
  uint32_t seed = 1;
  for (const char* schema : kWalkSchemas) RandomWalks(schema, vocab, 12, 40, /*brute_force=*/true, seed++);
}

// Tables filled by several threads are those one thread fills; equivalent states share them.
TEST(TokenMaskTest, ThreadedCompileMatchesSerialAndSharesTables) {
  const auto vocab = SyntheticVocabulary();
  auto grammar = GrammarFromJsonSchemaText(kWalkSchemas[std::size(kWalkSchemas) - 1]);
  ASSERT_TRUE(grammar.ok());
  const auto serial = CompiledGrammar::Create(*grammar, vocab, 1);
  const auto threaded = CompiledGrammar::Create(*grammar, vocab, 3);
  uint32_t positions = 0;
  for (uint32_t s = 0; s < (*grammar)->num_states(); ++s) {
    if (!(*grammar)->has_bytes(s)) continue;
    ++positions;
    const auto& a = serial->position(s);
    const auto& b = threaded->position(s);
    EXPECT_EQ(a.accepted_words, b.accepted_words);
    EXPECT_EQ(a.accepted_ids, b.accepted_ids);
    EXPECT_EQ(a.uncertain, b.uncertain);
    EXPECT_EQ(a.uncertain_lcp, b.uncertain_lcp);
  }
  EXPECT_LT(serial->num_tables(), positions / 2) << "the unrolled string slots should share tables";
}

TEST(TokenMaskTest, TrieCoversTheVocabularyInByteOrder) {
  const auto vocab = SyntheticVocabulary();
  const auto& trie = vocab->trie();
  EXPECT_EQ(trie[0].lo, 0u);
  EXPECT_EQ(trie[0].hi, vocab->num_sorted());
  EXPECT_EQ(trie[0].end, trie.size());
  for (uint32_t i = 1; i < vocab->num_sorted(); ++i) EXPECT_LE(vocab->sorted_bytes(i - 1), vocab->sorted_bytes(i));
  // Text tokens with bytes: 256 + the multi-byte list; EOS, the special and the empty one are out.
  EXPECT_EQ(vocab->num_sorted(), static_cast<uint32_t>(vocab->size() - 3));
  EXPECT_EQ(vocab->kind(vocab->size() - 1), TokenKind::kNever);
  // Each token ends at the node its bytes lead to.
  for (uint32_t i = 0; i < vocab->num_sorted(); ++i) {
    const std::string_view bytes = vocab->sorted_bytes(i);
    uint32_t node = 0;
    for (const char c : bytes) {
      uint32_t child = node + 1;
      while (child < trie[node].end && trie[child].byte != static_cast<uint8_t>(c)) child = trie[child].end;
      ASSERT_LT(child, trie[node].end);
      node = child;
    }
    EXPECT_GE(i, trie[node].lo);
    EXPECT_LT(i, trie[node].mid);
  }
}

std::unique_ptr<Tokenizer> LoadFixture(const std::string& name) {
  auto tokenizer = Tokenizer::FromFile(Fixture("tokenizers/" + name + "/tokenizer.json"));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

class TokenBytesTableTest : public ::testing::TestWithParam<std::string> {};

// Decode of a token sequence is the concatenation of the tokens' bytes (less the leading
// space Llama 2 and Mistral decoders drop from the first token).
TEST_P(TokenBytesTableTest, RoundTripsDecode) {
  const auto tokenizer = LoadFixture(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  auto table = TokenBytesTable(*tokenizer);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->bytes.size(), static_cast<size_t>(tokenizer->vocab_size()));
  const bool strips_first_space = GetParam() == "llama2" || GetParam() == "mistral";
  const Json reference = Json::parse(ReadFile(Fixture("tokenizers/" + GetParam() + "/reference.json")));
  int compared = 0;
  for (const Json& sample : reference["samples"]) {
    const std::vector<int32_t> ids = tokenizer->Encode(sample["text"].get<std::string>(), false);
    std::string concat;
    bool all_text = true;
    for (const int32_t id : ids) {
      all_text = all_text && table->kinds[id] == TokenKind::kText;
      concat += table->bytes[id];
    }
    if (!all_text) continue;
    std::string expected = concat;
    if (strips_first_space && !expected.empty() && expected[0] == ' ') expected.erase(0, 1);
    EXPECT_EQ(tokenizer->Decode(ids, false), expected) << Json(sample["text"]).dump();
    ++compared;
  }
  EXPECT_GT(compared, 50);
  // Every token alone, after an anchor: Decode writes its bytes (U+FFFD where they are
  // not whole characters, as byte tokens are).
  const int32_t anchor = *tokenizer->TokenToId("a");
  int partial = 0;
  for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
    if (tokenizer->IsSpecial(id)) {
      EXPECT_NE(table->kinds[id], TokenKind::kText) << id;
      continue;
    }
    if (table->kinds[id] != TokenKind::kText) continue;
    const int32_t pair[2] = {anchor, id};
    const std::string decoded = tokenizer->Decode(pair, false);
    EXPECT_EQ(decoded, tokenizer_internal::Utf8Lossy("a" + table->bytes[id])) << id << " " << tokenizer->IdToToken(id);
    partial += !tokenizer_internal::IsValidUtf8(table->bytes[id]);
  }
  if (GetParam() != "mistral") { EXPECT_GT(partial, 0) << "byte tokens should map to single bytes"; }
  for (const int32_t eos : tokenizer->eos_ids()) EXPECT_EQ(table->kinds[eos], TokenKind::kEos);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenBytesTableTest,
                         ::testing::Values("gemma", "llama3", "qwen2", "gpt2", "llama2", "mistral"));

// Random walks with real (small) vocabularies: Gemma's SentencePiece with byte fallback,
// Llama 3's byte-level BPE.
TEST(TokenMaskTest, FixtureTokenizersRandomWalksMatchBruteForce) {
  for (const char* name : {"gemma", "llama3"}) {
    SCOPED_TRACE(name);
    const auto tokenizer = LoadFixture(name);
    ASSERT_NE(tokenizer, nullptr);
    auto table = TokenBytesTable(*tokenizer);
    ASSERT_TRUE(table.ok()) << table.status();
    const auto vocab = TokenVocabulary::Create(std::move(*table));
    uint32_t seed = 100;
    for (const char* schema : {kWalkSchemas[0], kWalkSchemas[1], kWalkSchemas[4], kWalkSchemas[6]}) {
      RandomWalks(schema, vocab, 4, 30, /*brute_force=*/true, seed++);
    }
  }
}

TEST(GrammarCompilerTest, CachesByTextWithLeastRecentlyUsedEviction) {
  GrammarCompilerOptions options;
  options.cache_capacity = 2;
  GrammarCompiler compiler(SyntheticVocabulary(), options);
  const std::string a = R"({"type": "integer"})", b = R"({"type": "string"})", c = R"({"type": "boolean"})";
  auto ga = compiler.CompileJsonSchema(a);
  ASSERT_TRUE(ga.ok());
  EXPECT_EQ(*compiler.CompileJsonSchema(a), *ga);
  ASSERT_TRUE(compiler.CompileJsonSchema(b).ok());
  EXPECT_EQ(*compiler.CompileJsonSchema(a), *ga);   // a is now the most recent
  ASSERT_TRUE(compiler.CompileJsonSchema(c).ok());  // evicts b
  EXPECT_EQ(*compiler.CompileJsonSchema(a), *ga);
  const auto before = compiler.stats();
  ASSERT_TRUE(compiler.CompileJsonSchema(b).ok());
  EXPECT_EQ(compiler.stats().misses, before.misses + 1);
  EXPECT_EQ(compiler.stats().entries, 2u);
  // Errors are returned, not cached.
  EXPECT_FALSE(compiler.CompileJsonSchema(R"({"type": "integer", "minimum": 1})").ok());
  auto object = compiler.CompileJsonObject();
  ASSERT_TRUE(object.ok());
  EXPECT_EQ(*compiler.CompileJsonObject(), *object);
}

TEST(GrammarCompilerTest, ThreadsShareCompiledGrammars) {
  GrammarCompiler compiler(SyntheticVocabulary());
  const std::vector<std::string> schemas = {R"({"type": "integer"})",
                                            R"({"type": "array", "items": {"type": "string"}})",
                                            R"({"type": "object", "properties": {"a": {"type": "null"}}})"};
  std::vector<std::thread> threads;
  std::vector<std::vector<std::shared_ptr<const CompiledGrammar>>> got(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (const std::string& s : schemas) {
          auto g = compiler.CompileJsonSchema(s);
          if (g.ok()) got[t].push_back(*g);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& list : got) EXPECT_EQ(list.size(), 60u);
  EXPECT_EQ(compiler.stats().entries, 3u);
  // Once cached, every thread gets the same object.
  for (size_t i = 0; i < schemas.size(); ++i) {
    for (const auto& list : got) EXPECT_EQ(list[57 + i].get(), got[0][57 + i].get()) << schemas[i];
  }
}

// The real Gemma 3 vocabulary (262,144 tokens): set TPSERVE_REAL_GGUF to the Gemma 3 270M
// GGUF file (~/.cache/tpserve/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf).
TEST(TokenMaskTest, RealGemma3Vocabulary) {
  const char* path = std::getenv("TPSERVE_REAL_GGUF");
  if (path == nullptr || !std::filesystem::exists(path)) {
    GTEST_SKIP() << "set TPSERVE_REAL_GGUF to the Gemma 3 270M GGUF file to run this test";
  }
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto tokenizer = TokenizerFromGguf(**file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto table = TokenBytesTable(**tokenizer);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->bytes.size(), 262144u);
  for (const std::string text : {"{\"name\": \"Zoë\", \"ok\": true}\n", "  indent\tand 日本語 😀 <0x41>"}) {
    std::string concat;
    const auto ids = (*tokenizer)->Encode(text, false);
    for (const int32_t id : ids) concat += table->bytes[id];
    EXPECT_EQ((*tokenizer)->Decode(ids, false), concat);
    EXPECT_EQ(concat, text);
  }
  const auto vocab = TokenVocabulary::Create(std::move(*table));
  RandomWalks(kWalkSchemas[1], vocab, 2, 20, /*brute_force=*/false, 7);
  // The mask against brute force at a few states, reached by single-byte tokens.
  std::vector<int32_t> byte_token(256, -1);
  for (uint32_t i = 0; i < vocab->num_sorted(); ++i) {
    if (vocab->sorted_bytes(i).size() == 1)
      byte_token[static_cast<uint8_t>(vocab->sorted_bytes(i)[0])] = vocab->sorted_id(i);
  }
  auto grammar = GrammarFromJsonSchemaText(kWalkSchemas[1]);
  ASSERT_TRUE(grammar.ok());
  const auto compiled = CompiledGrammar::Create(*grammar, vocab);
  BitMask mask;
  for (const std::string prefix : {"", "{", "{\"name\"", "{\"name\": \"Ada Lo", "{\"name\": \"x\", \"age\": 12",
                                   "{\"name\": \"x\", \"tags\": [\"a\""}) {
    TokenMatcher matcher(compiled);
    for (const char c : prefix) ASSERT_TRUE(matcher.AcceptToken(byte_token[static_cast<uint8_t>(c)])) << prefix;
    FillNextTokenMask(matcher, &mask);
    ExpectMaskIsExact(matcher, mask, prefix);
  }
}

}  // namespace
}  // namespace tpserve
