// A byte-level grammar as a set of rules, each a deterministic automaton whose edges read
// a byte or call another rule (a recursive transition network, the pushdown automaton that
// GrammarMatcher runs). Built by GrammarBuilder (grammar_builder.h); tested by
// tests/structured_output_test.cc.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace tpserve {

// Immutable once built, so one Grammar is shared by every request that uses it.
// Guarantees GrammarBuilder::Build establishes (what the matcher relies on):
//   - no rule matches the empty string (a call always consumes a byte);
//   - no rule can call itself before consuming a byte (no left recursion);
//   - every state can reach a final state of its rule, and every rule matches something,
//     so any prefix the matcher accepts can be completed.
class Grammar {
 public:
  static constexpr uint32_t kNoState = UINT32_MAX;
  struct CallEdge {
    uint32_t rule;
    uint32_t return_state;  // where the caller continues once the callee's rule ends
  };

  uint32_t num_states() const { return static_cast<uint32_t>(rule_of_.size()); }
  uint32_t num_rules() const { return static_cast<uint32_t>(rule_start_.size()); }
  uint32_t root_rule() const { return root_rule_; }
  uint32_t rule_start(uint32_t rule) const { return rule_start_[rule]; }
  const std::string& rule_name(uint32_t rule) const { return rule_name_[rule]; }
  uint32_t rule_of(uint32_t state) const { return rule_of_[state]; }
  bool is_final(uint32_t state) const { return final_[state]; }
  // True when some byte moves `state` on (a "position" with a token cache).
  bool has_bytes(uint32_t state) const { return has_bytes_[state]; }
  // The state after `byte`, or kNoState.
  uint32_t Next(uint32_t state, uint8_t byte) const {
    return next_[static_cast<size_t>(state) * num_classes_ + byte_class_[byte]];
  }
  absl::Span<const CallEdge> calls(uint32_t state) const {
    return absl::MakeConstSpan(calls_.data() + call_begin_[state], calls_.data() + call_begin_[state + 1]);
  }
  // Bytes that can come right after a match of `rule`, in any context (empty for the root).
  const std::bitset<256>& follow(uint32_t rule) const { return follow_[rule]; }
  // Fewest bytes from `state` to a final state of its rule (a call counts its rule's
  // shortest match).
  uint32_t min_bytes_to_final(uint32_t state) const { return min_to_final_[state]; }
  uint32_t num_byte_classes() const { return num_classes_; }
  // A byte of the class of `byte` (the smallest): what ShortestCompletion writes.
  uint8_t ByteOfClass(uint32_t byte_class) const { return class_first_byte_[byte_class]; }
  uint32_t NextByClass(uint32_t state, uint32_t byte_class) const {
    return next_[static_cast<size_t>(state) * num_classes_ + byte_class];
  }

  // One line per state: its rule, edges and whether it is final. For tests and debugging.
  std::string DebugString() const;

 private:
  friend class GrammarBuilder;
  Grammar() = default;

  uint32_t root_rule_ = 0;
  std::vector<uint32_t> rule_start_;
  std::vector<std::string> rule_name_;
  std::vector<std::bitset<256>> follow_;
  std::vector<uint32_t> rule_of_;
  std::vector<uint8_t> final_;
  std::vector<uint8_t> has_bytes_;
  std::vector<uint32_t> min_to_final_;
  uint32_t num_classes_ = 0;
  uint8_t byte_class_[256] = {};
  std::vector<uint8_t> class_first_byte_;
  std::vector<uint32_t> next_;        // [num_states, num_classes]
  std::vector<uint32_t> call_begin_;  // [num_states + 1] into calls_
  std::vector<CallEdge> calls_;
};

}  // namespace tpserve
