// The bytes each token stands for, arranged as a trie, for computing which tokens a grammar
// allows (token_classes.h, matcher.h).
//
// A token's piece is the text generation emits for it (Tokenizer::token_to_piece without
// special rendering), so the grammar constrains exactly what a client receives. Tokens with
// an empty piece (control tokens) can never be produced under a grammar, except the
// end-of-generation tokens, which a grammar allows where its start rule may end.
//
// Trie layout: nodes in preorder, node 0 the root (the empty prefix). Node i spells the
// bytes on the path from the root, byte(i) being the last; its subtree is [i, subtree_end(i)).
// Tokens are numbered in trie order (sorted by piece bytes); the tokens whose piece ends at
// node i are trie_tokens()[token_begin(i), token_begin(i + 1)), and the tokens of the whole
// subtree are [token_begin(i), token_begin(subtree_end(i))).
//
// Immutable after construction; share it between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ubatch {
class Tokenizer;
}

namespace ubatch::grammar {

class Vocabulary {
 public:
  // pieces[id]: the bytes of token id; eog[id]: 1 for end-of-generation tokens.
  Vocabulary(std::vector<std::string> pieces, std::vector<uint8_t> eog);
  // From a model's tokenizer (n_vocab calls of token_to_piece; ~0.2 s for 262k tokens).
  static std::shared_ptr<const Vocabulary> from_tokenizer(const Tokenizer& tokenizer);

  int32_t n_vocab() const { return static_cast<int32_t>(offsets_.size() - 1); }
  size_t n_words() const { return (static_cast<size_t>(n_vocab()) + 63) / 64; }  // mask words
  std::string_view piece(int32_t id) const {
    return std::string_view(bytes_).substr(offsets_[static_cast<size_t>(id)],
                                           offsets_[static_cast<size_t>(id) + 1] - offsets_[static_cast<size_t>(id)]);
  }
  bool is_eog(int32_t id) const { return eog_[static_cast<size_t>(id)] != 0; }
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  // Bitset [n_words] of the tokens with a non-empty piece.
  const std::vector<uint64_t>& text_tokens() const { return text_bits_; }
  int32_t n_text_tokens() const { return static_cast<int32_t>(trie_tokens_.size()); }

  // Trie (see the header comment).
  uint32_t n_nodes() const { return static_cast<uint32_t>(node_byte_.size()); }
  uint8_t byte(uint32_t node) const { return node_byte_[node]; }
  uint32_t depth(uint32_t node) const { return node_depth_[node]; }
  uint32_t subtree_end(uint32_t node) const { return subtree_end_[node]; }
  uint32_t token_begin(uint32_t node) const { return token_begin_[node]; }
  uint32_t max_depth() const { return max_depth_; }
  // Token ids with a non-empty piece, in trie order.
  std::span<const int32_t> trie_tokens() const { return trie_tokens_; }

 private:
  std::string bytes_;                // all pieces, concatenated
  std::vector<uint32_t> offsets_;    // [n_vocab + 1] into bytes_
  std::vector<uint8_t> eog_;         // [n_vocab]
  std::vector<int32_t> eog_ids_;
  std::vector<uint64_t> text_bits_;  // [n_words]
  std::vector<int32_t> trie_tokens_;   // token ids sorted by piece
  std::vector<uint8_t> node_byte_;     // [n_nodes]
  std::vector<uint32_t> node_depth_;   // [n_nodes]
  std::vector<uint32_t> subtree_end_;  // [n_nodes]
  std::vector<uint32_t> token_begin_;  // [n_nodes + 1]
  uint32_t max_depth_ = 0;
};

}  // namespace ubatch::grammar
