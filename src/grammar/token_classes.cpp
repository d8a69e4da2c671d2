#include "grammar/token_classes.h"

#include <bit>

namespace ubatch::grammar {

namespace {

// A list holds at most this share of the vocabulary; denser classes keep a bitset
// (n_vocab / 8 bytes, the size of a list of n_vocab / 32 ids).
constexpr int32_t kListShare = 32;

}  // namespace

void TokenClass::add_accepted(const Vocabulary& vocab, uint64_t* mask) const {
  switch (form) {
    case Form::List:
      for (int32_t id : ids) mask[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
      break;
    case Form::Complement: {
      // The text tokens, but the listed ones: OR word by word, clearing the listed bits in a
      // copy of each word as it is reached.
      const std::vector<uint64_t>& text = vocab.text_tokens();
      size_t k = 0;
      for (size_t w = 0; w < text.size(); ++w) {
        uint64_t word = text[w];
        while (k < ids.size() && static_cast<size_t>(ids[k]) / 64 == w) {
          word &= ~(uint64_t{1} << (ids[k] % 64));
          ++k;
        }
        mask[w] |= word;
      }
      break;
    }
    case Form::Bits:
      for (size_t w = 0; w < bits.size(); ++w) mask[w] |= bits[w];
      break;
  }
}

size_t TokenClass::memory_bytes() const {
  return sizeof(*this) + ids.capacity() * sizeof(int32_t) + bits.capacity() * sizeof(uint64_t) +
         uncertain.capacity() * sizeof(int32_t);
}

TokenClass classify_state(const Vocabulary& vocab, Expander& ex, uint32_t q) {
  const Automaton& a = ex.automaton();
  const int32_t rule = a.rule_of(q);
  const uint32_t n_nodes = vocab.n_nodes();
  const size_t depth = vocab.max_depth() + 1;
  // Per depth: the parse position after the prefix of that length. Hot fields in flat arrays;
  // the stack sets only used off the fast path.
  std::vector<uint32_t> simple(depth, Automaton::kNone);  // the single stack [simple] of a plain state
  std::vector<uint8_t> end(depth, 0);                     // q's rule may end exactly after this prefix
  std::vector<uint8_t> esc(depth, 0);                     // it may end after a shorter one (the rest lies outside)
  std::vector<StackSet> sets(depth);                      // the stacks when simple == kNone
  std::vector<uint64_t> acc(vocab.n_words(), 0);
  TokenClass tc;
  const int32_t* tokens = vocab.trie_tokens().data();
  const uint32_t* next = a.next_table();
  const uint8_t* cls = a.byte_classes();
  const size_t n_cls = a.n_byte_classes();
  auto accept_range = [&](uint32_t b, uint32_t e) {
    for (uint32_t k = b; k < e; ++k) {
      const auto id = static_cast<uint32_t>(tokens[k]);
      acc[id >> 6] |= uint64_t{1} << (id & 63);
    }
    tc.n_accepted += static_cast<int32_t>(e - b);
  };
  auto uncertain_range = [&](uint32_t b, uint32_t e) {
    for (uint32_t k = b; k < e; ++k) tc.uncertain.push_back(tokens[k]);
  };
  // Settles a level computed as a set: a single one-frame plain stack becomes `simple`.
  auto settle = [&](size_t d) {
    const StackSet& s = sets[d];
    end[d] = s.end;
    simple[d] = Automaton::kNone;
    if (s.size() == 1 && s.stack(0).size() == 1 && ex.plain(s.top(0))) simple[d] = s.top(0);
  };
  {
    StackSet start;
    const uint32_t f[1] = {q};
    start.push(f);
    ex.close(start, sets[0]);
    settle(0);
  }
  StackSet one;
  uint32_t i = 1;
  while (i < n_nodes) {
    const uint32_t d = vocab.depth(i);
    const uint8_t b = vocab.byte(i);
    const uint32_t ps = simple[d - 1];
    if (ps != Automaton::kNone) {
      const uint32_t t = next[ps * n_cls + cls[b]];
      if (t == Automaton::kNone) {
        simple[d] = Automaton::kNone;
        sets[d].clear();
        end[d] = 0;
      } else if (ex.plain(t)) {
        simple[d] = t;
        end[d] = 0;
      } else {
        one.clear();
        const uint32_t f[1] = {t};
        one.push(f);
        if (!ex.close(one, sets[d])) sets[d].clear();
        settle(d);
      }
    } else {
      if (!ex.step(sets[d - 1], b, sets[d])) sets[d].clear();
      settle(d);
    }
    // q's rule may end before this byte, and the byte may follow that rule somewhere.
    esc[d] = esc[d - 1] || (end[d - 1] && a.can_follow(rule, b));
    const bool alive = simple[d] != Automaton::kNone || !sets[d].empty();
    const uint32_t tb = vocab.token_begin(i), te = vocab.token_begin(i + 1);
    if (alive || end[d]) accept_range(tb, te);
    else if (esc[d]) uncertain_range(tb, te);
    if (!alive) {
      const uint32_t sub = vocab.subtree_end(i);
      if (esc[d]) {
        uncertain_range(te, vocab.token_begin(sub));
      } else if (end[d]) {
        // The rule ends at this node: the tokens below are uncertain when their next byte
        // may follow the rule.
        for (uint32_t c = i + 1; c < sub; c = vocab.subtree_end(c))
          if (a.can_follow(rule, vocab.byte(c))) uncertain_range(vocab.token_begin(c), vocab.token_begin(vocab.subtree_end(c)));
      }
      i = sub;
      continue;
    }
    ++i;
  }

  const int32_t n_text = vocab.n_text_tokens();
  const int32_t limit = std::max(1, vocab.n_vocab() / kListShare);
  if (tc.n_accepted <= limit) {
    tc.form = TokenClass::Form::List;
    for (size_t w = 0; w < acc.size(); ++w)
      for (uint64_t m = acc[w]; m; m &= m - 1) tc.ids.push_back(static_cast<int32_t>(w * 64 + std::countr_zero(m)));
  } else if (n_text - tc.n_accepted <= limit) {
    tc.form = TokenClass::Form::Complement;
    const std::vector<uint64_t>& text = vocab.text_tokens();
    for (size_t w = 0; w < acc.size(); ++w)
      for (uint64_t m = text[w] & ~acc[w]; m; m &= m - 1)
        tc.ids.push_back(static_cast<int32_t>(w * 64 + std::countr_zero(m)));
  } else {
    tc.form = TokenClass::Form::Bits;
    tc.bits = std::move(acc);
  }
  tc.ids.shrink_to_fit();
  tc.uncertain.shrink_to_fit();
  return tc;
}

}  // namespace ubatch::grammar
