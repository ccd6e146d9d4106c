// Per-state token classification (compiled_grammar.h). Tested by
// tests/structured_output_test.cc.
#include "coordinator/structured/compiled_grammar.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
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
    levels_[0].top = state;
    const TokenVocabulary::TrieNode& root = trie_[0];
    for (uint32_t c = 1; c < root.end; c = trie_[c].end) Visit(c, 1, /*pending=*/false);
    return Collect();
  }

 private:
  // The stacks after some bytes of a token. Most of the time that is the one stack [top]
  // (the token stays in the state's rule, with no call open): kept as just `top`, a table
  // lookup per byte; anything else is a StackSet.
  struct Level {
    uint32_t top = Grammar::kNoState;  // kNoState: `stacks` holds the level
    StackSet stacks;
  };

  void Step(const Level& before, uint8_t byte, Level* after) {
    if (before.top == Grammar::kNoState) {
      after->top = Grammar::kNoState;
      StepStacks(g_, before.stacks, byte, &after->stacks, &scratch_);
      return;
    }
    const uint32_t next = g_.Next(before.top, byte);
    if (next != Grammar::kNoState && g_.calls(next).empty() && !g_.is_final(next)) {
      after->top = next;  // has byte edges: it is not final and can finish
      return;
    }
    after->top = Grammar::kNoState;
    after->stacks.Clear();
    if (next != Grammar::kNoState) {
      scratch_.clear();
      SettleState(g_, next, &scratch_, 0, &after->stacks);
    }
  }

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
    const Level& before = levels_[depth - 1];
    const bool escaped_before = before.top == Grammar::kNoState && before.stacks.can_end();
    pending = pending || (depth > 1 && escaped_before && follow_->test(node.byte));
    Level& after = levels_[depth];
    Step(before, node.byte, &after);
    const bool simple = after.top != Grammar::kNoState;
    const bool live = simple || !after.stacks.empty();
    const bool ended = !simple && after.stacks.can_end();
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
  std::vector<Level> levels_;
  std::vector<uint32_t> scratch_;
  std::vector<Range> ranges_;
};

// Classes of states that no token of at most `horizon` bytes tells apart, for the
// classification PositionClassifier computes: Moore's partition refinement, stopped after
// `horizon` + 1 rounds. Initial classes: finality and the FOLLOW set of the rule (what an
// escape may be followed by); each round splits states by their byte successors' classes
// and their calls (callee rule, class of the return state).
std::vector<uint32_t> TokenEquivalenceClasses(const Grammar& g, size_t horizon) {
  const uint32_t n = g.num_states();
  std::vector<uint32_t> cls(n);
  absl::flat_hash_map<std::vector<uint32_t>, uint32_t> ids;
  std::vector<uint32_t> key;
  for (uint32_t s = 0; s < n; ++s) {
    const auto& follow = g.follow(g.rule_of(s));
    key.assign({g.is_final(s)});
    for (int w = 0; w < 256; w += 32) {
      uint32_t bits = 0;
      for (int b = 0; b < 32; ++b) bits |= static_cast<uint32_t>(follow.test(w + b)) << b;
      key.push_back(bits);
    }
    cls[s] = ids.try_emplace(key, static_cast<uint32_t>(ids.size())).first->second;
  }
  std::vector<uint32_t> next(n);
  for (size_t round = 0; round <= horizon; ++round) {
    const size_t before = ids.size();
    ids.clear();
    std::vector<std::pair<uint32_t, uint32_t>> calls;
    for (uint32_t s = 0; s < n; ++s) {
      key.assign({cls[s]});
      for (uint32_t c = 0; c < g.num_byte_classes(); ++c) {
        const uint32_t t = g.NextByClass(s, c);
        key.push_back(t == Grammar::kNoState ? UINT32_MAX : cls[t]);
      }
      calls.clear();
      for (const Grammar::CallEdge& call : g.calls(s)) calls.emplace_back(call.rule, cls[call.return_state]);
      std::sort(calls.begin(), calls.end());
      for (const auto& [rule, ret] : calls) key.insert(key.end(), {rule, ret});
      next[s] = ids.try_emplace(key, static_cast<uint32_t>(ids.size())).first->second;
    }
    cls.swap(next);
    if (ids.size() == before) break;  // stable
  }
  return cls;
}

}  // namespace

std::shared_ptr<const CompiledGrammar> CompiledGrammar::Create(std::shared_ptr<const Grammar> grammar,
                                                               std::shared_ptr<const TokenVocabulary> vocabulary,
                                                               int num_threads) {
  auto compiled = std::shared_ptr<CompiledGrammar>(new CompiledGrammar());
  compiled->grammar_ = std::move(grammar);
  compiled->vocabulary_ = std::move(vocabulary);
  const Grammar& g = *compiled->grammar_;
  const std::vector<uint32_t> cls = TokenEquivalenceClasses(g, compiled->vocabulary_->max_token_bytes());
  compiled->table_of_state_.assign(g.num_states(), 0);
  absl::flat_hash_map<uint32_t, uint32_t> table_of_class;
  std::vector<uint32_t> representative;  // by table: the state whose walk fills it
  for (uint32_t s = 0; s < g.num_states(); ++s) {
    if (!g.has_bytes(s)) continue;
    const auto [it, inserted] = table_of_class.try_emplace(cls[s], static_cast<uint32_t>(representative.size()));
    if (inserted) representative.push_back(s);
    compiled->table_of_state_[s] = it->second;
  }
  compiled->tables_.resize(std::max<size_t>(representative.size(), 1));
  // Tables are independent: threads take the next one from a shared counter.
  std::atomic<size_t> next_table{0};
  const auto work = [&] {
    PositionClassifier classifier(g, *compiled->vocabulary_);
    for (size_t t = next_table++; t < representative.size(); t = next_table++) {
      compiled->tables_[t] = classifier.Classify(representative[t]);
    }
  };
  std::vector<std::thread> helpers;
  for (int i = 1; i < num_threads && static_cast<size_t>(i) < representative.size(); ++i) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  return compiled;
}

size_t CompiledGrammar::memory_bytes() const {
  size_t bytes = table_of_state_.size() * 4 + tables_.size() * sizeof(PositionTokens);
  for (const PositionTokens& p : tables_) {
    bytes += p.accepted_words.size() * 8 + p.accepted_ids.size() * 4 + p.uncertain.size() * 8;
  }
  return bytes;
}

}  // namespace tpserve
