// Grammar-constrained decoding for one output: which token ids may come next
// (FillNextTokenMask) and the matcher's advance by a sampled token (AcceptToken).
// Tested by tests/structured_output_test.cc; timed by bench/structured_output_bench.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "coordinator/structured/bit_mask.h"
#include "coordinator/structured/compiled_grammar.h"
#include "coordinator/structured/grammar_matcher.h"

namespace tpserve {

// One per request, used by one thread at a time (FillNextTokenMask reuses scratch held
// here); copyable, which is how to try tokens and go back.
class TokenMatcher {
 public:
  explicit TokenMatcher(std::shared_ptr<const CompiledGrammar> compiled);

  // Advances by the token's bytes; an EOS token is accepted only when CanEnd() and then
  // terminates the matcher. Returns false, and changes nothing, for a token the mask would
  // not allow.
  bool AcceptToken(int32_t id);
  // The output so far is a complete document.
  bool CanEnd() const { return bytes_.CanEnd(); }
  // An EOS token was accepted.
  bool IsTerminated() const { return terminated_; }

  const GrammarMatcher& byte_matcher() const { return bytes_; }
  const CompiledGrammar& compiled() const { return *compiled_; }

 private:
  friend void FillNextTokenMask(const TokenMatcher& matcher, BitMask* out);
  // Sets in `out` the uncertain tokens of the top of `stack` that the whole stack accepts.
  void WalkUncertain(absl::Span<const uint32_t> stack, BitMask* out) const;

  std::shared_ptr<const CompiledGrammar> compiled_;
  GrammarMatcher bytes_;
  bool terminated_ = false;
  // Scratch for FillNextTokenMask: stack sets by depth into the token being tried. Copies
  // of the matcher start with empty ones.
  struct Scratch {
    Scratch() = default;
    Scratch(const Scratch&) {}
    Scratch& operator=(const Scratch&) { return *this; }
    std::vector<StackSet> levels;
    std::vector<uint32_t> below;
  };
  mutable Scratch scratch_;
};

// Resizes `out` to the vocabulary and sets exactly the ids that may come next: text tokens
// after whose bytes the output can still be completed, and the EOS ids when the output is
// a complete document. After termination only the EOS ids are set.
void FillNextTokenMask(const TokenMatcher& matcher, BitMask* out);

}  // namespace tpserve
