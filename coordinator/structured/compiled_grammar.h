// A Grammar bound to a TokenVocabulary, with every token classified ahead of time at each
// automaton state: accepted whatever the stack below holds, rejected whatever it holds, or
// uncertain (the token runs past the end of the state's rule and the outcome depends on
// the rules that called it). Masks then only test the uncertain few against the live
// stack (the token caching of XGrammar, as a design). Tested by
// tests/structured_output_test.cc; timed by bench/structured_output_bench.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "coordinator/structured/grammar.h"
#include "coordinator/structured/token_vocabulary.h"

namespace tpserve {

class CompiledGrammar {
 public:
  // What one state does with each text token.
  struct PositionTokens {
    // Accepted whatever the stack: as mask words when many (dense), else as sorted ids.
    std::vector<uint64_t> accepted_words;
    std::vector<int32_t> accepted_ids;
    // Uncertain tokens as indices into the vocabulary's byte order, ascending, each with
    // its longest common prefix with the previous entry (for prefix-sharing walks).
    std::vector<uint32_t> uncertain;
    std::vector<uint32_t> uncertain_lcp;
  };

  // Classifies every token at every state with byte edges: one walk of the vocabulary trie
  // per state, pruned at the first byte no path takes. States that no token (at most
  // max_token_bytes long) can tell apart share one table: the slots of an unrolled
  // maxLength string far from its end, copies that determinizing made. `num_threads`
  // threads (the caller's included) fill the tables.
  static std::shared_ptr<const CompiledGrammar> Create(std::shared_ptr<const Grammar> grammar,
                                                       std::shared_ptr<const TokenVocabulary> vocabulary,
                                                       int num_threads = 1);

  const Grammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const Grammar>& shared_grammar() const { return grammar_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  // Only for states with byte edges.
  const PositionTokens& position(uint32_t state) const { return tables_[table_of_state_[state]]; }
  // Distinct tables (at most one per state with byte edges).
  size_t num_tables() const { return tables_.size(); }
  // Memory the classification takes (the tables above), for logs and the benchmark.
  size_t memory_bytes() const;

 private:
  CompiledGrammar() = default;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  std::vector<uint32_t> table_of_state_;  // by state; states without byte edges: 0 (unused)
  std::vector<PositionTokens> tables_;
};

}  // namespace tpserve
