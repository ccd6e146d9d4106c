// Structured output's host-side costs at a real vocabulary: FillNextTokenMask per decoding
// step at representative states, and compile time (schema -> grammar -> per-state token
// tables). CPU time of the calling thread (the machines are shared), printed, never
// asserted. Results and how to read them: docs/structured_output.md.
//
//   build/bench/structured_output_bench [--gguf ~/.cache/tpserve/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf]
//                                       [--tokenizer path/tokenizer.json] [--reps 200] [--compile_threads 2]
// Without --gguf or --tokenizer it uses the Gemma 3 270M file that tools/fetch_real_model.sh
// caches (262,144 tokens), else the small gemma fixture (and says so).
//
//   build/bench/structured_output_bench --engine [--batch 1,64] [--decode_steps 16] [--rounds 3]
// The same costs inside the engine instead (structured_output_engine.h): decode steps of a
// dummy-weight gemma-4-1b with and without a grammar, side by side. Needs the real vocabulary:
// without --gguf or --tokenizer and no cached file it exits 3, saying so.
#include <time.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/cpu_time.h"
#include "bench/structured_output_engine.h"
#include "coordinator/structured/grammar_compiler.h"
#include "coordinator/structured/json_schema.h"
#include "coordinator/structured/token_matcher.h"
#include "coordinator/structured/token_vocabulary.h"
#include "coordinator/text/tokenizer.h"
#include "coordinator/text/tokenizer_gguf.h"
#include "worker/gguf_file.h"

ABSL_FLAG(std::string, gguf, "", "GGUF file whose tokenizer to use (default: the cached Gemma 3 270M)");
ABSL_FLAG(std::string, tokenizer, "", "tokenizer.json to use instead of a GGUF file");
ABSL_FLAG(int, reps, 200, "masks timed per state");
ABSL_FLAG(int, compile_threads, 2, "also time compiling with this many threads (wall clock)");
ABSL_FLAG(bool, engine, false, "measure inside the engine instead: decode steps with and without a grammar");
ABSL_FLAG(std::string, model, "gemma-4-1b", "--engine: built-in model shape (dummy weights)");
ABSL_FLAG(std::string, batch, "1,64", "--engine: batch sizes, comma-separated");
ABSL_FLAG(int, decode_steps, 16, "--engine: full decode steps measured per run");
ABSL_FLAG(int, rounds, 3, "--engine: rounds of plain, schema and json_object runs");
ABSL_FLAG(int, threads, 0, "--engine: CPU threads of the rank (0: every core)");
ABSL_FLAG(double, temperature, 1.0, "--engine: sampling temperature");
ABSL_FLAG(int, top_k, 64, "--engine: top_k (0: off)");
ABSL_FLAG(double, top_p, 0.95, "--engine: top_p (1: off)");

namespace tpserve {
namespace {

using bench::ThreadCpuSeconds;

// A nested schema of the kind clients send: objects in arrays, enums, optional and
// nullable fields, a recursive reference, bounded strings.
constexpr char kNestedSchema[] = R"({
  "$defs": {
    "address": {"type": "object", "properties": {
      "street": {"type": "string"}, "city": {"type": "string"},
      "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
      "country": {"enum": ["US", "CA", "MX", "FR", "DE", "JP"]}}, "required": ["street", "city", "country"]},
    "category": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 32},
      "children": {"type": "array", "items": {"$ref": "#/$defs/category"}}}, "required": ["name"]}
  },
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "name": {"type": "string"},
    "email": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "score": {"type": "number"},
    "active": {"type": "boolean"},
    "home": {"$ref": "#/$defs/address"},
    "offices": {"type": "array", "items": {"$ref": "#/$defs/address"}, "maxItems": 8},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "phones": {"type": "array", "items": {"type": "object", "properties": {
      "kind": {"enum": ["home", "work", "mobile"]}, "number": {"type": "string"}}, "required": ["kind", "number"]}},
    "category": {"$ref": "#/$defs/category"}
  },
  "required": ["id", "name", "email", "home", "tags"]
})";

struct Sample {
  double median_us, p90_us;
};

Sample TimeMask(const TokenMatcher& matcher, int reps, BitMask* mask) {
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    const double start = ThreadCpuSeconds();
    FillNextTokenMask(matcher, mask);
    us.push_back((ThreadCpuSeconds() - start) * 1e6);
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 9 / 10]};
}

double WallSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void Run(const Tokenizer& tokenizer, int reps, int compile_threads) {
  double t = ThreadCpuSeconds();
  auto table = TokenBytesTable(tokenizer);
  if (!table.ok()) {
    std::printf("TokenBytesTable: %s\n", std::string(table.status().message()).c_str());
    return;
  }
  const double table_s = ThreadCpuSeconds() - t;
  t = ThreadCpuSeconds();
  const auto vocab = TokenVocabulary::Create(std::move(*table));
  const double trie_s = ThreadCpuSeconds() - t;
  std::printf("vocabulary: %d ids, %u text tokens, %zu trie nodes, longest token %zu bytes\n", vocab->size(),
              vocab->num_sorted(), vocab->trie().size(), vocab->max_token_bytes());
  std::printf("  TokenBytesTable %.0f ms, trie %.0f ms (once per tokenizer)\n\n", table_s * 1e3, trie_s * 1e3);

  struct Compiled {
    const char* name;
    std::string schema;
  };
  const std::vector<Compiled> schemas = {
      {"json_object", R"({"type": "json_object"})"},
      {"nested schema", kNestedSchema},
      {"flat object", R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                         "required": ["name", "age"]})"},
      // The nested schema without its bounded string: what maxLength 32 costs.
      {"nested, no maxLength",
       std::string(kNestedSchema).replace(std::string(kNestedSchema).find(", \"maxLength\": 32"), 17, "")},
  };
  std::printf("compile (CPU ms): grammar = schema -> automaton; tokens = per-state token tables\n");
  std::vector<std::shared_ptr<const CompiledGrammar>> compiled;
  for (const Compiled& c : schemas) {
    t = ThreadCpuSeconds();
    auto grammar = GrammarFromJsonSchemaText(c.schema);
    const double grammar_s = ThreadCpuSeconds() - t;
    if (!grammar.ok()) {
      std::printf("  %s: %s\n", c.name, std::string(grammar.status().message()).c_str());
      return;
    }
    t = ThreadCpuSeconds();
    compiled.push_back(CompiledGrammar::Create(*grammar, vocab));
    const double tokens_s = ThreadCpuSeconds() - t;
    uint32_t positions = 0;
    for (uint32_t s = 0; s < (*grammar)->num_states(); ++s) positions += (*grammar)->has_bytes(s);
    std::printf("  %-20s grammar %6.2f ms  tokens %8.1f ms  (%u rules, %u states, %u positions, %zu tables, %.1f MB)\n",
                c.name, grammar_s * 1e3, tokens_s * 1e3, (*grammar)->num_rules(), (*grammar)->num_states(), positions,
                compiled.back()->num_tables(), compiled.back()->memory_bytes() / 1e6);
    if (compile_threads > 1) {
      t = WallSeconds();
      CompiledGrammar::Create(*grammar, vocab, compile_threads);
      std::printf("  %-20s tokens with %d threads: %.1f ms wall\n", "", compile_threads, (WallSeconds() - t) * 1e3);
    }
  }

  struct State {
    const char* name;
    size_t schema;
    const char* prefix;
  };
  const std::vector<State> states = {
      {"start of object", 2, "{"},
      {"after a key", 2, R"({"name")"},
      {"inside a string", 2, R"({"name": "Ada Lovel)"},
      {"inside a number", 2, R"({"name": "Ada", "age": 12)"},
      {"json_object: start", 0, ""},
      {"json_object: in key", 0, R"({"user": {"na)"},
      {"json_object: in string", 0, R"({"user": {"name": "Ada Lovel)"},
      {"json_object: in number", 0, R"({"a": [1, 2, 3.14)"},
      {"nested: in string", 1, R"({"id": 1, "name": "Ada Lovel)"},
      {"nested: after key", 1, R"({"id": 1, "name": "Ada", "email")"},
      {"nested: in enum", 1,
       R"({"id": 1, "name": "A", "email": null, "home": {"street": "x", "city": "y", "country": ")"},
      {"nested: deep string", 1,
       R"({"id": 1, "name": "A", "email": null, "home": {"street": "x", "city": "y", "country": "US"}, "tags": ["a"], "category": {"name": "a", "children": [{"name": "b", "children": [{"name": "deep te)"},
  };
  std::vector<int32_t> byte_token(256, -1);
  for (uint32_t i = 0; i < vocab->num_sorted(); ++i) {
    if (vocab->sorted_bytes(i).size() == 1)
      byte_token[static_cast<uint8_t>(vocab->sorted_bytes(i)[0])] = vocab->sorted_id(i);
  }
  std::printf("\nFillNextTokenMask per step (CPU us over %d masks): median, p90; allowed tokens; stacks\n", reps);
  BitMask mask;
  for (const State& s : states) {
    TokenMatcher matcher(compiled[s.schema]);
    // Reach the state by single-byte tokens.
    TokenMatcher at(compiled[s.schema]);
    bool ok = true;
    for (const char c : std::string(s.prefix)) {
      const int32_t id = byte_token[static_cast<uint8_t>(c)];
      ok = ok && id >= 0 && at.AcceptToken(id);
    }
    if (!ok) {
      std::printf("  %-24s no single-byte tokens for the prefix\n", s.name);
      continue;
    }
    const Sample sample = TimeMask(at, reps, &mask);
    std::printf("  %-24s %8.1f %8.1f   %7d  %zu\n", s.name, sample.median_us, sample.p90_us, mask.Count(),
                at.byte_matcher().stacks().size());
  }

  // A whole generation: random allowed tokens (preferring longer ones, as a model's output
  // is), 300 steps or until the document ends.
  std::printf("\nrandom generations of up to 300 tokens: mean and max CPU us per mask, and per AcceptToken\n");
  std::mt19937 rng(1);
  for (size_t k = 0; k < compiled.size(); ++k) {
    double mask_total = 0, mask_max = 0, accept_total = 0;
    int steps = 0;
    for (int run = 0; run < 3; ++run) {
      TokenMatcher matcher(compiled[k]);
      for (int step = 0; step < 300 && !matcher.IsTerminated(); ++step) {
        double t0 = ThreadCpuSeconds();
        FillNextTokenMask(matcher, &mask);
        const double m = ThreadCpuSeconds() - t0;
        mask_total += m;
        mask_max = std::max(mask_max, m);
        ++steps;
        std::vector<int32_t> allowed;
        const auto words = mask.words();
        for (size_t w = 0; w < words.size(); ++w) {
          for (uint64_t bits = words[w]; bits != 0; bits &= bits - 1) {
            allowed.push_back(static_cast<int32_t>(w * 64 + std::countr_zero(bits)));
          }
        }
        // The longest of 20 random allowed tokens.
        int32_t pick = allowed[rng() % allowed.size()];
        for (int draw = 0; draw < 19; ++draw) {
          const int32_t other = allowed[rng() % allowed.size()];
          if (vocab->bytes(other).size() > vocab->bytes(pick).size()) pick = other;
        }
        if (matcher.CanEnd() && step > 150) pick = vocab->eos_ids()[0];
        t0 = ThreadCpuSeconds();
        matcher.AcceptToken(pick);
        accept_total += ThreadCpuSeconds() - t0;
      }
    }
    std::printf("  %-20s %5d steps  mask mean %7.1f us  max %8.1f us  accept mean %5.2f us\n", schemas[k].name, steps,
                mask_total / steps * 1e6, mask_max * 1e6, accept_total / steps * 1e6);
  }
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::string gguf = absl::GetFlag(FLAGS_gguf);
  const std::string tokenizer_json = absl::GetFlag(FLAGS_tokenizer);
  const bool engine = absl::GetFlag(FLAGS_engine);
  if (gguf.empty() && tokenizer_json.empty()) {
    const char* home = std::getenv("HOME");
    const std::string cached =
        std::string(home != nullptr ? home : "") + "/.cache/tpserve/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf";
    if (std::filesystem::exists(cached)) {
      gguf = cached;
    } else if (engine) {
      std::fprintf(stderr,
                   "structured_output_bench: --engine needs the real Gemma 3 vocabulary (262,144 ids), and %s is "
                   "not cached: run tools/fetch_real_model.sh (it needs network; exit 3 = offline), or pass --gguf "
                   "or --tokenizer\n",
                   cached.c_str());
      return 3;
    }
  }
  std::unique_ptr<tpserve::Tokenizer> tokenizer;
  if (!gguf.empty()) {
    auto file = tpserve::GgufFile::Open(gguf);
    if (!file.ok()) {
      std::fprintf(stderr, "%s\n", std::string(file.status().message()).c_str());
      return 1;
    }
    auto t = tpserve::TokenizerFromGguf(**file);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
      return 1;
    }
    tokenizer = std::move(*t);
    std::printf("tokenizer: %s\n", gguf.c_str());
  } else {
    const std::string path =
        tokenizer_json.empty() ? TPSERVE_FIXTURES "/tokenizers/gemma/tokenizer.json" : tokenizer_json;
    auto t = tpserve::Tokenizer::FromFile(path);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
      return 1;
    }
    tokenizer = std::move(*t);
    std::printf(
        "tokenizer: %s%s\n", path.c_str(),
        tokenizer_json.empty() ? "  (the small fixture: run tools/fetch_real_model.sh for the 262k vocabulary)" : "");
  }
  if (engine) {
    tpserve::bench::EngineModeOptions o;
    o.model = absl::GetFlag(FLAGS_model);
    o.batches.clear();
    for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_batch), ',', absl::SkipWhitespace())) {
      int b = 0;
      if (!absl::SimpleAtoi(part, &b) || b < 1) {
        std::fprintf(stderr, "structured_output_bench: --batch: \"%s\" is not a positive integer\n",
                     std::string(part).c_str());
        return 2;
      }
      o.batches.push_back(b);
    }
    if (o.batches.empty()) {
      std::fprintf(stderr, "structured_output_bench: --batch is empty\n");
      return 2;
    }
    o.decode_steps = std::max(1, absl::GetFlag(FLAGS_decode_steps));
    o.rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
    o.threads = absl::GetFlag(FLAGS_threads);
    o.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
    o.top_k = absl::GetFlag(FLAGS_top_k);
    o.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
    return tpserve::bench::RunEngineMode(*tokenizer, o);
  }
  tpserve::Run(*tokenizer, absl::GetFlag(FLAGS_reps), absl::GetFlag(FLAGS_compile_threads));
  return 0;
}
