// GBNF parser (contract in gbnf_parser.h): recursive descent over the text, rules resolved by
// name once the whole text is read.
#include "grammar/gbnf_parser.h"

#include <unordered_map>

#include <fmt/format.h>

namespace ubatch::grammar {

namespace {

constexpr uint32_t kMaxRepeat = 10000;
constexpr int kMaxNesting = 200;
constexpr int kMaxPostfix = 32;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Result<Grammar> run(std::string_view root_name) {
    if (Status st = check_utf8(); !st) return st;
    skip_space(true);
    while (pos_ < s_.size()) {
      const size_t name_pos = pos_;
      const std::string_view name = parse_name();
      if (name.empty()) return error(pos_, "expected a rule name");
      skip_space(false);
      if (s_.substr(pos_, 3) != "::=") return error(pos_, fmt::format("expected '::=' after the rule name '{}'", name));
      pos_ += 3;
      skip_space(true);
      const int32_t id = rule_id(name, name_pos);
      if (defined_[static_cast<size_t>(id)])
        return error(name_pos, fmt::format("the rule '{}' is defined twice", name));
      defined_[static_cast<size_t>(id)] = true;
      Result<Expr> body = parse_alternatives(false, 0);
      if (!body) return body.status();
      g_.rules[static_cast<size_t>(id)].body = std::move(body.value());
      skip_space(false);
      if (pos_ < s_.size() && s_[pos_] != '\n' && s_[pos_] != '\r')
        return error(pos_, fmt::format("unexpected '{}' in the rule '{}'", char_at(pos_), name));
      skip_space(true);
    }
    for (size_t i = 0; i < g_.rules.size(); ++i)
      if (!defined_[i]) return error(first_ref_[i], fmt::format("undefined rule '{}'", g_.rules[i].name));
    auto it = ids_.find(std::string(root_name));
    if (it == ids_.end() || !defined_[static_cast<size_t>(it->second)])
      return Status::error(fmt::format("grammar: no rule named '{}' (the start rule)", root_name));
    g_.root = it->second;
    return std::move(g_);
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  Grammar g_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<bool> defined_;
  std::vector<size_t> first_ref_;

  Status error(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Status::error(fmt::format("grammar: line {}, column {}: {}", line, col, what));
  }

  std::string char_at(size_t at) const {
    if (at >= s_.size()) return "end of text";
    const auto c = static_cast<unsigned char>(s_[at]);
    if (c >= 0x20 && c < 0x7F) return std::string(1, static_cast<char>(c));
    return fmt::format("\\x{:02X}", c);
  }

  Status check_utf8() const {
    size_t i = 0;
    while (i < s_.size()) {
      size_t len = 0;
      if (decode_at(i, len) == UINT32_MAX) return error(i, "the grammar text is not valid UTF-8");
      i += len;
    }
    return Status::ok();
  }

  // The code point at byte offset i (UINT32_MAX when the bytes there are not valid UTF-8).
  uint32_t decode_at(size_t i, size_t& len) const {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s_[i + k]); };
    const unsigned c = b(0);
    if (c < 0x80) return len = 1, c;
    uint32_t cp = 0, min = 0;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07, min = 0x10000;
    else return UINT32_MAX;
    if (i + len > s_.size()) return UINT32_MAX;
    for (size_t k = 1; k < len; ++k) {
      if ((b(k) & 0xC0) != 0x80) return UINT32_MAX;
      cp = (cp << 6) | (b(k) & 0x3F);
    }
    if (cp < min || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return UINT32_MAX;
    return cp;
  }

  // Spaces, tabs, comments; newlines too when `newlines`.
  void skip_space(bool newlines) {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n' && s_[pos_] != '\r') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view parse_name() {
    const size_t start = pos_;
    while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }

  int32_t rule_id(std::string_view name, size_t at) {
    auto [it, inserted] = ids_.try_emplace(std::string(name), static_cast<int32_t>(g_.rules.size()));
    if (inserted) {
      g_.rules.push_back(Rule{std::string(name), Expr::empty()});
      defined_.push_back(false);
      first_ref_.push_back(at);
    }
    return it->second;
  }

