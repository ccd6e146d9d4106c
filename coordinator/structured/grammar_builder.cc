// Determinization and checks of GrammarBuilder (grammar_builder.h). Tested by
// tests/structured_output_test.cc.
#include "coordinator/structured/grammar_builder.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

constexpr uint32_t kNone = UINT32_MAX;
constexpr uint32_t kInfinite = UINT32_MAX;

uint32_t AddSaturating(uint32_t a, uint32_t b) {
  return (a == kInfinite || b == kInfinite || a + b < a) ? kInfinite : a + b;
}

// A determinized state, before pruning and renumbering.
struct DfaState {
  uint32_t rule;  // builder rule id
  bool final = false;
  std::vector<uint32_t> next;            // per byte class; kNone when absent
  std::vector<Grammar::CallEdge> calls;  // rule: builder rule id
};

}  // namespace

GrammarBuilder::Rule GrammarBuilder::DeclareRule(std::string name) {
  rules_.push_back({std::move(name), kNone, kNone});
  return static_cast<Rule>(rules_.size() - 1);
}

void GrammarBuilder::DefineRule(Rule rule, Node start, Node accept) {
  rules_[rule].start = start;
  rules_[rule].accept = accept;
}

GrammarBuilder::Node GrammarBuilder::NewNode() {
  nodes_.emplace_back();
  return static_cast<Node>(nodes_.size() - 1);
}

void GrammarBuilder::Epsilon(Node from, Node to) { nodes_[from].push_back({Edge::kEpsilon, 0, 0, 0, to}); }

void GrammarBuilder::Bytes(Node from, Node to, uint8_t lo, uint8_t hi) {
  TP_CHECK(lo <= hi);
  nodes_[from].push_back({Edge::kBytes, lo, hi, 0, to});
}

void GrammarBuilder::Call(Node from, Node to, Rule rule) { nodes_[from].push_back({Edge::kCall, 0, 0, rule, to}); }

GrammarBuilder::Node GrammarBuilder::Literal(Node from, std::string_view bytes) {
  Node at = from;
  for (const char c : bytes) at = Range(at, static_cast<uint8_t>(c), static_cast<uint8_t>(c));
  if (at == from) {  // an empty literal still returns a fresh node
    at = NewNode();
    Epsilon(from, at);
  }
  return at;
}

GrammarBuilder::Node GrammarBuilder::Range(Node from, uint8_t lo, uint8_t hi) {
  const Node to = NewNode();
  Bytes(from, to, lo, hi);
  return to;
}

GrammarBuilder::Node GrammarBuilder::CallAny(Node from, const std::vector<Rule>& rules) {
  const Node to = NewNode();
  for (const Rule r : rules) Call(from, to, r);
  return to;
}

struct GrammarBuilder::Dfa {
  uint32_t num_classes = 0;
  uint8_t byte_class[256] = {};
  std::vector<DfaState> states;
  std::vector<uint32_t> start;  // by builder rule; kNone for rules not reached
};

