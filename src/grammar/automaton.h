// A Grammar compiled to a pushdown automaton over bytes: one DFA per rule whose states carry,
// besides byte transitions, call edges into other rules (a recursive transition network,
// Woods 1970). A parse position is a stack of states: the top is where the innermost rule
// stands, the frames below are where each caller continues once its callee ends.
//
// Compilation:
//   1. Small rules that are not recursive and match a finite language (no * or +, at most 64
//      automaton nodes, e.g. `ws`, literals, short alternations) are inlined into their
//      callers; every other rule keeps its own automaton and is entered through call edges.
//   2. Each rule is built as a Thompson NFA over bytes (literals and character classes as
//      UTF-8, utf8_ranges.h; repetitions {m,n} expanded), then made deterministic by subset
//      construction over byte classes (bytes no rule distinguishes share a class) — call edges
//      to the same rule from one state merge, calls to different rules stay alternatives.
//   3. States that can never reach the end of their rule are removed (a rule whose every
//      path needs a rule that never ends matches nothing), and left recursion (a rule that can
//      reach itself without consuming a byte) is rejected, so that expanding a stack always
//      terminates.
// Errors: left recursion, a start rule that matches nothing, limits exceeded (automaton too
// large). Messages name the rule.
//
// Immutable after construction; safe to share between threads.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "grammar/grammar.h"

namespace ubatch::grammar {

struct AutomatonLimits {
  size_t max_nfa_nodes = 500'000;        // before determinization, all rules
  size_t max_states = 200'000;           // DFA states, all rules
  size_t max_table_entries = 8'000'000;  // states × byte classes (4 bytes each)
};

class Automaton {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  struct Call {
    uint32_t start;  // the callee's start state
    uint32_t ret;    // where the caller continues once the callee ends
    bool tail;       // ret only ends the caller (final, no transitions, no calls): push nothing for it
  };

  uint32_t n_states() const { return static_cast<uint32_t>(flags_.size()); }
  uint32_t root() const { return root_; }  // the start rule's start state

  // The state after byte b from s, or kNone.
  uint32_t step(uint32_t s, uint8_t b) const { return next_[static_cast<size_t>(s) * n_classes_ + byte_class_[b]]; }
  // s may end its rule here.
  bool is_final(uint32_t s) const { return flags_[s] & kFinal; }
  // s has at least one byte transition.
  bool scans(uint32_t s) const { return flags_[s] & kScans; }
  std::span<const Call> calls(uint32_t s) const {
    return {calls_.data() + call_offsets_[s], calls_.data() + call_offsets_[s + 1]};
  }
  // Name of the rule a state belongs to (inlined rules take their caller's name).
  const std::string& rule_name(uint32_t s) const { return rule_names_[static_cast<size_t>(state_rule_[s])]; }
  size_t n_rules() const { return rule_names_.size(); }
  // Index of the rule a state belongs to; the start rule is 0.
  int32_t rule_of(uint32_t s) const { return state_rule_[s]; }
  // Some call edge enters the start rule (it is recursive): a start-rule frame may then sit
  // above other frames, not only at the bottom of a stack.
  bool root_is_called() const { return root_called_; }
  // Byte b can come right after a rule ends, at some call site of the rule (the start rule
  // ending at the bottom of a stack ends the text: no byte follows it there).
  bool can_follow(int32_t rule, uint8_t b) const {
    return (follow_[static_cast<size_t>(rule)][b / 64] >> (b % 64)) & 1;
  }
  uint32_t n_byte_classes() const { return n_classes_; }
  // Raw tables for hot loops: next_table()[s * n_byte_classes() + byte_classes()[b]] == step(s, b).
  const uint32_t* next_table() const { return next_.data(); }
  const uint8_t* byte_classes() const { return byte_class_.data(); }

  friend Result<Automaton> build_automaton(const Grammar& grammar, const AutomatonLimits& limits);

 private:
  static constexpr uint8_t kFinal = 1, kScans = 2;
  uint32_t n_classes_ = 1;
  std::array<uint8_t, 256> byte_class_{};
  std::vector<uint32_t> next_;          // [n_states][n_classes]: next state or kNone
  std::vector<uint8_t> flags_;          // [n_states]
  std::vector<uint32_t> call_offsets_;  // [n_states + 1] into calls_
  std::vector<Call> calls_;
  std::vector<int32_t> state_rule_;     // [n_states] index into rule_names_
  std::vector<std::string> rule_names_; // rules that kept their own automaton
  uint32_t root_ = kNone;
  bool root_called_ = false;
  std::vector<std::array<uint64_t, 4>> follow_;  // [rule] bitset of bytes
};

Result<Automaton> build_automaton(const Grammar& grammar, const AutomatonLimits& limits = {});

}  // namespace ubatch::grammar
