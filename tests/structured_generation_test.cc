// Structured output through the engine core on a random-weight model (the hard case: the
// model itself knows nothing of JSON, so only the masks keep the output valid): for a suite
// of schemas, seeded sampling at temperature 1, mixed in one batch with free-text requests,
// at TP 1 and 2 and with n-gram drafts, every output ends by the grammar's end (finish
// "stop") and its text parses and validates against the schema (tests/json_schema_validator.h,
// written independently of the compiler). Also: logit_bias through the whole step path.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/engine/engine_core.h"
#include "coordinator/engine/speculative.h"
#include "coordinator/structured/grammar_compiler.h"
#include "coordinator/text/tokenizer.h"
#include "coordinator/text/tool_calls.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/json_schema_validator.h"
#include "tests/offline_harness.h"
#include "tests/tp_harness.h"

namespace tpserve {
namespace {

// Every value bounded (strings by maxLength, enum or pattern, arrays by maxItems), so that
// even random weights must finish within max_tokens.
const char* const kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"age":{"type":"integer"},
        "ok":{"type":"boolean"}},"required":["name","age","ok"]})",
    R"({"type":"object","properties":{"color":{"enum":["red","green","blue"]},"n":{"type":"number"},
        "note":{"type":["string","null"],"maxLength":4}},"required":["color"]})",
    R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},
        "tag":{"const":"x"}},"required":["id","tag"]},"minItems":1,"maxItems":3})",
    R"({"$defs":{"p":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},
        "required":["x","y"]}},"type":"object","properties":{"a":{"$ref":"#/$defs/p"},
        "b":{"anyOf":[{"$ref":"#/$defs/p"},{"type":"null"}]}},"required":["a","b"]})",
    R"({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2}-[0-9]{3}$"},
        "flags":{"type":"array","items":{"type":"boolean"},"maxItems":4}},"required":["code","flags"]})",
};

std::shared_ptr<const TokenVocabulary> GemmaVocabulary(const Tokenizer& tok) {
  absl::StatusOr<VocabularyBytes> table = TokenBytesTable(tok);
  EXPECT_TRUE(table.ok()) << table.status();
  return TokenVocabulary::Create(*std::move(table));
}

