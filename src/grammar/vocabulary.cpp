#include "grammar/vocabulary.h"

#include <algorithm>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::grammar {

Vocabulary::Vocabulary(std::vector<std::string> pieces, std::vector<uint8_t> eog) {
  UBATCH_CHECK_MSG(pieces.size() == eog.size(), "vocabulary: pieces and eog flags differ in length");
  UBATCH_CHECK_MSG(pieces.size() < (size_t{1} << 31), "vocabulary: too many tokens");
  const size_t n = pieces.size();
  offsets_.reserve(n + 1);
  offsets_.push_back(0);
  for (const std::string& p : pieces) {
    bytes_ += p;
    UBATCH_CHECK_MSG(bytes_.size() < (size_t{1} << 32), "vocabulary: pieces too long");
    offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  }
  eog_ = std::move(eog);
  text_bits_.assign((n + 63) / 64, 0);
  for (size_t id = 0; id < n; ++id) {
    if (eog_[id]) {
      eog_ids_.push_back(static_cast<int32_t>(id));
      continue;  // never text, whatever its piece
    }
    if (pieces[id].empty()) continue;
    trie_tokens_.push_back(static_cast<int32_t>(id));
    text_bits_[id / 64] |= uint64_t{1} << (id % 64);
  }
  std::sort(trie_tokens_.begin(), trie_tokens_.end(), [&](int32_t a, int32_t b) {
    const std::string_view pa = piece(a), pb = piece(b);
    return pa != pb ? pa < pb : a < b;  // string_view compares bytes as unsigned char
  });

  // Preorder trie over the sorted pieces: consecutive pieces share their common prefix.
  node_byte_.push_back(0);
  node_depth_.push_back(0);
  subtree_end_.push_back(0);
  token_begin_.push_back(0);
  std::vector<uint32_t> path{0};  // path[d]: node at depth d
  std::string_view prev;
  for (size_t k = 0; k < trie_tokens_.size(); ++k) {
    const std::string_view p = piece(trie_tokens_[k]);
    size_t lcp = 0;
    while (lcp < p.size() && lcp < prev.size() && p[lcp] == prev[lcp]) ++lcp;
    while (path.size() > lcp + 1) {
      subtree_end_[path.back()] = static_cast<uint32_t>(node_byte_.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < p.size(); ++d) {
      node_byte_.push_back(static_cast<uint8_t>(p[d]));
      node_depth_.push_back(static_cast<uint32_t>(d + 1));
      subtree_end_.push_back(0);
      token_begin_.push_back(static_cast<uint32_t>(k));
      path.push_back(static_cast<uint32_t>(node_byte_.size() - 1));
    }
    max_depth_ = std::max(max_depth_, static_cast<uint32_t>(p.size()));
    prev = p;
  }
  while (!path.empty()) {
    subtree_end_[path.back()] = static_cast<uint32_t>(node_byte_.size());
    path.pop_back();
  }
  token_begin_.push_back(static_cast<uint32_t>(trie_tokens_.size()));
}

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.n_vocab();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::vector<uint8_t> eog(static_cast<size_t>(n), 0);
  for (int32_t id = 0; id < n; ++id) {
    pieces[static_cast<size_t>(id)] = tokenizer.token_to_piece(id, false);
    eog[static_cast<size_t>(id)] = tokenizer.is_eog(id) ? 1 : 0;
  }
  return std::make_shared<Vocabulary>(std::move(pieces), std::move(eog));
}

}  // namespace ubatch::grammar
