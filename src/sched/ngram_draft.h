// Drafting without a draft model: prompt lookup (Saxena 2023, "Prompt Lookup Decoding"; the
// n-gram proposer of speculative decoding). The longest suffix of a sequence's tokens (prompt
// and generated so far, up to n_max tokens) that occurred earlier in the same sequence
// proposes the tokens that followed its most recent earlier occurrence as the draft.
//
// NgramDrafter indexes one sequence incrementally: append() is O(n_max) (amortized), draft()
// is O(n_max + k). Memory: the tokens plus one open-addressing slot per distinct (n-gram,
// length), kept at most half full: at most 4 + 32 · n_max bytes per token.
//
// NgramTable is the optional server-wide table: the last n_max tokens → the tokens that
// followed them in recently finished sequences. Direct-mapped and bounded (a newer entry
// replaces an older one in its slot): capacity × (16 + 4·k_max) bytes.
//
// Not thread-safe: owned by the engine thread (or a tool's loop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ubatch::sched {

struct Draft {
  int32_t n_match = 0;          // length of the matched suffix (0: no draft)
  std::vector<int32_t> tokens;  // proposed next tokens, at most k
};

class NgramDrafter {
 public:
  // n-grams of 1..n_max tokens are matched (n_max >= 1), longest first.
  explicit NgramDrafter(int32_t n_max);

  void append(int32_t token);
  void append(const std::vector<int32_t>& tokens);
  // Up to k tokens following the most recent earlier occurrence of the longest suffix of
  // length n_min..n_max. out.n_match is 0 and out.tokens empty when none matches.
  void draft(int32_t k, int32_t n_min, Draft& out) const;

  int32_t n_max() const { return n_max_; }
  size_t size() const { return tokens_.size(); }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  // Open addressing (linear probing, power-of-two size, at most half full): key of an n-gram
  // of length n ending at i → the latest such i that has a following token. Key 0 is "empty".
  struct Slot {
    uint64_t key = 0;
    int32_t end = -1;
  };
  void put(uint64_t key, int32_t end);
  int32_t get(uint64_t key) const;  // -1 when absent

  int32_t n_max_;
  std::vector<int32_t> tokens_;
  std::vector<Slot> slots_;
  size_t n_used_ = 0;
};

class NgramTable {
 public:
  // capacity 0: disabled (lookups find nothing). n: the n-gram length used as key; k_max:
  // most tokens kept per entry.
  NgramTable(size_t capacity, int32_t n, int32_t k_max);

  // Records every n-gram of tokens[from - n, size) with what followed it (up to k_max).
  void add(const std::vector<int32_t>& tokens, size_t from);
  // The continuation of the last n tokens of `tokens`, at most k (n_match = n when found).
  void lookup(const std::vector<int32_t>& tokens, int32_t k, Draft& out) const;

  size_t capacity() const { return slots_.size(); }
  size_t bytes() const;  // memory held by the table

 private:
  struct Slot {
    uint64_t key = 0;
    int32_t n_tokens = 0;  // 0: empty
  };
  int32_t n_;
  int32_t k_max_;
  std::vector<Slot> slots_;
  std::vector<int32_t> tokens_;  // [capacity][k_max]
};

}  // namespace ubatch::sched
