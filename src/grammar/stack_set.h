// Sets of parse stacks over an Automaton, and their expansion and advance by one byte: the
// pushdown half of matching (automaton.h describes the stacks).
//
// A stack lists states bottom to top. Expanding (close) a set adds, for every stack, those
// reachable without consuming a byte: entering a callee (the top becomes the return state,
// unless the call is a tail call, and the callee's start is pushed) and leaving a rule whose
// top state is final (the top is popped). A closed set keeps only stacks whose top has byte
// transitions — the positions a next byte can advance — and records in `end` that some
// stack emptied: the bottom rule can end here (for a whole parse: the grammar is complete).
// Left recursion is rejected at compile time, so expansion terminates; a set growing past
// the limit (a pathologically ambiguous grammar) is reported as a failure.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/automaton.h"

namespace ubatch::grammar {

class StackSet {
 public:
  bool end = false;  // a stack emptied while expanding: the bottom rule may end here

  size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  std::span<const uint32_t> stack(size_t i) const {
    const uint32_t b = i ? ends_[i - 1] : 0;
    return {frames_.data() + b, frames_.data() + ends_[i]};
  }
  uint32_t top(size_t i) const { return frames_[ends_[i] - 1]; }
  size_t n_frames() const { return frames_.size(); }
  void clear() {
    frames_.clear();
    ends_.clear();
    end = false;
  }
  void push(std::span<const uint32_t> frames) {
    frames_.insert(frames_.end(), frames.begin(), frames.end());
    ends_.push_back(static_cast<uint32_t>(frames_.size()));
  }
  // Sorts the stacks (lexicographically, bottom first) and drops duplicates: a canonical form.
  void canonicalize();
  // Appends a byte encoding of the set (end flag and every stack) to `key`, for hashing.
  void append_key(std::string& key) const;

 private:
  std::vector<uint32_t> frames_;
  std::vector<uint32_t> ends_;  // [size()] end offset of each stack in frames_
};

class Expander {
 public:
  // a must outlive the expander. max_stacks bounds every expansion.
  explicit Expander(const Automaton& a, size_t max_stacks = 4096);

  // out := the closed set of in's stacks (any tops). False when it grows past max_stacks.
  bool close(const StackSet& in, StackSet& out);
  // out := the closed set after byte b from the closed set in (in.end is not carried over).
  bool step(const StackSet& in, uint8_t b, StackSet& out);
  // s has byte transitions, is not final and calls nothing: a one-frame stack [s] is its
  // own closure.
  bool plain(uint32_t s) const { return plain_[s] != 0; }
  const Automaton& automaton() const { return *a_; }

 private:
  const Automaton* a_;
  size_t max_stacks_;
  std::vector<uint8_t> plain_;  // [n_states]
  // Scratch: a LIFO of stacks to expand (flat frames, end offsets), the stacks already
  // expanded (with a hash index), the current stack, the advanced stacks of step().
  std::vector<uint32_t> work_frames_, work_ends_;
  StackSet seen_, advanced_;
  std::unordered_multimap<uint64_t, uint32_t> seen_index_;  // hash → index in seen_
  std::vector<uint32_t> cur_;
};

}  // namespace ubatch::grammar