  Result<Expr> parse_alternatives(bool nested, int depth) {
    std::vector<Expr> alts;
    while (true) {
      Result<Expr> seq = parse_sequence(nested, depth);
      if (!seq) return seq.status();
      alts.push_back(std::move(seq.value()));
      if (pos_ < s_.size() && s_[pos_] == '|') {
        ++pos_;
        skip_space(true);
        continue;
      }
      if (!nested) {
        // A line that starts with '|' continues the rule.
        size_t save = pos_;
        skip_space(true);
        if (pos_ < s_.size() && s_[pos_] == '|') {
          ++pos_;
          skip_space(true);
          continue;
        }
        pos_ = save;
      }
      break;
    }
    return Expr::alt(std::move(alts));
  }

  Result<Expr> parse_sequence(bool nested, int depth) {
    std::vector<Expr> items;
    int n_postfix = 0;  // repetition operators on the last element
    while (true) {
      skip_space(nested);
      if (pos_ >= s_.size()) break;
      const char c = s_[pos_];
      const size_t at = pos_;
      if (c == '"') {
        Result<Expr> lit = parse_literal();
        if (!lit) return lit.status();
        items.push_back(std::move(lit.value()));
        n_postfix = 0;
      } else if (c == '[') {
        Result<Expr> cls = parse_class();
        if (!cls) return cls.status();
        items.push_back(std::move(cls.value()));
        n_postfix = 0;
      } else if (c == '.') {
        ++pos_;
        items.push_back(Expr::chars({{0, kMaxCodePoint}}));
        n_postfix = 0;
      } else if (c == '(') {
        if (depth >= kMaxNesting) return error(at, fmt::format("parentheses nested deeper than {}", kMaxNesting));
        ++pos_;
        skip_space(true);
        Result<Expr> inner = parse_alternatives(true, depth + 1);
        if (!inner) return inner.status();
        skip_space(true);
        if (pos_ >= s_.size() || s_[pos_] != ')') return error(pos_, fmt::format("expected ')' to close the '(' at {}", where(at)));
        ++pos_;
        items.push_back(std::move(inner.value()));
        n_postfix = 0;
      } else if (is_name_char(c)) {
        const std::string_view name = parse_name();
        items.push_back(Expr::ref(rule_id(name, at)));
        n_postfix = 0;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (items.empty()) return error(at, fmt::format("'{}' has no element before it to repeat", c));
        if (++n_postfix > kMaxPostfix)
          return error(at, fmt::format("more than {} repetition operators on one element", kMaxPostfix));
        uint32_t min = 0, max = kUnbounded;
        if (c == '*') {
          ++pos_;
        } else if (c == '+') {
          ++pos_;
          min = 1;
        } else if (c == '?') {
          ++pos_;
          max = 1;
        } else if (Status st = parse_braces(min, max); !st) {
          return st;
        }
        Expr last = std::move(items.back());
        items.back() = Expr::repeat(std::move(last), min, max);
      } else {
        break;
      }
    }
    return Expr::seq(std::move(items));
  }

  std::string where(size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at; ++i) {
      if (s_[i] == '\n') ++line, col = 1;
      else ++col;
    }
    return fmt::format("line {}, column {}", line, col);
  }

