// GPT-2 byte-level BPE (Radford et al. 2019; Sennrich et al. 2016 for BPE): a pre-tokenized
// word is mapped to the byte-level alphabet (byte_level.h), split into characters, and the
// adjacent pair with the best (lowest) merge rank is merged until no pair has a rank; each
// resulting piece is a vocabulary token. Ranks are the order of `tokenizer.ggml.merges`
// ("left right" per entry, best first).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace ubatch::tokenizer {

class BpeMerges {
 public:
  // Reads tokenizer.ggml.merges. Entries whose parts or result are not tokens are skipped
  // (they could never apply); a malformed entry (no separating space) is an error.
  static Result<BpeMerges> load(const gguf::File& file, const Vocab& vocab);

  // Tokenizes one pre-tokenized word (raw bytes), appending ids. With ignore_merges a word
  // that is itself a token is emitted whole (LLaMA 3's rule). O(n log n) in its length.
  void tokenize_word(const Vocab& vocab, std::string_view word, bool ignore_merges,
                     std::vector<int32_t>& out) const;

  size_t size() const { return size_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // id of the merged piece
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  // (left id, right id) -> merge: open addressing, linear probing, at most half full (ids are
  // non-negative, so no key is kEmpty).
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static size_t slot_of(uint64_t k) {  // a 64-bit mix (splitmix64's finaliser)
    k ^= k >> 30;
    k *= 0xBF58476D1CE4E5B9ull;
    k ^= k >> 27;
    k *= 0x94D049BB133111EBull;
    k ^= k >> 31;
    return static_cast<size_t>(k);
  }
  void reserve(size_t n);
  void insert(uint64_t k, Merge m);  // keeps an existing entry (the first, best rank, wins)
  const Merge* find(uint64_t k) const {
    for (size_t i = slot_of(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace ubatch::tokenizer
