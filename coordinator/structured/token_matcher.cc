// Token masks and token acceptance (token_matcher.h). Tested by
// tests/structured_output_test.cc.
#include "coordinator/structured/token_matcher.h"

#include <algorithm>
#include <utility>

namespace tpserve {

TokenMatcher::TokenMatcher(std::shared_ptr<const CompiledGrammar> compiled)
    : compiled_(std::move(compiled)), bytes_(compiled_->shared_grammar()) {}

bool TokenMatcher::AcceptToken(int32_t id) {
  const TokenVocabulary& vocab = compiled_->vocabulary();
  if (terminated_ || id < 0 || id >= vocab.size()) return false;
  switch (vocab.kind(id)) {
    case TokenKind::kEos:
      if (!bytes_.CanEnd()) return false;
      terminated_ = true;
      return true;
    case TokenKind::kNever:
      return false;
    case TokenKind::kText:
      return bytes_.AdvanceBytes(vocab.bytes(id));
  }
  return false;
}

void TokenMatcher::WalkUncertain(absl::Span<const uint32_t> stack, BitMask* out) const {
  const CompiledGrammar::PositionTokens& pos = compiled_->position(stack.back());
  if (pos.uncertain.empty()) return;
  const TokenVocabulary& vocab = compiled_->vocabulary();
  const Grammar& g = compiled_->grammar();
  scratch_.levels.resize(std::max<size_t>(scratch_.levels.size(), vocab.max_token_bytes() + 1));
  scratch_.levels[0].Clear();
  scratch_.levels[0].Add(stack.subspan(0, stack.size() - 1), stack.back());
  constexpr size_t kNone = SIZE_MAX;
  size_t valid = 0;        // scratch_.levels[0, valid] hold the previous token's prefix
  size_t dead_at = kNone;  // the previous token died reading its byte dead_at
  for (size_t k = 0; k < pos.uncertain.size(); ++k) {
    const size_t lcp = k == 0 ? 0 : pos.uncertain_lcp[k];
    if (dead_at != kNone && lcp > dead_at) continue;  // shares the dead prefix
    dead_at = kNone;
    const std::string_view bytes = vocab.sorted_bytes(pos.uncertain[k]);
    size_t d = std::min(lcp, valid);
    for (; d < bytes.size(); ++d) {
      StepStacks(g, scratch_.levels[d], static_cast<uint8_t>(bytes[d]), &scratch_.levels[d + 1], &scratch_.below);
      if (!scratch_.levels[d + 1].alive()) {
        dead_at = d;
        break;
      }
    }
    valid = d;
    if (dead_at == kNone) out->Set(vocab.sorted_id(pos.uncertain[k]));
  }
}

void FillNextTokenMask(const TokenMatcher& matcher, BitMask* out) {
  const CompiledGrammar& compiled = matcher.compiled();
  const TokenVocabulary& vocab = compiled.vocabulary();
  out->Resize(vocab.size());
  const GrammarMatcher& bytes = matcher.byte_matcher();
  if (!matcher.IsTerminated()) {
    const StackSet& stacks = bytes.stacks();
    for (size_t i = 0; i < stacks.size(); ++i) {
      const CompiledGrammar::PositionTokens& pos = compiled.position(stacks.top(i));
      if (!pos.accepted_words.empty()) {
        out->OrWords(pos.accepted_words);
      } else {
        for (const int32_t id : pos.accepted_ids) out->Set(id);
      }
      matcher.WalkUncertain(stacks.stack(i), out);
    }
  }
  if (matcher.IsTerminated() || bytes.CanEnd()) {
    for (const int32_t id : vocab.eos_ids()) out->Set(id);
  }
}

}  // namespace tpserve