  bool parse_uint(uint32_t& out) {
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + static_cast<uint64_t>(s_[pos_] - '0');
      if (v > kMaxRepeat) v = kMaxRepeat + 1;
      ++pos_;
    }
    out = static_cast<uint32_t>(v);
    return pos_ > start;
  }

  // {m}, {m,}, {m,n}, {,n}
  Status parse_braces(uint32_t& min, uint32_t& max) {
    const size_t at = pos_;
    ++pos_;
    skip_space(false);
    uint32_t m = 0, n = kUnbounded;
    const bool has_min = parse_uint(m);
    skip_space(false);
    if (pos_ < s_.size() && s_[pos_] == ',') {
      ++pos_;
      skip_space(false);
      uint32_t v = 0;
      if (parse_uint(v)) n = v;
      else if (!has_min) return error(pos_, "expected a count in '{,n}'");
    } else {
      if (!has_min) return error(pos_, "expected a count after '{'");
      n = m;
    }
    skip_space(false);
    if (pos_ >= s_.size() || s_[pos_] != '}') return error(pos_, "expected '}' to close the repetition");
    ++pos_;
    if (m > kMaxRepeat || (n != kUnbounded && n > kMaxRepeat))
      return error(at, fmt::format("repetition counts are limited to {}", kMaxRepeat));
    if (n < m) return error(at, fmt::format("repetition {{{},{}}}: the maximum is below the minimum", m, n));
    min = m;
    max = n;
    return Status::ok();
  }

  // One character of a literal or class at pos_ (escape or UTF-8), advancing past it.
  Status parse_char(uint32_t& cp) {
    if (pos_ >= s_.size()) return error(pos_, "unexpected end of text");
    const size_t at = pos_;
    if (s_[pos_] != '\\') {
      size_t len = 0;
      cp = decode_at(pos_, len);
      pos_ += len;
      return Status::ok();
    }
    ++pos_;
    if (pos_ >= s_.size()) return error(at, "unfinished escape at the end of the text");
    const char e = s_[pos_++];
    int digits = 0;
    switch (e) {
      case 'n': cp = '\n'; return Status::ok();
      case 'r': cp = '\r'; return Status::ok();
      case 't': cp = '\t'; return Status::ok();
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^':
        cp = static_cast<unsigned char>(e);
        return Status::ok();
      case 'x': digits = 2; break;
      case 'u': digits = 4; break;
      case 'U': digits = 8; break;
      default: return error(at, fmt::format("unknown escape '\\{}'", char_at(at + 1)));
    }
    uint64_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (pos_ >= s_.size()) return error(at, fmt::format("escape '\\{}' needs {} hex digits", e, digits));
      const char h = s_[pos_];
      int d = -1;
      if (h >= '0' && h <= '9') d = h - '0';
      else if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      if (d < 0) return error(pos_, fmt::format("escape '\\{}' needs {} hex digits", e, digits));
      v = v * 16 + static_cast<uint64_t>(d);
      ++pos_;
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF))
      return error(at, fmt::format("escape gives U+{:X}, which is not a Unicode scalar value", v));
    cp = static_cast<uint32_t>(v);
    return Status::ok();
  }

  Result<Expr> parse_literal() {
    const size_t at = pos_;
    ++pos_;
    std::string bytes;
    while (true) {
      if (pos_ >= s_.size() || s_[pos_] == '\n' || s_[pos_] == '\r')
        return error(at, "unterminated literal (a '\"' is missing before the end of the line)");
      if (s_[pos_] == '"') break;
      uint32_t cp = 0;
      if (Status st = parse_char(cp); !st) return st;
      append_utf8(cp, bytes);
    }
    ++pos_;
    return Expr::literal(std::move(bytes));
  }

  Result<Expr> parse_class() {
    const size_t at = pos_;
    ++pos_;
    bool negate = false;
    if (pos_ < s_.size() && s_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<CharRange> ranges;
    while (true) {
      if (pos_ >= s_.size() || s_[pos_] == '\n' || s_[pos_] == '\r')
        return error(at, "unterminated character class (a ']' is missing before the end of the line)");
      if (s_[pos_] == ']') break;
      uint32_t lo = 0;
      const size_t item = pos_;
      if (Status st = parse_char(lo); !st) return st;
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        if (Status st = parse_char(hi); !st) return st;
        if (hi < lo) return error(item, fmt::format("range U+{:04X}-U+{:04X} is reversed", lo, hi));
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    if (ranges.empty()) return error(at, "empty character class");
    std::vector<CharRange> norm = normalize_ranges(std::move(ranges));
    if (negate) norm = complement_ranges(norm);
    if (norm.empty()) return error(at, "the character class matches no character");
    return Expr::chars(std::move(norm));
  }
};

}  // namespace

Result<Grammar> parse_gbnf(std::string_view text, std::string_view root_name) {
  return Parser(text).run(root_name);
}

}  // namespace ubatch::grammar
