// Runs a Grammar (grammar.h) over bytes: the pushdown automaton's state is a small set of
// stacks of automaton states, advanced a byte at a time and copied cheaply. Tested by
// tests/structured_output_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "coordinator/structured/grammar.h"

namespace tpserve {

// The stacks the automaton may be in (ambiguity, from anyOf, keeps several). Each stack
// is a list of state ids: the last is the current state, one with byte edges; the ones
// below are the states to return to as rules end. `can_end` says that the last byte
// ended the outermost rule (for a document: the output may stop here).
class StackSet {
 public:
  void Clear() {
    frames_.clear();
    ends_.clear();
    can_end_ = false;
  }
  size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  // Alive: some byte may follow, or the outermost rule has just ended.
  bool alive() const { return !ends_.empty() || can_end_; }
  bool can_end() const { return can_end_; }
  void set_can_end() { can_end_ = true; }
  absl::Span<const uint32_t> stack(size_t i) const {
    const uint32_t begin = i == 0 ? 0 : ends_[i - 1];
    return absl::MakeConstSpan(frames_.data() + begin, frames_.data() + ends_[i]);
  }
  uint32_t top(size_t i) const { return frames_[ends_[i] - 1]; }
  // Adds the stack `below` + `top` unless an equal one is already here.
  void Add(absl::Span<const uint32_t> below, uint32_t top);

 private:
  std::vector<uint32_t> frames_;
  std::vector<uint32_t> ends_;
  bool can_end_ = false;
};

// Puts into `out` what `state` (just reached, with return states (*below)[0, depth))
// stands for: itself when it has byte edges, the starts of the rules it calls, and, when
// it is final, its caller's return state (recursively). `below` is scratch the call may
// grow and overwrite past `depth`.
void SettleState(const Grammar& grammar, uint32_t state, std::vector<uint32_t>* below, size_t depth, StackSet* out);
// `out` = the stacks after reading `byte` from `in` (out.alive() is false when no stack
// takes it). `scratch` is reused between calls.
void StepStacks(const Grammar& grammar, const StackSet& in, uint8_t byte, StackSet* out,
                std::vector<uint32_t>* scratch);

// The byte-level matcher of one output: copyable (the state is a few short vectors), so a
// copy is the way to try bytes and go back.
class GrammarMatcher {
 public:
  // At the start of the grammar's root rule.
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Reads `byte`. Returns false, and leaves the state as it was, when the grammar does not
  // allow it here.
  bool Advance(uint8_t byte);
  // All of `bytes` or nothing.
  bool AdvanceBytes(std::string_view bytes);
  // The output so far is a complete match of the root rule.
  bool CanEnd() const { return stacks_.can_end(); }
  // No byte may follow (the output is complete and the grammar allows nothing after it).
  bool IsComplete() const { return stacks_.empty(); }
  // The fewest bytes that complete the output (empty when CanEnd()). Always exists: every
  // state the matcher can reach has a completion (Grammar's guarantees).
  std::string ShortestCompletion() const;

  const StackSet& stacks() const { return stacks_; }
  const Grammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const Grammar>& shared_grammar() const { return grammar_; }

 private:
  // Buffers reused between calls; copies of the matcher start with empty ones.
  struct Scratch {
    Scratch() = default;
    Scratch(const Scratch&) {}
    Scratch& operator=(const Scratch&) { return *this; }
    StackSet sets[2];
    std::vector<uint32_t> below;
  };

  std::shared_ptr<const Grammar> grammar_;
  StackSet stacks_;
  Scratch scratch_;
};

}  // namespace tpserve
