#include "tokenizer/spm.h"

#include <queue>

#include "tokenizer/utf8.h"

namespace ubatch::tokenizer {

namespace {

// A run of text that is (so far) one piece; symbols form a doubly linked list in text order.
struct SpmSymbol {
  int32_t prev = -1;
  int32_t next = -1;
  size_t start = 0;
  size_t n = 0;  // bytes; 0 once merged into its left neighbour
};

struct Bigram {
  int32_t left = 0;
  int32_t right = 0;
  float score = 0;
  size_t size = 0;  // bytes of the merged piece, to detect stale entries
};

// Highest score first; on equal scores the leftmost pair first.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

class SpmSession {
 public:
  SpmSession(const Vocab& vocab, std::string_view text) : vocab_(vocab), text_(text) {}

  void run(std::vector<int32_t>& out) {
    for (size_t i = 0; i < text_.size();) {
      const size_t len = utf8_char_len(text_.substr(i));
      SpmSymbol s;
      s.start = i;
      s.n = len;
      s.prev = static_cast<int32_t>(symbols_.size()) - 1;
      s.next = static_cast<int32_t>(symbols_.size()) + 1;
      symbols_.push_back(s);
      i += len;
    }
    if (symbols_.empty()) return;
    symbols_.back().next = -1;

    std::vector<Bigram> storage;
    storage.reserve(symbols_.size());
    queue_ = std::priority_queue<Bigram, std::vector<Bigram>, BigramLess>(BigramLess{}, std::move(storage));
    for (size_t i = 1; i < symbols_.size(); ++i) try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      SpmSymbol& left = symbols_[static_cast<size_t>(b.left)];
      SpmSymbol& right = symbols_[static_cast<size_t>(b.right)];
      if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;  // stale
      left.n += right.n;
      right.n = 0;
      left.next = right.next;
      if (right.next >= 0) symbols_[static_cast<size_t>(right.next)].prev = b.left;
      try_add(left.prev, b.left);
      try_add(b.left, left.next);
    }

    for (int32_t i = 0; i >= 0; i = symbols_[static_cast<size_t>(i)].next) {
      const SpmSymbol& s = symbols_[static_cast<size_t>(i)];
      emit(text_.substr(s.start, s.n), out);
    }
  }

 private:
  void try_add(int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const SpmSymbol& l = symbols_[static_cast<size_t>(left)];
    const SpmSymbol& r = symbols_[static_cast<size_t>(right)];
    const std::string_view piece = text_.substr(l.start, l.n + r.n);
    const int32_t id = vocab_.find(piece);
    if (id < 0 || !vocab_.from_text(id)) return;
    queue_.push(Bigram{left, right, vocab_.score[static_cast<size_t>(id)], piece.size()});
  }

  // A final piece: its token, else its bytes' tokens, else the unknown token.
  void emit(std::string_view piece, std::vector<int32_t>& out) const {
    const int32_t id = vocab_.find(piece);
    if (id >= 0 && vocab_.from_text(id)) {
      out.push_back(id);
      return;
    }
    bool all_bytes = true;
    for (char c : piece) all_bytes = all_bytes && vocab_.byte_token[static_cast<uint8_t>(c)] >= 0;
    if (all_bytes) {
      for (char c : piece) out.push_back(vocab_.byte_token[static_cast<uint8_t>(c)]);
    } else if (vocab_.unk_for_text() >= 0) {
      out.push_back(vocab_.unk_for_text());
    }
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<SpmSymbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue_;
};

}  // namespace

void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
  SpmSession(vocab, text).run(out);
}

void spm_append_piece(const Vocab& vocab, int32_t id, std::string& out) {
  const std::string& t = vocab.text[static_cast<size_t>(id)];
  if (vocab.type_of(id) == TokenType::BYTE && t.size() == 6 && t.compare(0, 3, "<0x") == 0 &&
      t[5] == '>') {
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = hex(t[3]), lo = hex(t[4]);
    if (hi >= 0 && lo >= 0) {
      out.push_back(static_cast<char>(hi * 16 + lo));
      return;
    }
  }
  // U+2581 → ' '.
  size_t i = 0;
  while (i < t.size()) {
    const size_t pos = t.find(kSpmSpace, i);
    if (pos == std::string::npos) {
      out.append(t, i, std::string::npos);
      break;
    }
    out.append(t, i, pos - i);
    out.push_back(' ');
    i = pos + kSpmSpace.size();
  }
}

}  // namespace ubatch::tokenizer
