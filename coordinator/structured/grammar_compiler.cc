// The compiled-grammar LRU cache (grammar_compiler.h). Tested by
// tests/structured_output_test.cc.
#include "coordinator/structured/grammar_compiler.h"

#include "kernels/base.h"

namespace tpserve {
namespace {

// Keys: the two kinds cannot collide (a schema's text never starts with a NUL byte).
constexpr std::string_view kJsonObjectKey = std::string_view("\0json_object", 12);

}  // namespace

GrammarCompiler::GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocabulary, GrammarCompilerOptions options)
    : vocabulary_(std::move(vocabulary)), options_(std::move(options)) {}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::CompileJsonSchema(
    std::string_view schema_text) {
  const std::string key(schema_text);
  if (auto hit = Lookup(key)) return hit;
  TP_ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> grammar, GrammarFromJsonSchemaText(schema_text, options_.schema));
  auto compiled = CompiledGrammar::Create(std::move(grammar), vocabulary_, options_.compile_threads);
  Insert(key, compiled);
  return compiled;
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::CompileJsonObject() {
  const std::string key(kJsonObjectKey);
  if (auto hit = Lookup(key)) return hit;
  TP_ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> grammar, GrammarForAnyJsonObject(options_.schema));
  auto compiled = CompiledGrammar::Create(std::move(grammar), vocabulary_, options_.compile_threads);
  Insert(key, compiled);
  return compiled;
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::Lookup(const std::string& key) {
  absl::MutexLock lock(&mu_);
  const auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void GrammarCompiler::Insert(const std::string& key, std::shared_ptr<const CompiledGrammar> compiled) {
  absl::MutexLock lock(&mu_);
  if (index_.contains(key)) return;  // another thread compiled it meanwhile
  lru_.emplace_front(key, std::move(compiled));
  index_[key] = lru_.begin();
  while (lru_.size() > options_.cache_capacity) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

GrammarCompiler::Stats GrammarCompiler::stats() const {
  absl::MutexLock lock(&mu_);
  return {hits_, misses_, lru_.size()};
}

}  // namespace tpserve
