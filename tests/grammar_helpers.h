// Helpers for the grammar tests: small vocabularies, compiling GBNF, and a reference
// recognizer that reads the Grammar tree directly (sets of end positions, memoized per rule
// and start), independent of the automaton and the stack machinery it checks.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/gbnf_parser.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"

namespace ubatch::test {

// Tokens 0..255: one byte each; token 256: end of generation.
inline std::shared_ptr<const grammar::Vocabulary> byte_vocab() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  pieces.push_back("");
  std::vector<uint8_t> eog(257, 0);
  eog[256] = 1;
  return std::make_shared<grammar::Vocabulary>(std::move(pieces), std::move(eog));
}

inline std::shared_ptr<const grammar::CompiledGrammar> compile_gbnf(
    const std::string& text, std::shared_ptr<const grammar::Vocabulary> vocab = byte_vocab()) {
  auto g = grammar::CompiledGrammar::from_gbnf(text, std::move(vocab));
  EXPECT_TRUE(g.is_ok()) << g.message() << "\n" << text;
  return g ? g.value() : nullptr;
}

// The whole text is a sentence of the grammar (by the automaton).
inline bool matches(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::string& text) {
  grammar::Matcher m(g);
  return m.accept_bytes(text) && m.can_end();
}
// The text can be continued into a sentence.
inline bool is_prefix(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::string& text) {
  grammar::Matcher m(g);
  return m.accept_bytes(text);
}

// Reference recognizer over the Grammar tree.
class ReferenceRecognizer {
 public:
  explicit ReferenceRecognizer(const grammar::Grammar& g) : g_(g) {}

  bool full_match(const std::string& s) {
    s_ = s;
    memo_.clear();
    return rule_ends(g_.root, 0).count(s.size()) > 0;
  }

 private:
  using Ends = std::set<size_t>;
  const grammar::Grammar& g_;
  std::string s_;
  std::map<std::pair<int32_t, size_t>, Ends> memo_;

  // Code point at i (the text is valid UTF-8 in the tests), its length in *len.
  uint32_t decode(size_t i, size_t* len) const {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s_[i + k]); };
    const unsigned c = b(0);
    if (c < 0x80) return *len = 1, c;
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (i + n > s_.size()) return *len = 1, 0xFFFFFFFF;
    uint32_t cp = n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) {
      if ((b(k) & 0xC0) != 0x80) return *len = 1, 0xFFFFFFFF;
      cp = (cp << 6) | (b(k) & 0x3F);
    }
    *len = n;
    return cp;
  }

  Ends rule_ends(int32_t r, size_t i) {
    const auto key = std::make_pair(r, i);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    memo_[key] = {};  // in progress: a left-recursive re-entry sees nothing (grammars under test have none)
    Ends e = ends(g_.rules[static_cast<size_t>(r)].body, i);
    memo_[key] = e;
    return e;
  }

  Ends ends(const grammar::Expr& e, size_t i) {
    using K = grammar::Expr::Kind;
    switch (e.kind) {
      case K::Empty: return {i};
      case K::Literal:
        if (s_.compare(i, e.bytes.size(), e.bytes) == 0 && i + e.bytes.size() <= s_.size()) return {i + e.bytes.size()};
        return {};
      case K::Chars: {
        if (i >= s_.size()) return {};
        size_t len = 0;
        const uint32_t cp = decode(i, &len);
        for (const grammar::CharRange& r : e.ranges)
          if (cp >= r.lo && cp <= r.hi) return {i + len};
        return {};
      }
      case K::Seq: {
        Ends cur{i};
        for (const grammar::Expr& item : e.items) {
          Ends next;
          for (size_t p : cur) {
            Ends x = ends(item, p);
            next.insert(x.begin(), x.end());
          }
          cur = std::move(next);
          if (cur.empty()) break;
        }
        return cur;
      }
      case K::Alt: {
        Ends out;
        for (const grammar::Expr& item : e.items) {
          Ends x = ends(item, i);
          out.insert(x.begin(), x.end());
        }
        return out;
      }
      case K::Repeat: {
        Ends out, cur{i};
        if (e.min == 0) out.insert(i);
        for (uint32_t k = 1; k <= e.max && !cur.empty(); ++k) {
          Ends next;
          for (size_t p : cur) {
            Ends x = ends(e.items[0], p);
            next.insert(x.begin(), x.end());
          }
          if (k >= e.min) out.insert(next.begin(), next.end());
          if (next == cur) break;  // a nullable item: nothing new
          cur = std::move(next);
          if (k > s_.size() + 1 && k >= e.min) break;  // each round past the text length adds nothing
        }
        return out;
      }
      case K::Ref: return rule_ends(e.rule, i);
    }
    return {};
  }
};

// Random sentences of a grammar (depth-bounded: past max_depth the shortest choices are taken).
class SentenceGenerator {
 public:
  SentenceGenerator(const grammar::Grammar& g, uint64_t seed) : g_(g), rng_(seed) {}
  // False when the depth bound cut a sentence short (the result is then discarded).
  bool generate(std::string& out, int max_depth = 12) {
    out.clear();
    ok_ = true;
    gen(g_.rules[static_cast<size_t>(g_.root)].body, out, 0, max_depth);
    return ok_;
  }

 private:
  const grammar::Grammar& g_;
  std::mt19937_64 rng_;
  bool ok_ = true;

  void gen(const grammar::Expr& e, std::string& out, int depth, int max_depth) {
    using K = grammar::Expr::Kind;
    if (depth > 4 * max_depth) {
      ok_ = false;
      return;
    }
    switch (e.kind) {
      case K::Empty: return;
      case K::Literal: out += e.bytes; return;
      case K::Chars: {
        // Mostly ASCII picks from the ranges, sometimes the range ends.
        const grammar::CharRange& r = e.ranges[rng_() % e.ranges.size()];
        uint32_t cp = r.lo + static_cast<uint32_t>(rng_() % (std::min<uint64_t>(r.hi - r.lo, 200) + 1));
        if (rng_() % 8 == 0) cp = r.hi;
        grammar::append_utf8(cp, out);
        return;
      }
      case K::Seq:
        for (const grammar::Expr& item : e.items) gen(item, out, depth + 1, max_depth);
        return;
      case K::Alt: {
        size_t pick = rng_() % e.items.size();
        if (depth > max_depth) pick = 0;  // tests list a short alternative first
        gen(e.items[pick], out, depth + 1, max_depth);
        return;
      }
      case K::Repeat: {
        uint32_t hi = std::min<uint32_t>(e.max, e.min + 3);
        uint32_t n = e.min + static_cast<uint32_t>(rng_() % (hi - e.min + 1));
        if (depth > max_depth) n = e.min;
        for (uint32_t k = 0; k < n; ++k) gen(e.items[0], out, depth + 1, max_depth);
        return;
      }
      case K::Ref: gen(g_.rules[static_cast<size_t>(e.rule)].body, out, depth + 1, max_depth); return;
    }
  }
};

}  // namespace ubatch::test