std::unique_ptr<Tokenizer> GemmaTokenizer() {
  auto tok = Tokenizer::FromFile(std::string(TPSERVE_FIXTURES) + "/tokenizers/gemma/tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

struct Run {
  int tp = 1;
  int32_t num_speculative_tokens = 0;
};

// Generates with each schema under several seeds (and free-text requests beside them);
// checks every structured output. Returns how many outputs were checked.
int GenerateAndCheck(const Run& run) {
  std::unique_ptr<Tokenizer> tok = GemmaTokenizer();
  if (tok == nullptr) return 0;
  GrammarCompiler compiler(GemmaVocabulary(*tok));
  int checked = 0;
  testing::WithFixtureModel("gemma4_text", run.tp, 512, [&](Model& model, StepExecutor& exec) {
    SchedulerConfig sc = SchedulerConfigFor(model, 32, 128);
    sc.num_speculative_tokens = run.num_speculative_tokens;
    std::unique_ptr<DraftProposer> proposer;
    if (run.num_speculative_tokens > 0) {
      proposer = std::make_unique<NgramProposer>(1, 3);
    }
    EngineCore core(exec, sc, std::nullopt, std::move(proposer));
    struct Expect {
      std::string schema;
      std::vector<int32_t> tokens;
    };
    std::map<std::string, Expect> structured;
    for (size_t s = 0; s < std::size(kSchemas); ++s) {
      auto grammar = compiler.CompileJsonSchema(kSchemas[s]);
      ASSERT_TRUE(grammar.ok()) << grammar.status();
      for (uint64_t seed = 0; seed < 4; ++seed) {
        SamplingParams p;
        p.temperature = 1.0f;
        p.seed = seed * 31 + s;
        p.max_tokens = 200;
        p.grammar = *grammar;
        const std::string id = absl::StrCat("s", s, "_", seed);
        // A prompt that repeats JSON-ish tokens gives the n-gram proposer drafts to make.
        const std::vector<int32_t> prompt = {2, 357, 279, 301, 291, 357, 279, 301, 292, static_cast<int32_t>(3 + s)};
        ASSERT_TRUE(core.Validate(prompt, p).ok());
        ASSERT_TRUE(core.AddRequest(id, prompt, p, absl::Now()).ok());
        structured[id] = Expect{kSchemas[s], {}};
      }
    }
    for (int i = 0; i < 4; ++i) {  // free text beside them: their rows take no mask
      SamplingParams p;
      p.seed = 1000 + i;
      p.max_tokens = 30;
      p.ignore_eos = true;
      ASSERT_TRUE(core.AddRequest(absl::StrCat("free", i), {2, 10, 20, 30 + i}, p, absl::Now()).ok());
    }
    int64_t drafts_verified = 0;
    while (core.HasUnfinished()) {
      EngineStep step = core.Step();
      ASSERT_TRUE(step.error.ok()) << step.error;
      drafts_verified += step.num_draft_tokens;
      for (const EngineOutput& o : step.outputs) {
        ASSERT_NE(o.finish, FinishReason::kError) << o.request_id << ": " << o.error;
        auto it = structured.find(o.request_id);
        if (it == structured.end()) continue;
        it->second.tokens.insert(it->second.tokens.end(), o.token_ids.begin(), o.token_ids.end());
        if (o.finish == FinishReason::kNone) continue;
        EXPECT_EQ(o.finish, FinishReason::kStop) << o.request_id << " did not finish its JSON in 200 tokens";
        std::vector<int32_t> ids = it->second.tokens;
        ASSERT_FALSE(ids.empty());
        ids.pop_back();  // the EOS the grammar allowed at the end
        const std::string text = tok->Decode(ids, /*skip_special_tokens=*/false);
        const nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
        ASSERT_FALSE(value.is_discarded()) << o.request_id << ": not JSON: " << text;
        const testing_json::SchemaValidator validator(nlohmann::json::parse(it->second.schema));
        EXPECT_EQ(validator.Check(value), "") << o.request_id << ": " << text;
        if (checked == 0) std::printf("%s: %s\n", o.request_id.c_str(), text.c_str());
        ++checked;
      }
    }
    if (run.num_speculative_tokens > 0) { EXPECT_GT(drafts_verified, 0) << "no drafts reached verification"; }
  });
  return checked;
}

TEST(StructuredGenerationTest, EveryOutputValidatesAtTp1) {
  EXPECT_EQ(GenerateAndCheck({.tp = 1}), static_cast<int>(std::size(kSchemas)) * 4);
}

TEST(StructuredGenerationTest, EveryOutputValidatesAtTp2WithNgramDrafts) {
  EXPECT_EQ(GenerateAndCheck({.tp = 2, .num_speculative_tokens = 3}), static_cast<int>(std::size(kSchemas)) * 4);
}

// The text of a forced tool call's output up to the end of its first call, closed as a list
// ("[{...}]"); empty while the first call is unfinished.
std::string FirstCall(const std::string& text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if ((c == ']' || c == '}') && --depth == 1) {
      return text.substr(0, i + 1) + "]";
    }
  }
  return "";
}

struct RequiredCallRuns {
  int first_call_done = 0;  // outputs whose first call was complete within max_tokens
  int finished = 0;         // outputs that ended (finish "stop") as a list of calls
};

// tool_choice "required" on the random-weight fixture: `seeds` requests at temperature 1 with
// `max_tokens` each, compiled with `options`. Each output is printed.
RequiredCallRuns RunRequiredToolChoice(const GrammarCompilerOptions& options, int32_t max_tokens, int seeds) {
  RequiredCallRuns runs;
  std::unique_ptr<Tokenizer> tok = GemmaTokenizer();
  if (tok == nullptr) return runs;
  GrammarCompiler compiler(GemmaVocabulary(*tok), options);
  // Every argument an enum, so that only whitespace and the number of calls are open. The
  // longest first call, [{"name":"get_weather","parameters":{"city":"Oslo","unit":"c"}}, is 63
  // bytes with 18 places for whitespace.
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"enum": ["Oslo", "Rome"]}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object",
      "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}])");
  absl::StatusOr<std::string> schema = RequiredToolsSchema(tools);
  EXPECT_TRUE(schema.ok()) << schema.status();
  auto grammar = compiler.CompileJsonSchema(*schema);
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  if (!grammar.ok()) return runs;
  testing::WithFixtureModel("gemma4_text", 1, 512, [&](Model& model, StepExecutor& exec) {
    EngineCore core(exec, SchedulerConfigFor(model, 32, 128));
    std::map<std::string, std::vector<int32_t>> tokens;
    for (int seed = 0; seed < seeds; ++seed) {
      SamplingParams p;
      p.temperature = 1.0f;
      p.seed = static_cast<uint64_t>(seed);
      p.max_tokens = max_tokens;
      p.grammar = *grammar;
      ASSERT_TRUE(core.AddRequest(absl::StrCat("t", seed), {2, 357, 279, 301}, p, absl::Now()).ok());
    }
    while (core.HasUnfinished()) {
      EngineStep step = core.Step();
      ASSERT_TRUE(step.error.ok()) << step.error;
      for (const EngineOutput& o : step.outputs) {
        ASSERT_NE(o.finish, FinishReason::kError) << o.error;
        std::vector<int32_t>& ids = tokens[o.request_id];
        ids.insert(ids.end(), o.token_ids.begin(), o.token_ids.end());
        if (o.finish == FinishReason::kNone) continue;
        if (o.finish == FinishReason::kStop) ids.pop_back();  // the EOS the grammar allowed at the end
        const std::string text = tok->Decode(ids, /*skip_special_tokens=*/false);
        const bool finished = o.finish == FinishReason::kStop && ToolCallsFromConstrainedOutput(text, "", 1).ok();
        const std::string first = FirstCall(text);
        const bool first_done = !first.empty() && ToolCallsFromConstrainedOutput(first, "", 1).ok();
        runs.finished += finished;
        runs.first_call_done += first_done;
        std::printf("%s: %zu tokens, %s: %s\n", o.request_id.c_str(), ids.size(),
                    finished ? "calls" : first_done ? "first call done" : "cut short",
                    nlohmann::json(text).dump().c_str());
      }
    }
  });
  return runs;
}

