// Compiles response_format grammars for one tokenizer's vocabulary and keeps the most
// recently used ones, keyed by the schema's exact text. Thread-safe. Tested by
// tests/structured_output_test.cc.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/structured/compiled_grammar.h"
#include "coordinator/structured/json_schema.h"
#include "coordinator/structured/token_vocabulary.h"

namespace tpserve {

struct GrammarCompilerOptions {
  JsonSchemaOptions schema;
  // Compiled grammars kept (least recently used first out). Each holds its token tables:
  // CompiledGrammar::memory_bytes(), typically tens of KB to a few MB at 262k tokens.
  size_t cache_capacity = 64;
  // Threads that fill a grammar's token tables (CompiledGrammar::Create), the calling
  // thread included. At 262k tokens a table costs 0.05 ms (a state after '{') to ~10 ms (a
  // state inside a string) of one core.
  int compile_threads = 1;
};

class GrammarCompiler {
 public:
  explicit GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocabulary, GrammarCompilerOptions options = {});

  // The grammar of a JSON schema given as text (json_schema.h); errors are InvalidArgument
  // with messages for the client. Compiling happens outside the lock: two threads asking
  // for the same new schema at once may both compile it.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileJsonSchema(std::string_view schema_text);
  // Any JSON object: response_format {"type": "json_object"}.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileJsonObject();

  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
    size_t entries = 0;
  };
  Stats stats() const;

 private:
  std::shared_ptr<const CompiledGrammar> Lookup(const std::string& key);
  void Insert(const std::string& key, std::shared_ptr<const CompiledGrammar> compiled);

  const std::shared_ptr<const TokenVocabulary> vocabulary_;
  const GrammarCompilerOptions options_;
  mutable absl::Mutex mu_;
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  absl::flat_hash_map<std::string, std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tpserve
