// The pushdown automaton of GrammarMatcher (grammar_matcher.h). Tested by
// tests/structured_output_test.cc.
#include "coordinator/structured/grammar_matcher.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/base.h"

namespace tpserve {

void StackSet::Add(absl::Span<const uint32_t> below, uint32_t top) {
  const size_t len = below.size() + 1;
  for (size_t i = 0; i < ends_.size(); ++i) {
    const uint32_t begin = i == 0 ? 0 : ends_[i - 1];
    if (ends_[i] - begin != len || frames_[ends_[i] - 1] != top) continue;
    if (std::equal(below.begin(), below.end(), frames_.begin() + begin)) return;
  }
  frames_.insert(frames_.end(), below.begin(), below.end());
  frames_.push_back(top);
  ends_.push_back(static_cast<uint32_t>(frames_.size()));
}

void SettleState(const Grammar& grammar, uint32_t state, std::vector<uint32_t>* below, size_t depth, StackSet* out) {
  if (grammar.has_bytes(state)) out->Add(absl::MakeConstSpan(below->data(), depth), state);
  const auto calls = grammar.calls(state);
  if (!calls.empty()) {
    if (below->size() <= depth) below->resize(depth + 1);
    for (const Grammar::CallEdge& call : calls) {
      // A rule's start is not final (no rule matches the empty string), so the callee
      // never pops back below depth + 1 here and (*below)[0, depth] stays intact.
      (*below)[depth] = call.return_state;
      SettleState(grammar, grammar.rule_start(call.rule), below, depth + 1, out);
    }
  }
  if (grammar.is_final(state)) {
    if (depth == 0) {
      out->set_can_end();
    } else {
      SettleState(grammar, (*below)[depth - 1], below, depth - 1, out);
    }
  }
}

void StepStacks(const Grammar& grammar, const StackSet& in, uint8_t byte, StackSet* out,
                std::vector<uint32_t>* scratch) {
  out->Clear();
  for (size_t i = 0; i < in.size(); ++i) {
    const uint32_t next = grammar.Next(in.top(i), byte);
    if (next == Grammar::kNoState) continue;
    const auto stack = in.stack(i);
    scratch->assign(stack.begin(), stack.end() - 1);
    SettleState(grammar, next, scratch, stack.size() - 1, out);
  }
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  SettleState(*grammar_, grammar_->rule_start(grammar_->root_rule()), &scratch_.below, 0, &stacks_);
}

bool GrammarMatcher::Advance(uint8_t byte) {
  StackSet& next = scratch_.sets[0];
  StepStacks(*grammar_, stacks_, byte, &next, &scratch_.below);
  if (!next.alive()) return false;
  std::swap(stacks_, next);
  return true;
}

bool GrammarMatcher::AdvanceBytes(std::string_view bytes) {
  // Steps between the two scratch sets; stacks_ changes only once all bytes are read.
  for (size_t i = 0; i < bytes.size(); ++i) {
    const StackSet& from = i == 0 ? stacks_ : scratch_.sets[(i - 1) % 2];
    StackSet& to = scratch_.sets[i % 2];
    StepStacks(*grammar_, from, static_cast<uint8_t>(bytes[i]), &to, &scratch_.below);
    if (!to.alive()) return false;
  }
  if (!bytes.empty()) std::swap(stacks_, scratch_.sets[(bytes.size() - 1) % 2]);
  return true;
}

namespace {

// Appends the shortest bytes that take `state` to a final state of its rule.
void FinishRule(const Grammar& g, uint32_t state, std::string* out) {
  while (!g.is_final(state)) {
    const uint32_t want = g.min_bytes_to_final(state);
    bool moved = false;
    for (uint32_t c = 0; c < g.num_byte_classes() && !moved; ++c) {
      const uint32_t t = g.NextByClass(state, c);
      if (t != Grammar::kNoState && 1 + g.min_bytes_to_final(t) == want) {
        out->push_back(static_cast<char>(g.ByteOfClass(c)));
        state = t;
        moved = true;
      }
    }
    for (const Grammar::CallEdge& call : g.calls(state)) {
      if (moved) break;
      const uint32_t start = g.rule_start(call.rule);
      if (g.min_bytes_to_final(start) + g.min_bytes_to_final(call.return_state) == want) {
        FinishRule(g, start, out);
        state = call.return_state;
        moved = true;
      }
    }
    TP_CHECK(moved);
  }
}

}  // namespace

std::string GrammarMatcher::ShortestCompletion() const {
  if (stacks_.can_end()) return "";
  const Grammar& g = *grammar_;
  size_t best = 0;
  uint64_t best_cost = UINT64_MAX;
  for (size_t i = 0; i < stacks_.size(); ++i) {
    uint64_t cost = 0;
    for (const uint32_t s : stacks_.stack(i)) cost += g.min_bytes_to_final(s);
    if (cost < best_cost) {
      best_cost = cost;
      best = i;
    }
  }
  std::string out;
  const auto stack = stacks_.stack(best);
  for (size_t i = stack.size(); i-- > 0;) FinishRule(g, stack[i], &out);
  return out;
}

}  // namespace tpserve
