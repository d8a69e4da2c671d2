// Regular expression subset → GBNF (contract in regex_gbnf.h): a recursive-descent parser
// to a small tree, then GBNF text with JSON escaping of every character set.
#include "grammar/regex_gbnf.h"

#include <cctype>
#include <vector>

#include <fmt/format.h>

#include "grammar/gbnf_text.h"
#include "grammar/grammar.h"

namespace ubatch::grammar {

namespace {

constexpr uint32_t kMaxCount = 1000;
constexpr int kMaxGroupDepth = 100;

struct Node {
  enum class Kind { Chars, Seq, Alt, Repeat };
  Kind kind = Kind::Seq;
  std::vector<CharRange> ranges;  // Chars
  std::vector<Node> items;        // Seq, Alt, Repeat (one)
  uint32_t min = 0, max = 0;      // Repeat
};

std::vector<CharRange> digits() { return {{'0', '9'}}; }
std::vector<CharRange> word() { return normalize_ranges({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
std::vector<CharRange> space() {
  // ECMA-262 WhiteSpace and LineTerminator.
  return normalize_ranges({{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                           {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
}
std::vector<CharRange> dot() {  // all but line terminators
  return complement_ranges(normalize_ranges({{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}}));
}

class RegexParser {
 public:
  RegexParser(std::string_view s) : s_(s) {}

  // Top level: alternatives, each with its anchors.
  struct Branch {
    bool start_anchor = false, end_anchor = false;
    Node body;
  };
  Result<std::vector<Branch>> parse() {
    std::vector<Branch> out;
    while (true) {
      Branch b;
      if (peek('^')) {
        ++pos_;
        b.start_anchor = true;
      }
      Result<Node> seq = parse_seq(0, true);
      if (!seq) return seq.status();
      b.body = std::move(seq.value());
      if (peek('$')) {
        ++pos_;
        b.end_anchor = true;
      }
      out.push_back(std::move(b));
      if (pos_ >= s_.size()) break;
      if (peek('|')) {
        ++pos_;
        continue;
      }
      if (peek(')')) return error(pos_, "unmatched ')'");
      if (peek('$')) return error(pos_, "'$' is supported only at the end of the pattern (or of a top-level alternative)");
      return error(pos_, "unexpected character");
    }
    return out;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;

  bool peek(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  Status error(size_t at, const std::string& what) const {
    return Status::error(fmt::format("pattern '{}': at offset {}: {}", s_, at, what));
  }

  uint32_t read_utf8() {
    const auto b0 = static_cast<unsigned char>(s_[pos_]);
    size_t len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    if (pos_ + len > s_.size()) len = s_.size() - pos_;
    uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s_[pos_ + k]) & 0x3F);
    pos_ += len;
    return cp;
  }

  static Node chars(std::vector<CharRange> r) {
    Node n;
    n.kind = Node::Kind::Chars;
    n.ranges = normalize_ranges(std::move(r));
    return n;
  }

  Result<Node> parse_alt(int depth) {
    Node alt;
    alt.kind = Node::Kind::Alt;
    while (true) {
      Result<Node> seq = parse_seq(depth, false);
      if (!seq) return seq.status();
      alt.items.push_back(std::move(seq.value()));
      if (!peek('|')) break;
      ++pos_;
    }
    if (alt.items.size() == 1) return std::move(alt.items[0]);
    return alt;
  }

  // A sequence up to '|', ')' or the end (and, at the top level, a final '$').
  Result<Node> parse_seq(int depth, bool top) {
    Node seq;
    seq.kind = Node::Kind::Seq;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '|' || c == ')') break;
      if (c == '$') {
        if (top && pos_ + 1 == s_.size()) break;
        if (top && pos_ + 1 < s_.size() && s_[pos_ + 1] == '|') break;
        return error(pos_, "'$' is supported only at the end of the pattern (or of a top-level alternative)");
      }
      if (c == '^') return error(pos_, "'^' is supported only at the start of the pattern (or of a top-level alternative)");
      const size_t at = pos_;
      Result<Node> atom = parse_atom(depth);
      if (!atom) return atom.status();
      Node item = std::move(atom.value());
      // Quantifiers.
      if (pos_ < s_.size()) {
        uint32_t min = 0, max = 0;
        bool quant = true;
        const char q = s_[pos_];
        if (q == '*') min = 0, max = kUnbounded, ++pos_;
        else if (q == '+') min = 1, max = kUnbounded, ++pos_;
        else if (q == '?') min = 0, max = 1, ++pos_;
        else if (q == '{' && parse_braces(min, max)) {
        } else quant = false;
        if (quant) {
          if (min > kMaxCount || (max != kUnbounded && max > kMaxCount))
            return error(at, fmt::format("repetition counts are limited to {}", kMaxCount));
          if (max < min) return error(at, "repetition {n,m} with m < n");
          if (peek('?')) ++pos_;  // lazy: the same strings
          if (pos_ < s_.size() && (s_[pos_] == '*' || s_[pos_] == '+' || s_[pos_] == '?' || s_[pos_] == '{') &&
              (s_[pos_] != '{' || looks_like_braces()))
            return error(pos_, "nothing to repeat (a quantifier after a quantifier)");
          Node r;
          r.kind = Node::Kind::Repeat;
          r.min = min;
          r.max = max;
          r.items.push_back(std::move(item));
          item = std::move(r);
        }
      }
      seq.items.push_back(std::move(item));
    }
    return seq;
  }

  bool looks_like_braces() const {
    size_t p = pos_ + 1;
    size_t digits = 0;
    while (p < s_.size() && s_[p] >= '0' && s_[p] <= '9') ++p, ++digits;
    if (digits == 0) return false;
    if (p < s_.size() && s_[p] == ',') {
      ++p;
      while (p < s_.size() && s_[p] >= '0' && s_[p] <= '9') ++p;
    }
    return p < s_.size() && s_[p] == '}';
  }

  // {n}, {n,}, {n,m}; false (nothing consumed) when the brace is not a quantifier (ECMAScript
  // then reads '{' as a literal).
  bool parse_braces(uint32_t& min, uint32_t& max) {
    if (!looks_like_braces()) return false;
    ++pos_;
    auto num = [&]() {
      uint64_t v = 0;
      while (s_[pos_] >= '0' && s_[pos_] <= '9') {
        v = std::min<uint64_t>(v * 10 + static_cast<uint64_t>(s_[pos_] - '0'), uint64_t{1} << 32);
        ++pos_;
      }
      return static_cast<uint32_t>(std::min<uint64_t>(v, kMaxCount + 1));
    };
    min = num();
    max = min;
    if (s_[pos_] == ',') {
      ++pos_;
      max = (s_[pos_] == '}') ? kUnbounded : num();
    }
    ++pos_;  // '}'
    return true;
  }

  Result<Node> parse_atom(int depth) {
    const size_t at = pos_;
    const char c = s_[pos_];
    if (c == '(') {
      if (depth >= kMaxGroupDepth) return error(at, "groups nested too deeply");
      ++pos_;
      if (peek('?')) {
        ++pos_;
        if (peek(':')) {
          ++pos_;
        } else if (peek('=') || peek('!')) {
          return error(at, "lookahead is not supported");
        } else if (peek('<') && pos_ + 1 < s_.size() && (s_[pos_ + 1] == '=' || s_[pos_ + 1] == '!')) {
          return error(at, "lookbehind is not supported");
        } else if (peek('<')) {
          while (pos_ < s_.size() && s_[pos_] != '>') ++pos_;
          if (pos_ >= s_.size()) return error(at, "unterminated group name");
          ++pos_;
        } else {
          return error(at, "unsupported group syntax '(?'");
        }
      }
      Result<Node> inner = parse_alt(depth + 1);
      if (!inner) return inner.status();
      if (!peek(')')) return error(at, "unclosed '('");
      ++pos_;
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return chars(dot());
    }
    if (c == '*' || c == '+' || c == '?') return error(at, "nothing to repeat");
    if (c == '{' && looks_like_braces()) return error(at, "nothing to repeat");
    if (c == '\\') {
      std::vector<CharRange> set;
      if (Status st = parse_escape(false, set); !st) return st;
      return chars(std::move(set));
    }
    const uint32_t cp = read_utf8();
    return chars({{cp, cp}});
  }

  // An escape at pos_ (the backslash) → a set of code points.
  Status parse_escape(bool in_class, std::vector<CharRange>& out) {
    const size_t at = pos_;
    ++pos_;
    if (pos_ >= s_.size()) return error(at, "a pattern cannot end with '\\'");
    const char e = s_[pos_++];
    auto single = [&](uint32_t cp) {
      out.push_back({cp, cp});
      return Status::ok();
    };
    auto add = [&](const std::vector<CharRange>& r) {
      out.insert(out.end(), r.begin(), r.end());
      return Status::ok();
    };
    auto hex = [&](int n, uint32_t& v) {
      v = 0;
      for (int k = 0; k < n; ++k) {
        if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_]))) return false;
        const char h = s_[pos_++];
        v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      return true;
    };
    switch (e) {
      case 'd': return add(digits());
      case 'D': return add(complement_ranges(digits()));
      case 'w': return add(word());
      case 'W': return add(complement_ranges(word()));
      case 's': return add(space());
      case 'S': return add(complement_ranges(space()));
      case 'n': return single('\n');
      case 'r': return single('\r');
      case 't': return single('\t');
      case 'f': return single('\f');
      case 'v': return single('\v');
      case '0': return single(0);
      case 'b':
        if (in_class) return single('\b');
        return error(at, "word boundaries (\\b) are not supported");
      case 'B': return error(at, "word boundaries (\\B) are not supported");
      case 'c': {
        if (pos_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[pos_])))
          return single(static_cast<uint32_t>(s_[pos_++]) % 32);
        return error(at, "'\\c' needs a letter");
      }
      case 'x': {
        uint32_t v = 0;
        if (!hex(2, v)) return error(at, "'\\x' needs two hex digits");
        return single(v);
      }
      case 'u': {
        uint32_t v = 0;
        if (peek('{')) {
          ++pos_;
          size_t n = 0;
          while (pos_ < s_.size() && std::isxdigit(static_cast<unsigned char>(s_[pos_])) && n < 6) {
            uint32_t d = 0;
            hex(1, d);
            v = v * 16 + d;
            ++n;
          }
          if (n == 0 || !peek('}')) return error(at, "'\\u{...}' needs 1 to 6 hex digits and '}'");
          ++pos_;
        } else if (!hex(4, v)) {
          return error(at, "'\\u' needs four hex digits");
        }
        if (v > kMaxCodePoint) return error(at, "code point above U+10FFFF");
        if (v >= 0xD800 && v <= 0xDFFF) return error(at, "surrogate code points are not supported");
        return single(v);
      }
      default: break;
    }
    if (e >= '1' && e <= '9') return error(at, "backreferences are not supported");
    if (std::isalnum(static_cast<unsigned char>(e))) return error(at, fmt::format("unknown escape '\\{}'", e));
    --pos_;
    const uint32_t cp = read_utf8();  // escaped punctuation (or any non-ASCII character): itself
    return single(cp);
  }

  Result<Node> parse_class() {
    const size_t at = pos_;
    ++pos_;
    bool negate = false;
    if (peek('^')) {
      negate = true;
      ++pos_;
    }
    std::vector<CharRange> set;
    bool first = true;
    while (true) {
      if (pos_ >= s_.size()) return error(at, "unclosed '['");
      if (s_[pos_] == ']' && !first) break;
      if (s_[pos_] == ']' && first) {  // ECMAScript: "[]" matches nothing, "[^]" anything
        break;
      }
      first = false;
      // One item: a character (maybe the start of a range) or a class escape.
      std::vector<CharRange> item;
      const size_t item_at = pos_;
      if (s_[pos_] == '\\') {
        if (Status st = parse_escape(true, item); !st) return st;
      } else {
        const uint32_t cp = read_utf8();
        item.push_back({cp, cp});
      }
      const bool single = item.size() == 1 && item[0].lo == item[0].hi;
      if (single && peek('-') && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
        ++pos_;
        std::vector<CharRange> hi_item;
        if (s_[pos_] == '\\') {
          if (Status st = parse_escape(true, hi_item); !st) return st;
        } else {
          const uint32_t cp = read_utf8();
          hi_item.push_back({cp, cp});
        }
        if (hi_item.size() != 1 || hi_item[0].lo != hi_item[0].hi) return error(item_at, "a class escape cannot end a range");
        if (hi_item[0].lo < item[0].lo) return error(item_at, "range out of order in character class");
        set.push_back({item[0].lo, hi_item[0].lo});
      } else {
        set.insert(set.end(), item.begin(), item.end());
      }
    }
    ++pos_;  // ']'
    std::vector<CharRange> norm = normalize_ranges(std::move(set));
    if (negate) norm = complement_ranges(norm);
    if (norm.empty()) return error(at, "the character class matches nothing");
    return chars(std::move(norm));
  }
};

// The JSON string content for one character of `set`.
std::string json_chars(const std::vector<CharRange>& set) {
  std::vector<std::string> parts;
  std::vector<CharRange> plain;  // the characters JSON carries unescaped
  auto contains = [&](uint32_t cp) {
    for (const CharRange& r : set)
      if (cp >= r.lo && cp <= r.hi) return true;
    return false;
  };
  for (const CharRange& r : set) {
    // Split off 0x00-0x1F, '"', '\\'.
    uint32_t lo = r.lo;
    const uint32_t hi = r.hi;
    auto emit = [&](uint32_t a, uint32_t b) {
      if (a <= b) plain.push_back({a, b});
    };
    if (lo < 0x20) lo = 0x20;
    if (lo > hi) continue;
    uint32_t cur = lo;
    for (uint32_t special : {static_cast<uint32_t>('"'), static_cast<uint32_t>('\\')}) {
      if (special >= cur && special <= hi) {
        emit(cur, special - 1);
        cur = special + 1;
      }
    }
    emit(cur, hi);
  }
  if (!plain.empty()) parts.push_back(gbnf_class(normalize_ranges(plain)));
  if (contains('"')) parts.push_back(gbnf_literal("\\\""));
  if (contains('\\')) parts.push_back(gbnf_literal("\\\\"));
  for (uint32_t cp = 0; cp < 0x20; ++cp) {
    if (!contains(cp)) continue;
    switch (cp) {
      case '\n': parts.push_back(gbnf_literal("\\n")); break;
      case '\r': parts.push_back(gbnf_literal("\\r")); break;
      case '\t': parts.push_back(gbnf_literal("\\t")); break;
      case '\b': parts.push_back(gbnf_literal("\\b")); break;
      case '\f': parts.push_back(gbnf_literal("\\f")); break;
      default: parts.push_back(gbnf_literal(fmt::format("\\u{:04x}", cp))); break;
    }
  }
  if (parts.size() == 1) return parts[0];
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += " | ";
    out += parts[i];
  }
  return out + ")";
}

std::string emit(const Node& n) {
  switch (n.kind) {
    case Node::Kind::Chars: return json_chars(n.ranges);
    case Node::Kind::Seq: {
      if (n.items.empty()) return "\"\"";
      std::string out = "(";
      for (size_t i = 0; i < n.items.size(); ++i) {
        if (i) out += " ";
        out += emit(n.items[i]);
      }
      return out + ")";
    }
    case Node::Kind::Alt: {
      std::string out = "(";
      for (size_t i = 0; i < n.items.size(); ++i) {
        if (i) out += " | ";
        out += emit(n.items[i]);
      }
      return out + ")";
    }
    case Node::Kind::Repeat: {
      const std::string inner = emit(n.items[0]);
      if (n.min == 0 && n.max == kUnbounded) return inner + "*";
      if (n.min == 1 && n.max == kUnbounded) return inner + "+";
      if (n.min == 0 && n.max == 1) return inner + "?";
      if (n.max == kUnbounded) return fmt::format("{}{{{},}}", inner, n.min);
      if (n.min == n.max) return fmt::format("{}{{{}}}", inner, n.min);
      return fmt::format("{}{{{},{}}}", inner, n.min, n.max);
    }
  }
  return "\"\"";
}

}  // namespace

Result<std::string> regex_to_gbnf(std::string_view pattern, const std::string& any_char) {
  RegexParser p(pattern);
  Result<std::vector<RegexParser::Branch>> branches = p.parse();
  if (!branches) return branches.status();
  std::string out = "(";
  for (size_t i = 0; i < branches->size(); ++i) {
    const RegexParser::Branch& b = (*branches)[i];
    if (i) out += " | ";
    out += "(";
    if (!b.start_anchor) out += any_char + "* ";
    out += emit(b.body);
    if (!b.end_anchor) out += " " + any_char + "*";
    out += ")";
  }
  return out + ")";
}

}  // namespace ubatch::grammar
