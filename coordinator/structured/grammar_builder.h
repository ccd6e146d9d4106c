// Builds a Grammar (grammar.h): rules are written as NFA fragments (byte ranges, epsilon
// edges, calls of other rules), then each rule is determinized, states that cannot finish
// are pruned, and left recursion is refused. Used by json_schema.cc and regex_subset.cc;
// tested by tests/structured_output_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/structured/grammar.h"

namespace tpserve {

class GrammarBuilder {
 public:
  using Rule = uint32_t;
  using Node = uint32_t;  // an NFA node; nodes are not shared between rules

  // `max_states` bounds the NFA nodes and the built automaton's states: past it, building
  // fails with a ResourceExhausted error instead of using unbounded memory.
  explicit GrammarBuilder(uint32_t max_states = 200'000) : max_states_(max_states) {}

  // Reserves a rule, so bodies can call rules defined later or themselves. `name` is what
  // errors say about the rule (a schema path).
  Rule DeclareRule(std::string name);
  // The rule's body is what reads from `start` to `accept`.
  void DefineRule(Rule rule, Node start, Node accept);
  bool IsDefined(Rule rule) const { return rules_[rule].start != kNone; }

  Node NewNode();
  void Epsilon(Node from, Node to);
  void Bytes(Node from, Node to, uint8_t lo, uint8_t hi);
  void Call(Node from, Node to, Rule rule);

  // Fragment helpers: each builds fresh nodes after `from` and returns the node it ends at.
  Node Literal(Node from, std::string_view bytes);
  Node Range(Node from, uint8_t lo, uint8_t hi);
  // One call of any of `rules` (one node, several call edges).
  Node CallAny(Node from, const std::vector<Rule>& rules);

  // True once more than max_states nodes exist: callers that unroll repetitions check it
  // to stop early.
  bool TooLarge() const { return nodes_.size() > max_states_; }
  uint32_t max_states() const { return max_states_; }

  // Determinizes every rule reachable from `root`. Errors: InvalidArgument naming the rule
  // for left recursion and for a root that matches nothing; ResourceExhausted past
  // max_states; Internal for a rule that matches the empty string (a builder bug).
  absl::StatusOr<std::shared_ptr<const Grammar>> Build(Rule root) const;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Edge {
    enum Kind : uint8_t { kEpsilon, kBytes, kCall } kind;
    uint8_t lo = 0, hi = 0;
    uint32_t rule = 0;
    Node to = 0;
  };
  struct RuleInfo {
    std::string name;
    Node start = kNone;
    Node accept = kNone;
  };

  struct Dfa;  // the determinized rules, before pruning (grammar_builder.cc)

  // The steps of Build.
  absl::StatusOr<Dfa> Determinize(Rule root) const;
  absl::Status Prune(Rule root, Dfa* dfa) const;
  absl::Status CheckLeftRecursion(const Dfa& dfa, const std::vector<uint8_t>& reached) const;
  std::shared_ptr<Grammar> Renumber(Rule root, const Dfa& dfa, const std::vector<uint8_t>& reached) const;
  static void ComputeDistances(Grammar* g);
  static void ComputeFollow(Grammar* g);

  uint32_t max_states_;
  std::vector<std::vector<Edge>> nodes_;
  std::vector<RuleInfo> rules_;
};

}  // namespace tpserve
