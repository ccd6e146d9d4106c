// Per-state token classification (compiled_grammar.h). Tested by
// tests/structured_output_test.cc.
#include "coordinator/structured/compiled_grammar.h"

#include <algorithm>
#include <utility>

#include "coordinator/structured/grammar_matcher.h"

namespace tpserve {
namespace {

enum class Verdict : uint8_t { kRejected, kAccepted, kUncertain };

// Walks the trie from one state whose rule is the bottom of the stack: ending that rule
// mid-token ("escaping") leaves the rest of the token to unknown callers, so such tokens
// are uncertain, unless the byte after the escape cannot follow the rule anywhere.
class PositionClassifier {
 public:
  PositionClassifier(const Grammar& grammar, const TokenVocabulary& vocab)
      : g_(grammar), vocab_(vocab), trie_(vocab.trie()) {}

  CompiledGrammar::PositionTokens Classify(uint32_t state) {
    ranges_.clear();
    follow_ = &g_.follow(g_.rule_of(state));
    levels_.resize(std::max<size_t>(levels_.size(), vocab_.max_token_bytes() + 1));
    levels_[0].Clear();
    levels_[0].Add({}, state);
    const TokenVocabulary::TrieNode& root = trie_[0];
    for (uint32_t c = 1; c < root.end; c = trie_[c].end) Visit(c, 1, /*pending=*/false);
    return Collect();
  }

 private:
  void Mark(uint32_t lo, uint32_t hi, Verdict v) {
    if (lo >= hi || v == Verdict::kRejected) return;
    if (!ranges_.empty() && ranges_.back().verdict == v && ranges_.back().hi == lo) {
      ranges_.back().hi = hi;
    } else {
      ranges_.push_back({lo, hi, v});
    }
  }

  // Node `c` at depth `depth` (bytes of its prefix). `pending`: some path escaped earlier
  // with a byte that may follow the rule.
  void Visit(uint32_t c, size_t depth, bool pending) {
    const TokenVocabulary::TrieNode& node = trie_[c];
    const StackSet& before = levels_[depth - 1];
    pending = pending || (depth > 1 && before.can_end() && follow_->test(node.byte));
    StackSet& after = levels_[depth];
    StepStacks(g_, before, node.byte, &after, &scratch_);
    const bool live = !after.empty();
    const bool ended = after.can_end();
    Mark(node.lo, node.mid, (live || ended) ? Verdict::kAccepted : pending ? Verdict::kUncertain : Verdict::kRejected);
    if (live) {
      for (uint32_t k = c + 1; k < node.end; k = trie_[k].end) Visit(k, depth + 1, pending);
      return;
    }
    // No stack left: whatever follows is up to the callers.
    for (uint32_t k = c + 1; k < node.end; k = trie_[k].end) {
      if (pending || (ended && follow_->test(trie_[k].byte))) Mark(trie_[k].lo, trie_[k].hi, Verdict::kUncertain);
    }
  }

  CompiledGrammar::PositionTokens Collect() const {
    CompiledGrammar::PositionTokens out;
    size_t accepted = 0;
    for (const Range& r : ranges_) {
      if (r.verdict == Verdict::kAccepted) accepted += r.hi - r.lo;
    }
    const int32_t size = vocab_.size();
    const bool dense = accepted * 32 > static_cast<size_t>(size);
    if (dense) out.accepted_words.assign((size + 63) / 64, 0);
    for (const Range& r : ranges_) {
      for (uint32_t i = r.lo; i < r.hi; ++i) {
        if (r.verdict == Verdict::kAccepted) {
          const int32_t id = vocab_.sorted_id(i);
          if (dense) {
            out.accepted_words[id >> 6] |= uint64_t{1} << (id & 63);
          } else {
            out.accepted_ids.push_back(id);
          }
        } else {
          const uint32_t prev = out.uncertain.empty() ? UINT32_MAX : out.uncertain.back();
          uint32_t lcp = 0;
          if (prev != UINT32_MAX) {
            const std::string_view a = vocab_.sorted_bytes(prev);
            const std::string_view b = vocab_.sorted_bytes(i);
            while (lcp < a.size() && lcp < b.size() && a[lcp] == b[lcp]) ++lcp;
          }
          out.uncertain.push_back(i);
          out.uncertain_lcp.push_back(lcp);
        }
      }
    }
    std::sort(out.accepted_ids.begin(), out.accepted_ids.end());
    return out;
  }

  struct Range {
    uint32_t lo, hi;
    Verdict verdict;
  };

  const Grammar& g_;
  const TokenVocabulary& vocab_;
  const std::vector<TokenVocabulary::TrieNode>& trie_;
  const std::bitset<256>* follow_ = nullptr;
  std::vector<StackSet> levels_;
  std::vector<uint32_t> scratch_;
  std::vector<Range> ranges_;
};

}  // namespace

std::shared_ptr<const CompiledGrammar> CompiledGrammar::Create(std::shared_ptr<const Grammar> grammar,
                                                               std::shared_ptr<const TokenVocabulary> vocabulary) {
  auto compiled = std::shared_ptr<CompiledGrammar>(new CompiledGrammar());
  compiled->grammar_ = std::move(grammar);
  compiled->vocabulary_ = std::move(vocabulary);
  const Grammar& g = *compiled->grammar_;
  compiled->positions_.resize(g.num_states());
  PositionClassifier classifier(g, *compiled->vocabulary_);
  for (uint32_t s = 0; s < g.num_states(); ++s) {
    if (g.has_bytes(s)) compiled->positions_[s] = classifier.Classify(s);
  }
  return compiled;
}

size_t CompiledGrammar::memory_bytes() const {
  size_t bytes = positions_.size() * sizeof(PositionTokens);
  for (const PositionTokens& p : positions_) {
    bytes += p.accepted_words.size() * 8 + p.accepted_ids.size() * 4 + p.uncertain.size() * 8;
  }
  return bytes;
}

}  // namespace tpserve