absl::StatusOr<std::shared_ptr<const Grammar>> GrammarBuilder::Build(Rule root) const {
  if (TooLarge()) {
    return absl::ResourceExhaustedError(absl::StrCat("the grammar needs more than ", max_states_, " states"));
  }
  TP_ASSIGN_OR_RETURN(Dfa dfa, Determinize(root));
  TP_RETURN_IF_ERROR(Prune(root, &dfa));
  // Keep what the root reaches.
  const uint32_t n = static_cast<uint32_t>(dfa.states.size());
  std::vector<uint8_t> reached(n, 0);
  std::vector<uint32_t> work = {dfa.start[root]};
  reached[dfa.start[root]] = 1;
  const auto reach = [&](uint32_t s) {
    if (!reached[s]) {
      reached[s] = 1;
      work.push_back(s);
    }
  };
  while (!work.empty()) {
    const uint32_t s = work.back();
    work.pop_back();
    for (const uint32_t t : dfa.states[s].next) {
      if (t != kNone) reach(t);
    }
    for (const auto& call : dfa.states[s].calls) {
      reach(call.return_state);
      reach(dfa.start[call.rule]);
    }
  }
  TP_RETURN_IF_ERROR(CheckLeftRecursion(dfa, reached));
  std::shared_ptr<Grammar> grammar = Renumber(root, dfa, reached);
  ComputeDistances(grammar.get());
  ComputeFollow(grammar.get());
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

// Subset construction, rule by rule, for the rules reachable from the root, over byte
// classes (bytes no edge tells apart).
absl::StatusOr<GrammarBuilder::Dfa> GrammarBuilder::Determinize(Rule root) const {
  Dfa dfa;
  bool boundary[257] = {};
  boundary[0] = true;
  for (const auto& edges : nodes_) {
    for (const Edge& e : edges) {
      if (e.kind != Edge::kBytes) continue;
      boundary[e.lo] = true;
      boundary[e.hi + 1] = true;
    }
  }
  for (int b = 0; b < 256; ++b) {
    if (b > 0 && boundary[b]) ++dfa.num_classes;
    dfa.byte_class[b] = static_cast<uint8_t>(dfa.num_classes);
  }
  ++dfa.num_classes;

  dfa.start.assign(rules_.size(), kNone);
  std::vector<uint32_t> mark(nodes_.size(), 0);
  uint32_t epoch = 0;
  std::vector<Node> stack;
  const auto closure = [&](std::vector<Node>* set) {
    ++epoch;
    stack.assign(set->begin(), set->end());
    set->clear();
    while (!stack.empty()) {
      const Node n = stack.back();
      stack.pop_back();
      if (mark[n] == epoch) continue;
      mark[n] = epoch;
      set->push_back(n);
      for (const Edge& e : nodes_[n]) {
        if (e.kind == Edge::kEpsilon && mark[e.to] != epoch) stack.push_back(e.to);
      }
    }
    std::sort(set->begin(), set->end());
  };
  std::deque<Rule> rule_queue = {root};
  while (!rule_queue.empty()) {
    const Rule r = rule_queue.front();
    rule_queue.pop_front();
    if (dfa.start[r] != kNone) continue;
    const RuleInfo& info = rules_[r];
    if (info.start == kNone) return absl::InternalError(absl::StrCat(info.name, " is called but never defined"));
    const uint32_t first = static_cast<uint32_t>(dfa.states.size());
    absl::flat_hash_map<std::vector<Node>, uint32_t> ids;
    std::vector<std::vector<Node>> sets;  // by state - first
    const auto intern = [&](std::vector<Node> set) -> absl::StatusOr<uint32_t> {
      closure(&set);
      auto [it, inserted] = ids.try_emplace(set, static_cast<uint32_t>(dfa.states.size()));
      if (inserted) {
        if (dfa.states.size() >= max_states_) {
          return absl::ResourceExhaustedError(absl::StrCat("the grammar needs more than ", max_states_, " states"));
        }
        dfa.states.push_back({r,
                              std::binary_search(set.begin(), set.end(), info.accept),
                              std::vector<uint32_t>(dfa.num_classes, kNone),
                              {}});
        sets.push_back(std::move(set));
      }
      return it->second;
    };
    TP_ASSIGN_OR_RETURN(dfa.start[r], intern({info.start}));
    if (dfa.states[first].final) return absl::InternalError(absl::StrCat(info.name, " matches the empty string"));
    std::vector<std::vector<Node>> by_class(dfa.num_classes);
    std::vector<std::pair<Rule, Node>> calls;
    for (size_t i = first; i < dfa.states.size(); ++i) {  // grows as new subsets appear
      for (auto& targets : by_class) targets.clear();
      calls.clear();
      for (const Node n : sets[i - first]) {
        for (const Edge& e : nodes_[n]) {
          if (e.kind == Edge::kBytes) {
            for (uint32_t c = dfa.byte_class[e.lo]; c <= dfa.byte_class[e.hi]; ++c) by_class[c].push_back(e.to);
          } else if (e.kind == Edge::kCall) {
            calls.emplace_back(e.rule, e.to);
          }
        }
      }
      for (uint32_t c = 0; c < dfa.num_classes; ++c) {
        if (by_class[c].empty()) continue;
        TP_ASSIGN_OR_RETURN(const uint32_t target, intern(by_class[c]));
        dfa.states[i].next[c] = target;
      }
      std::sort(calls.begin(), calls.end());
      for (size_t a = 0; a < calls.size();) {  // one edge per callee
        size_t b = a;
        std::vector<Node> targets;
        while (b < calls.size() && calls[b].first == calls[a].first) targets.push_back(calls[b++].second);
        TP_ASSIGN_OR_RETURN(const uint32_t target, intern(std::move(targets)));
        dfa.states[i].calls.push_back({calls[a].first, target});
        if (dfa.start[calls[a].first] == kNone) rule_queue.push_back(calls[a].first);
        a = b;
      }
    }
  }
  return dfa;
}

// Removes what cannot finish: states that cannot reach a final state of their rule and
// calls of rules that match nothing (found by a backwards worklist: a call edge counts
// once its callee is known to match something).
absl::Status GrammarBuilder::Prune(Rule root, Dfa* dfa) const {
  auto& states = dfa->states;
  const uint32_t n = static_cast<uint32_t>(states.size());
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> preds(n);  // (state, callee or kNone)
  for (uint32_t s = 0; s < n; ++s) {
    for (const uint32_t t : states[s].next) {
      if (t != kNone) preds[t].emplace_back(s, kNone);
    }
    for (const auto& call : states[s].calls) preds[call.return_state].emplace_back(s, call.rule);
  }
  std::vector<uint8_t> live(n, 0);
  std::vector<uint8_t> productive(rules_.size(), 0);
  std::vector<std::vector<uint32_t>> waiting(rules_.size());  // states waiting on a callee
  std::vector<uint32_t> work;
  const auto make_live = [&](uint32_t s) {
    if (!live[s]) {
      live[s] = 1;
      work.push_back(s);
    }
  };
  for (uint32_t s = 0; s < n; ++s) {
    if (states[s].final) make_live(s);
  }
  while (!work.empty()) {
    const uint32_t t = work.back();
    work.pop_back();
    const uint32_t rule = states[t].rule;
    if (dfa->start[rule] == t && !productive[rule]) {
      productive[rule] = 1;
      for (const uint32_t s : waiting[rule]) make_live(s);
    }
    for (const auto& [s, callee] : preds[t]) {
      if (callee == kNone || productive[callee]) {
        make_live(s);
      } else {
        waiting[callee].push_back(s);
      }
    }
  }
  if (!live[dfa->start[root]]) {
    return absl::InvalidArgumentError(
        absl::StrCat(rules_[root].name, " matches nothing: every way through it needs endless output"));
  }
  for (auto& state : states) {
    for (uint32_t& t : state.next) {
      if (t != kNone && !live[t]) t = kNone;
    }
    std::erase_if(state.calls,
                  [&](const Grammar::CallEdge& c) { return !productive[c.rule] || !live[c.return_state]; });
  }
  return absl::OkStatus();
}

// A rule whose start calls, through other rules' starts, itself would make the matcher
// push forever without reading a byte.
absl::Status GrammarBuilder::CheckLeftRecursion(const Dfa& dfa, const std::vector<uint8_t>& reached) const {
  std::vector<uint8_t> color(rules_.size(), 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<Rule, size_t>> path;
  for (Rule r0 = 0; r0 < rules_.size(); ++r0) {
    if (dfa.start[r0] == kNone || !reached[dfa.start[r0]] || color[r0] != 0) continue;
    path = {{r0, 0}};
    color[r0] = 1;
    while (!path.empty()) {
      auto& [r, next_call] = path.back();
      const auto& calls = dfa.states[dfa.start[r]].calls;
      if (next_call == calls.size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const Rule callee = calls[next_call++].rule;
      if (color[callee] == 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(rules_[callee].name, " refers to itself before any output (left recursion)"));
      }
      if (color[callee] == 0) {
        color[callee] = 1;
        path.emplace_back(callee, 0);
      }
    }
  }
  return absl::OkStatus();
}

// The Grammar of the reached states and rules, numbered densely in order.
std::shared_ptr<Grammar> GrammarBuilder::Renumber(Rule root, const Dfa& dfa,
                                                  const std::vector<uint8_t>& reached) const {
  const uint32_t n = static_cast<uint32_t>(dfa.states.size());
  std::vector<uint32_t> new_rule(rules_.size(), kNone);
  std::vector<uint32_t> new_state(n, kNone);
  auto grammar = std::shared_ptr<Grammar>(new Grammar());
  Grammar& g = *grammar;
  for (Rule r = 0; r < rules_.size(); ++r) {
    if (dfa.start[r] == kNone || !reached[dfa.start[r]]) continue;
    new_rule[r] = static_cast<uint32_t>(g.rule_start_.size());
    g.rule_start_.push_back(kNone);
    g.rule_name_.push_back(rules_[r].name);
  }
  for (uint32_t s = 0; s < n; ++s) {
    if (!reached[s]) continue;
    new_state[s] = static_cast<uint32_t>(g.rule_of_.size());
    g.rule_of_.push_back(new_rule[dfa.states[s].rule]);
  }
  for (Rule r = 0; r < rules_.size(); ++r) {
    if (new_rule[r] != kNone) g.rule_start_[new_rule[r]] = new_state[dfa.start[r]];
  }
  g.root_rule_ = new_rule[root];
  const uint32_t m = g.num_states();
  const uint32_t num_classes = dfa.num_classes;
  g.num_classes_ = num_classes;
  std::copy(dfa.byte_class, dfa.byte_class + 256, g.byte_class_);
  g.class_first_byte_.assign(num_classes, 0);
  for (int b = 255; b >= 0; --b) g.class_first_byte_[dfa.byte_class[b]] = static_cast<uint8_t>(b);
  g.next_.assign(static_cast<size_t>(m) * num_classes, kNone);
  g.final_.assign(m, 0);
  g.has_bytes_.assign(m, 0);
  g.call_begin_.assign(m + 1, 0);
  for (uint32_t s = 0; s < n; ++s) {  // in order, so call_begin_ is monotone
    const uint32_t ns = new_state[s];
    if (ns == kNone) continue;
    const DfaState& state = dfa.states[s];
    g.final_[ns] = state.final;
    for (uint32_t c = 0; c < num_classes; ++c) {
      if (state.next[c] == kNone) continue;
      g.next_[static_cast<size_t>(ns) * num_classes + c] = new_state[state.next[c]];
      g.has_bytes_[ns] = 1;
    }
    g.call_begin_[ns] = static_cast<uint32_t>(g.calls_.size());
    for (const auto& call : state.calls) g.calls_.push_back({new_rule[call.rule], new_state[call.return_state]});
    g.call_begin_[ns + 1] = static_cast<uint32_t>(g.calls_.size());
  }
  return grammar;
}

// Shortest distance to a final state (a call costs its callee's shortest match), by a
// worklist over reversed edges.
void GrammarBuilder::ComputeDistances(Grammar* grammar) {
  Grammar& g = *grammar;
  const uint32_t m = g.num_states();
  std::vector<std::vector<uint32_t>> byte_preds(m);
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> call_preds(m);           // (state, callee)
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> callers(g.num_rules());  // (state, return)
  for (uint32_t s = 0; s < m; ++s) {
    for (uint32_t c = 0; c < g.num_classes_; ++c) {
      const uint32_t t = g.NextByClass(s, c);
      if (t != kNone) byte_preds[t].push_back(s);
    }
    for (const auto& call : g.calls(s)) {
      call_preds[call.return_state].emplace_back(s, call.rule);
      callers[call.rule].emplace_back(s, call.return_state);
    }
  }
  std::vector<uint32_t>& dist = g.min_to_final_;
  dist.assign(m, kInfinite);
  std::deque<uint32_t> queue;
  for (uint32_t s = 0; s < m; ++s) {
    if (g.final_[s]) {
      dist[s] = 0;
      queue.push_back(s);
    }
  }
  const auto relax = [&](uint32_t s, uint32_t d) {
    if (d < dist[s]) {
      dist[s] = d;
      queue.push_back(s);
    }
  };
  while (!queue.empty()) {
    const uint32_t t = queue.front();
    queue.pop_front();
    for (const uint32_t s : byte_preds[t]) relax(s, AddSaturating(dist[t], 1));
    for (const auto& [s, callee] : call_preds[t]) relax(s, AddSaturating(dist[t], dist[g.rule_start_[callee]]));
    const uint32_t rule = g.rule_of_[t];
    if (g.rule_start_[rule] == t) {
      for (const auto& [s, ret] : callers[rule]) relax(s, AddSaturating(dist[t], dist[ret]));
    }
  }
  for (uint32_t s = 0; s < m; ++s) TP_CHECK(dist[s] != kInfinite);  // Prune kept only live states
}

// FOLLOW sets: the bytes that can come right after each rule, in any context.
void GrammarBuilder::ComputeFollow(Grammar* grammar) {
  Grammar& g = *grammar;
  std::vector<std::bitset<256>> class_bytes(g.num_classes_);
  for (int b = 0; b < 256; ++b) class_bytes[g.byte_class_[b]].set(b);
  std::vector<std::bitset<256>> first_of_start(g.num_rules());
  std::vector<uint8_t> first_done(g.num_rules(), 0);
  // The bytes `s` reads first, itself or through the rules it calls (whose starts are not
  // final). Recursion ends: there is no left recursion.
  std::function<std::bitset<256>(uint32_t)> first = [&](uint32_t s) {
    std::bitset<256> bytes;
    for (uint32_t c = 0; c < g.num_classes_; ++c) {
      if (g.NextByClass(s, c) != kNone) bytes |= class_bytes[c];
    }
    for (const auto& call : g.calls(s)) {
      if (!first_done[call.rule]) {
        first_of_start[call.rule] = first(g.rule_start_[call.rule]);
        first_done[call.rule] = 1;
      }
      bytes |= first_of_start[call.rule];
    }
    return bytes;
  };
  g.follow_.assign(g.num_rules(), {});
  std::vector<std::pair<uint32_t, uint32_t>> final_returns;  // (callee, rule continuing)
  for (uint32_t s = 0; s < g.num_states(); ++s) {
    for (const auto& call : g.calls(s)) {
      g.follow_[call.rule] |= first(call.return_state);
      if (g.final_[call.return_state]) final_returns.emplace_back(call.rule, g.rule_of_[call.return_state]);
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& [callee, outer] : final_returns) {
      const std::bitset<256> before = g.follow_[callee];
      g.follow_[callee] |= g.follow_[outer];
      changed |= before != g.follow_[callee];
    }
  }
}

}  // namespace tpserve
