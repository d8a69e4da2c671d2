#include "tokenizer/bpe.h"

#include <queue>
#include <string>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace ubatch::tokenizer {

void BpeMerges::reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  slots_.assign(cap, Slot{kEmpty, Merge{0, 0}});
  mask_ = cap - 1;
  size_ = 0;
}

void BpeMerges::insert(uint64_t k, Merge m) {
  for (size_t i = slot_of(k) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == k) return;
    if (s.key == kEmpty) {
      s = Slot{k, m};
      ++size_;
      return;
    }
  }
}

Result<BpeMerges> BpeMerges::load(const gguf::File& file, const Vocab& vocab) {
  const std::string key_name = "tokenizer.ggml.merges";
  BpeMerges m;
  if (!file.find(key_name)) return Status::error("tokenizer: BPE vocabulary without " + key_name);
  std::optional<std::vector<std::string_view>> merges = file.get_string_array(key_name);
  if (!merges) return Status::error("tokenizer: " + key_name + " is not a string array");
  m.reserve(merges->size());
  int32_t rank = 0;
  std::string joined;
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string_view entry = (*merges)[i];
    // The separator is the first space after the first character (pieces never start with one
    // in byte-level vocabularies, but may in user-made ones: skip position 0).
    const size_t sp = entry.size() > 1 ? entry.find(' ', 1) : std::string_view::npos;
    if (sp == std::string_view::npos) {
      return Status::error("tokenizer: " + key_name + "[" + std::to_string(i) +
                           "] has no space separating its two pieces");
    }
    const std::string_view left = entry.substr(0, sp), right = entry.substr(sp + 1);
    joined.assign(left);
    joined.append(right);
    const int32_t l = vocab.find(left), r = vocab.find(right), res = vocab.find(joined);
    const int32_t this_rank = rank++;
    if (l < 0 || r < 0 || res < 0 || !vocab.from_text(res)) continue;
    m.insert(key(l, r), Merge{this_rank, res});  // first (best) rank wins
  }
  return m;
}

namespace {

struct BpeSymbol {
  int32_t prev = -1;
  int32_t next = -1;
  int32_t id = -1;   // token of this piece; -1 for a character outside the vocabulary
  bool alive = true;
};

struct Pair {
  int32_t left = 0;
  int32_t right = 0;
  int32_t rank = 0;
  int32_t left_id = 0, right_id = 0;  // to detect stale entries
  int32_t result = 0;
};

// Lowest rank first; on equal ranks the leftmost pair first.
struct PairGreater {
  bool operator()(const Pair& a, const Pair& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void BpeMerges::tokenize_word(const Vocab& vocab, std::string_view word, bool ignore_merges,
                              std::vector<int32_t>& out) const {
  if (word.empty()) return;
  std::string enc;
  enc.reserve(word.size() * 2);
  byte_level_encode(word, enc);
  if (ignore_merges) {
    const int32_t id = vocab.find(enc);
    if (id >= 0 && vocab.from_text(id)) {
      out.push_back(id);
      return;
    }
  }

  std::vector<BpeSymbol> symbols;
  symbols.reserve(word.size());
  for (size_t i = 0; i < enc.size();) {
    const size_t len = utf8_char_len(std::string_view(enc).substr(i));
    BpeSymbol s;
    s.prev = static_cast<int32_t>(symbols.size()) - 1;
    s.next = static_cast<int32_t>(symbols.size()) + 1;
    s.id = vocab.find(std::string_view(enc).substr(i, len));
    if (s.id >= 0 && !vocab.from_text(s.id)) s.id = -1;
    symbols.push_back(s);
    i += len;
  }
  symbols.back().next = -1;

  std::vector<Pair> storage;
  storage.reserve(symbols.size());
  std::priority_queue<Pair, std::vector<Pair>, PairGreater> queue(PairGreater{}, std::move(storage));
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t lid = symbols[static_cast<size_t>(left)].id;
    const int32_t rid = symbols[static_cast<size_t>(right)].id;
    if (lid < 0 || rid < 0) return;
    const Merge* m = find(key(lid, rid));
    if (m == nullptr) return;
    queue.push(Pair{left, right, m->rank, lid, rid, m->result});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    BpeSymbol& l = symbols[static_cast<size_t>(p.left)];
    BpeSymbol& r = symbols[static_cast<size_t>(p.right)];
    if (!l.alive || !r.alive || l.next != p.right || l.id != p.left_id || r.id != p.right_id) continue;
    l.id = p.result;
    l.next = r.next;
    r.alive = false;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = p.left;
    try_add(l.prev, p.left);
    try_add(p.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const int32_t id = symbols[static_cast<size_t>(i)].id;
    if (id >= 0) {
      out.push_back(id);
    } else if (vocab.unk_for_text() >= 0) {
      out.push_back(vocab.unk_for_text());  // a byte with no token: only in incomplete vocabularies
    }
  }
}

}  // namespace ubatch::tokenizer
