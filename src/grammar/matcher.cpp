#include "grammar/matcher.h"

#include <bit>

namespace ubatch::grammar {

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), expander_(grammar_->automaton()) {
  StackSet start;
  const uint32_t f[1] = {grammar_->automaton().root()};
  start.push(f);
  if (!expander_.close(start, state_)) state_.clear();
  state_.canonicalize();
  rekey();
}

void Matcher::reset() { *this = Matcher(grammar_); }

Matcher::Matcher(const Matcher& o)
    : grammar_(o.grammar_), expander_(o.grammar_->automaton()), state_(o.state_), key_(o.key_), ended_(o.ended_) {}

Matcher& Matcher::operator=(const Matcher& o) {
  if (this != &o) {
    grammar_ = o.grammar_;
    expander_ = Expander(grammar_->automaton());
    state_ = o.state_;
    key_ = o.key_;
    ended_ = o.ended_;
  }
  return *this;
}

void Matcher::rekey() {
  key_.clear();
  state_.append_key(key_);
}

bool Matcher::advance(std::string_view bytes, StackSet& out) {
  StackSet cur = state_, nxt;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (cur.empty()) return false;
    if (!expander_.step(cur, static_cast<uint8_t>(bytes[i]), nxt)) return false;
    std::swap(cur, nxt);
  }
  if (cur.empty() && !cur.end) return false;
  cur.canonicalize();
  out = std::move(cur);
  return true;
}

bool Matcher::accept(int32_t token) {
  const Vocabulary& v = grammar_->vocabulary();
  if (ended_ || token < 0 || token >= v.n_vocab()) return false;
  if (v.is_eog(token)) {
    if (!state_.end) return false;
    ended_ = true;
    return true;
  }
  const std::string_view piece = v.piece(token);
  if (piece.empty()) return false;
  StackSet out;
  if (!advance(piece, out)) return false;
  state_ = std::move(out);
  rekey();
  return true;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (ended_) return false;
  if (bytes.empty()) return true;
  StackSet out;
  if (!advance(bytes, out)) return false;
  state_ = std::move(out);
  rekey();
  return true;
}

std::shared_ptr<const TokenMask> Matcher::mask() {
  const Vocabulary& v = grammar_->vocabulary();
  if (ended_) {
    auto none = std::make_shared<TokenMask>();
    none->bits.assign(v.n_words(), 0);
    return none;
  }
  if (std::shared_ptr<const TokenMask> hit = grammar_->find_mask(key_)) return hit;
  auto m = std::make_shared<TokenMask>();
  m->bits.assign(v.n_words(), 0);
  for (size_t i = 0; i < state_.size(); ++i) {
    const std::shared_ptr<const TokenClass> tc = grammar_->token_class(state_.top(i));
    tc->add_accepted(v, m->bits.data());
    if (!tc->uncertain.empty()) check_uncertain(i, *tc, m->bits.data());
  }
  if (state_.end)
    for (int32_t id : v.eog_ids()) m->bits[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  int64_t n = 0;
  for (uint64_t w : m->bits) n += std::popcount(w);
  m->n_allowed = static_cast<int32_t>(n);
  grammar_->store_mask(key_, m);
  return m;
}

// The uncertain tokens of stack i's top, run on the whole stack. Tokens come in trie order,
// so consecutive ones share prefixes: lv[d] holds the position after the first d bytes of the
// previous token, and only the bytes past the common prefix are stepped.
void Matcher::check_uncertain(size_t stack_index, const TokenClass& tc, uint64_t* bits) {
  const Vocabulary& v = grammar_->vocabulary();
  std::vector<StackSet> lv(v.max_depth() + 1);
  {
    StackSet s0;
    s0.push(state_.stack(stack_index));
    if (!expander_.close(s0, lv[0])) return;
  }
  std::string_view prev;
  size_t valid = 0;  // lv[0..valid] hold prev's prefixes
  for (int32_t id : tc.uncertain) {
    const std::string_view p = v.piece(id);
    size_t lcp = 0;
    while (lcp < p.size() && lcp < prev.size() && p[lcp] == prev[lcp]) ++lcp;
    size_t d = std::min(valid, lcp);
    while (d < p.size() && !lv[d].empty()) {
      if (!expander_.step(lv[d], static_cast<uint8_t>(p[d]), lv[d + 1])) lv[d + 1].clear();
      ++d;
    }
    valid = d;
    prev = p;
    if (d == p.size() && (!lv[d].empty() || lv[d].end))
      bits[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  }
}

}  // namespace ubatch::grammar