// The issue's case: tool_choice "required" on random weights ran to max_tokens (100) with no
// call, its budget spent on whitespace between the JSON tokens (up to 8 bytes a gap then; the
// random fixture fills most gaps). With the default bound of 2 the longest first call is at
// most 63 + 18 x 2 = 99 bytes, so every seed has written one within 100 tokens whatever the
// weights (a token is at least a byte); at 8 it could take 207. What may still run long is a
// list of several calls, which the schema leaves open.
TEST(StructuredGenerationTest, RequiredToolCallFitsASmallBudgetOnRandomWeights) {
  constexpr int kSeeds = 8;
  const RequiredCallRuns runs = RunRequiredToolChoice(GrammarCompilerOptions(), 100, kSeeds);
  EXPECT_EQ(runs.first_call_done, kSeeds);
  EXPECT_GE(runs.finished, kSeeds / 2);
}

// json_object mode has unbounded strings: an output may run to max_tokens; those that end
// parse as an object, and every output's text is a prefix the byte matcher accepts.
TEST(StructuredGenerationTest, JsonObjectOutputsAreObjects) {
  std::unique_ptr<Tokenizer> tok = GemmaTokenizer();
  ASSERT_NE(tok, nullptr);
  GrammarCompiler compiler(GemmaVocabulary(*tok));
  auto grammar = compiler.CompileJsonObject();
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  testing::WithFixtureModel("gemma4_text", 1, 256, [&](Model& model, StepExecutor& exec) {
    EngineCore core(exec, SchedulerConfigFor(model, 16, 128));
    std::map<std::string, std::vector<int32_t>> tokens;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      SamplingParams p;
      p.seed = seed;
      p.max_tokens = 60;
      p.grammar = *grammar;
      ASSERT_TRUE(core.AddRequest(absl::StrCat("j", seed), {2, 5, 6}, p, absl::Now()).ok());
    }
    int ended = 0;
    while (core.HasUnfinished()) {
      EngineStep step = core.Step();
      ASSERT_TRUE(step.error.ok()) << step.error;
      for (const EngineOutput& o : step.outputs) {
        ASSERT_NE(o.finish, FinishReason::kError) << o.error;
        auto& ids = tokens[o.request_id];
        ids.insert(ids.end(), o.token_ids.begin(), o.token_ids.end());
        if (o.finish == FinishReason::kNone) continue;
        TokenMatcher replay(*grammar);
        for (int32_t id : ids) ASSERT_TRUE(replay.AcceptToken(id)) << o.request_id << " token " << id;
        if (o.finish == FinishReason::kStop) {
          ASSERT_TRUE(replay.IsTerminated());
          ids.pop_back();
          const std::string text = tok->Decode(ids, false);
          const nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
          EXPECT_TRUE(value.is_object()) << text;
          ++ended;
        }
      }
    }
    EXPECT_EQ(tokens.size(), 8u);
    (void)ended;  // random weights may leave any of them unfinished at 60 tokens
  });
}

// logit_bias +100 on one token makes every sample that token; -100 on the greedy choice
// moves greedy off it. Row edits reach the sampler on TP 2 too.
TEST(StructuredGenerationTest, LogitBiasSteersSampling) {
  testing::WithFixtureModel("qwen3", 2, 64, [&](Model& model, StepExecutor& exec) {
    EngineCore core(exec, SchedulerConfigFor(model, 8, 128));
    auto run = [&](SamplingParams p) {
      std::vector<int32_t> out;
      EXPECT_TRUE(core.AddRequest("r", {3, 4, 5, 6}, p, absl::Now()).ok());
      while (core.HasUnfinished()) {
        EngineStep step = core.Step();
        EXPECT_TRUE(step.error.ok()) << step.error;
        for (const EngineOutput& o : step.outputs) out.insert(out.end(), o.token_ids.begin(), o.token_ids.end());
      }
      return out;
    };
    SamplingParams p;
    p.seed = 5;
    p.max_tokens = 6;
    p.ignore_eos = true;
    p.logit_bias = {{77, 100.0f}};
    EXPECT_EQ(run(p), std::vector<int32_t>(6, 77));
    SamplingParams greedy;
    greedy.temperature = 0;
    greedy.max_tokens = 1;
    greedy.ignore_eos = true;
    const std::vector<int32_t> first = run(greedy);
    ASSERT_EQ(first.size(), 1u);
    greedy.logit_bias = {{first[0], -100.0f}};
    const std::vector<int32_t> moved = run(greedy);
    ASSERT_EQ(moved.size(), 1u);
    EXPECT_NE(moved[0], first[0]);
  });
}

}  // namespace
}  // namespace tpserve
