// A context-free grammar over Unicode text: the form GBNF text parses into (gbnf_parser.h)
// and the automaton compiler reads (automaton.h).
//
// A Grammar is a list of rules; each rule's body is an expression tree over literals (UTF-8
// byte strings), character classes (sets of code points), sequences, alternations, bounded or
// unbounded repetitions and references to rules. Code points are Unicode scalar values:
// U+0000..U+10FFFF without the surrogates U+D800..U+DFFF (which UTF-8 cannot carry).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ubatch::grammar {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kUnbounded = UINT32_MAX;  // Repeat::max for *, + and {m,}

struct CharRange {
  uint32_t lo = 0;  // first code point
  uint32_t hi = 0;  // last code point (inclusive)
};

struct Expr {
  enum class Kind {
    Empty,    // matches the empty string
    Literal,  // bytes (UTF-8, may be empty)
    Chars,    // one code point in ranges
    Seq,      // items in order
    Alt,      // one of items
    Repeat,   // items[0] repeated min..max times (max may be kUnbounded)
    Ref,      // the rule rules[rule]
  };
  Kind kind = Kind::Empty;
  std::string bytes;              // Literal
  std::vector<CharRange> ranges;  // Chars: sorted, disjoint, none holding a surrogate
  std::vector<Expr> items;        // Seq, Alt (any count), Repeat (exactly one)
  uint32_t min = 0, max = 0;      // Repeat
  int32_t rule = -1;              // Ref: index into Grammar::rules

  static Expr empty() { return Expr{}; }
  static Expr literal(std::string bytes);
  static Expr chars(std::vector<CharRange> ranges);  // normalizes (sort, merge, drop surrogates)
  static Expr seq(std::vector<Expr> items);
  static Expr alt(std::vector<Expr> items);
  static Expr repeat(Expr item, uint32_t min, uint32_t max);
  static Expr ref(int32_t rule);
};

struct Rule {
  std::string name;
  Expr body;
};

struct Grammar {
  std::vector<Rule> rules;
  int32_t root = -1;  // index of the start rule
};

// Sorted, merged ranges with the surrogates removed (input in any order, may overlap).
std::vector<CharRange> normalize_ranges(std::vector<CharRange> ranges);
// The code points not in `ranges` (normalized input), surrogates excluded.
std::vector<CharRange> complement_ranges(const std::vector<CharRange>& ranges);
// Appends the UTF-8 encoding of a code point (<= kMaxCodePoint, not a surrogate).
void append_utf8(uint32_t cp, std::string& out);

}  // namespace ubatch::grammar
