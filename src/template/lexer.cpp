// Template lexer (lexer.h). The rules follow jinja2 3.1's lexer.py: the root state finds the
// next delimiter, applies the whitespace control of its sign and of lstrip_blocks to the
// data before it, and the tag states read tokens until the closing delimiter, tried first at
// every position while no bracket is open.
#include "template/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "template/unicode.h"

namespace ubatch::jinja {

namespace {

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& opt) : src_(std::move(source)), opt_(opt) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      const size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_data(pos, src_.size());
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = 0;
      if (tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')) sign = src_[tag + 2];
      size_t data_end = apply_strip(pos, tag, sign, kind != '{', line_starting);
      emit_data(pos, data_end);
      const size_t inner = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(tag, inner, line_starting);
        continue;
      }
      if (kind == '%') {
        size_t raw_end;
        if (match_keyword_tag(inner, "raw", raw_end, false)) {
          pos = lex_raw(tag, raw_end, line_starting);
          continue;
        }
      }
      pos = lex_tag(tag, inner, kind == '%', line_starting);
    }
    Token eof;
    eof.kind = TokenKind::kEof;
    eof.pos = pos_of(src_.size());
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  SourcePos pos_of(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    const size_t start = line_starts_[line - 1];
    const size_t col = unicode::length(std::string_view(src_).substr(start, offset - start)) + 1;
    return {static_cast<uint32_t>(line), static_cast<uint32_t>(col)};
  }

  [[noreturn]] void fail(const std::string& msg, size_t offset) const { syntax_error(msg, pos_of(offset)); }

  bool space_at(size_t i, size_t* next = nullptr) const {
    size_t j = i;
    const bool s = unicode::is_space(unicode::next(src_, j));
    if (next) *next = j;
    return s;
  }

  size_t skip_space(size_t i) const {
    size_t j;
    while (i < src_.size() && space_at(i, &j)) i = j;
    return i;
  }

  // Earliest "{{", "{%" or "{#" at or after pos.
  size_t find_tag(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // End of the data [begin, end) after the whitespace control of the tag at `end`.
  size_t apply_strip(size_t begin, size_t end, char sign, bool block_or_comment, bool line_starting) const {
    if (sign == '-') {
      // rstrip(): all trailing whitespace.
      while (end > begin) {
        size_t b = end - 1;
        while (b > begin && (static_cast<unsigned char>(src_[b]) & 0xC0) == 0x80) --b;
        if (!space_at(b)) break;
        end = b;
      }
      return end;
    }
    if (sign == '+' || !opt_.lstrip_blocks || !block_or_comment) return end;
    // lstrip_blocks: only whitespace between the last newline (or a line start) and the tag.
    const size_t nl = src_.rfind('\n', end == 0 ? 0 : end - 1);
    const bool has_nl = nl != std::string::npos && nl >= begin && end > 0;
    const size_t l_pos = has_nl ? nl + 1 : begin;
    if (!has_nl && !line_starting) return end;
    if (l_pos >= end) return end;  // `\s+` needs at least one character
    for (size_t i = l_pos; i < end;) {
      size_t j;
      if (!space_at(i, &j)) return end;
      i = j;
    }
    return l_pos;
  }

  void emit_data(size_t begin, size_t end) {
    if (end <= begin) return;
    Token t;
    t.kind = TokenKind::kData;
    t.text = src_.substr(begin, end - begin);
    t.pos = pos_of(begin);
    tokens_.push_back(std::move(t));
  }

  // After a closing delimiter ending at `after`: whitespace control of its sign, trim_blocks.
  // Returns the new position; line_starting = whether the consumed text ended with "\n".
  size_t after_close(size_t after, char sign, bool trims, bool& line_starting) const {
    size_t pos = after;
    if (sign == '-') {
      pos = skip_space(after);
    } else if (sign != '+' && trims && opt_.trim_blocks && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    line_starting = pos > 0 && src_[pos - 1] == '\n';
    return pos;
  }

  size_t lex_comment(size_t tag, size_t inner, bool& line_starting) {
    const size_t close = src_.find("#}", inner);
    if (close == std::string::npos) fail("Missing end of comment tag", tag);
    char sign = 0;
    if (close > inner && (src_[close - 1] == '-' || src_[close - 1] == '+')) sign = src_[close - 1];
    return after_close(close + 2, sign, true, line_starting);
  }

  // ws* keyword ws* ("-%}" | "%}", and "+%}" when allow_plus) starting at `inner` (after
  // "{%" and its sign); close_out = index of the "%}" or of the sign before it. jinja2 allows
  // "+%}" after endraw but not after raw.
  bool match_keyword_tag(size_t inner, std::string_view keyword, size_t& close_out, bool allow_plus) const {
    size_t i = skip_space(inner);
    if (src_.compare(i, keyword.size(), keyword) != 0) return false;
    i += keyword.size();
    if (i < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[i])) || src_[i] == '_')) return false;
    i = skip_space(i);
    if (src_.compare(i, 2, "%}") == 0 || src_.compare(i, 3, "-%}") == 0 || (allow_plus && src_.compare(i, 3, "+%}") == 0)) {
      close_out = i;
      return true;
    }
    return false;
  }

  size_t lex_raw(size_t tag, size_t close, bool& line_starting) {
    // The raw begin tag: "-%}" strips after it; no trim_blocks newline removal.
    const char begin_sign = src_[close] == '%' ? 0 : src_[close];
    size_t content = close + (begin_sign ? 3 : 2);
    if (begin_sign == '-') content = skip_space(content);
    line_starting = content > 0 && src_[content - 1] == '\n';
    for (size_t i = find_tag(content); i != std::string::npos; i = find_tag(i + 1)) {
      if (src_[i + 1] != '%') continue;
      char sign = 0;
      if (i + 2 < src_.size() && (src_[i + 2] == '-' || src_[i + 2] == '+')) sign = src_[i + 2];
      size_t end_close;
      if (!match_keyword_tag(i + 2 + (sign ? 1 : 0), "endraw", end_close, true)) continue;
      emit_data(content, apply_strip(content, i, sign, true, line_starting));
      const char end_sign = src_[end_close] == '%' ? 0 : src_[end_close];
      return after_close(end_close + (end_sign ? 3 : 2), end_sign, true, line_starting);
    }
    fail("Missing end of raw directive", tag);
  }

  // Tokens of an expression or statement tag; returns the position after it.
  size_t lex_tag(size_t tag, size_t inner, bool block, bool& line_starting) {
    Token begin;
    begin.kind = block ? TokenKind::kBlockBegin : TokenKind::kVarBegin;
    begin.pos = pos_of(tag);
    tokens_.push_back(std::move(begin));
    std::vector<char> balance;
    size_t i = inner;
    while (true) {
      if (balance.empty()) {
        char sign = 0;
        size_t close_len = 0;
        if (block) {
          if (src_.compare(i, 3, "-%}") == 0 || src_.compare(i, 3, "+%}") == 0) {
            sign = src_[i];
            close_len = 3;
          } else if (src_.compare(i, 2, "%}") == 0) {
            close_len = 2;
          }
        } else {
          if (src_.compare(i, 3, "-}}") == 0) {
            sign = '-';
            close_len = 3;
          } else if (src_.compare(i, 2, "}}") == 0) {
            close_len = 2;
          }
        }
        if (close_len) {
          Token end;
          end.kind = block ? TokenKind::kBlockEnd : TokenKind::kVarEnd;
          end.pos = pos_of(i);
          tokens_.push_back(std::move(end));
          return after_close(i + close_len, sign, block, line_starting);
        }
      }
      if (i >= src_.size())
        fail(std::string("unexpected end of template, expected '") + (block ? "end of statement block" : "end of print statement") + "'",
             tag);
      size_t j;
      if (space_at(i, &j)) {
        i = j;
        continue;
      }
      i = lex_token(i, balance);
    }
  }

  size_t lex_token(size_t i, std::vector<char>& balance) {
    const char c = src_[i];
    Token t;
    t.pos = pos_of(i);
    if (std::isdigit(static_cast<unsigned char>(c))) {
      const size_t end = lex_number(i, t);
      tokens_.push_back(std::move(t));
      return end;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
      t.kind = TokenKind::kName;
      t.text = src_.substr(i, j - i);
      tokens_.push_back(std::move(t));
      return j;
    }
    if (c == '\'' || c == '"') {
      const size_t end = lex_string(i, t);
      tokens_.push_back(std::move(t));
      return end;
    }
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src_.compare(i, 2, op) == 0) {
        t.kind = TokenKind::kOperator;
        t.text = std::string(op);
        tokens_.push_back(std::move(t));
        return i + 2;
      }
    }
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      size_t j = i;
      const uint32_t cp = unicode::next(src_, j);
      std::string shown;
      unicode::append(shown, cp);
      fail("unexpected char '" + shown + "'", i);
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(std::string("unexpected '") + c + "'", i);
      if (balance.back() != c) fail(std::string("unexpected '") + c + "', expected '" + balance.back() + "'", i);
      balance.pop_back();
    }
    t.kind = TokenKind::kOperator;
    t.text = std::string(1, c);
    tokens_.push_back(std::move(t));
    return i + 1;
  }

  // Digits with single "_" separators from i; returns the end (i when none).
  size_t digits(size_t i, int base = 10) const {
    auto is_digit = [&](char ch) {
      if (base == 16) return std::isxdigit(static_cast<unsigned char>(ch)) != 0;
      if (base == 8) return ch >= '0' && ch <= '7';
      if (base == 2) return ch == '0' || ch == '1';
      return ch >= '0' && ch <= '9';
    };
    size_t j = i;
    if (j >= src_.size() || !is_digit(src_[j])) return i;
    while (j < src_.size()) {
      if (is_digit(src_[j])) {
        ++j;
      } else if (src_[j] == '_' && j + 1 < src_.size() && is_digit(src_[j + 1])) {
        j += 2;
      } else {
        break;
      }
    }
    return j;
  }

  static std::string without_underscores(std::string_view s) {
    std::string out;
    for (char ch : s)
      if (ch != '_') out += ch;
    return out;
  }

  size_t lex_number(size_t i, Token& t) {
    // Float: digits then (.digits)? e[+-]?digits, or digits.digits (not right after a ".").
    const bool after_dot = i > 0 && src_[i - 1] == '.';
    const size_t int_end = digits(i);
    if (!after_dot) {
      size_t j = int_end;
      bool is_float = false;
      if (j < src_.size() && src_[j] == '.' && digits(j + 1) > j + 1) {
        j = digits(j + 1);
        is_float = true;
      }
      if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
        size_t k = j + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        const size_t exp_end = digits(k);
        if (exp_end > k) {
          j = exp_end;
          is_float = true;
        }
      }
      if (is_float) {
        t.kind = TokenKind::kFloat;
        const std::string text = without_underscores(std::string_view(src_).substr(i, j - i));
        t.float_value = std::strtod(text.c_str(), nullptr);
        return j;
      }
    }
    // Integer: 0b/0o/0x prefixes, decimal without leading zeros, or zeros.
    int base = 10;
    size_t body = i, end;
    if (src_[i] == '0' && i + 1 < src_.size() && std::string_view("bBoOxX").find(src_[i + 1]) != std::string_view::npos) {
      const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[i + 1])));
      base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      body = i + 2;
      if (body < src_.size() && src_[body] == '_') ++body;
      end = digits(body, base);
      if (end == body) fail("invalid integer literal", i);
    } else if (src_[i] == '0') {
      end = i + 1;
      while (end < src_.size() && (src_[end] == '0' || (src_[end] == '_' && end + 1 < src_.size() && src_[end + 1] == '0')))
        end += src_[end] == '_' ? 2 : 1;
    } else {
      end = int_end;
    }
    const std::string text = without_underscores(std::string_view(src_).substr(body, end - body));
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      fail("integer literal out of range (ints are 64-bit here)", i);
    t.kind = TokenKind::kInt;
    t.int_value = static_cast<int64_t>(v);
    return end;
  }

  // A quoted string from i; decodes Python's escapes (jinja2 applies "unicode-escape").
  size_t lex_string(size_t i, Token& t) {
    const char quote = src_[i];
    std::string out;
    size_t j = i + 1;
    while (true) {
      if (j >= src_.size()) fail("unterminated string literal", i);
      const char c = src_[j];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++j;
        continue;
      }
      if (j + 1 >= src_.size()) fail("unterminated string literal", i);
      const char e = src_[j + 1];
      j += 2;
      auto hex = [&](size_t n) -> uint32_t {
        if (j + n > src_.size()) fail("truncated \\" + std::string(1, e) + " escape", j - 2);
        uint32_t v = 0;
        for (size_t k = 0; k < n; ++k) {
          const char h = src_[j + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) fail("truncated \\" + std::string(1, e) + " escape", j - 2);
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : std::tolower(h) - 'a' + 10);
        }
        j += n;
        return v;
      };
      auto put = [&](uint32_t cp) {
        if (cp > 0x10FFFF) fail("illegal Unicode character in escape", j);
        if (cp >= 0xD800 && cp <= 0xDFFF) fail("surrogate code point in a string escape", j);
        unicode::append(out, cp);
      };
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': put(hex(2)); break;
        case 'u': put(hex(4)); break;
        case 'U': put(hex(8)); break;
        case 'N': fail("\\N{...} escapes are not supported", j - 2);
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && j < src_.size() && src_[j] >= '0' && src_[j] <= '7'; ++k)
              v = v * 8 + static_cast<uint32_t>(src_[j++] - '0');
            put(v);
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            // Python sees the backslash-replaced form of the character: "\\" then "xNN"…
            size_t k = j - 1;
            const uint32_t cp = unicode::next(src_, k);
            char buf[16];
            if (cp <= 0xFF) {
              std::snprintf(buf, sizeof buf, "\\x%02x", cp);
            } else if (cp <= 0xFFFF) {
              std::snprintf(buf, sizeof buf, "\\u%04x", cp);
            } else {
              std::snprintf(buf, sizeof buf, "\\U%08x", cp);
            }
            out += buf;
            j = k;
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    t.kind = TokenKind::kString;
    t.text = std::move(out);
    return j + 1;
  }

  std::string src_;
  LexerOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  size_t bad = 0;
  if (!unicode::valid(source, &bad)) {
    // Position of the bad byte, counted on the raw source.
    uint32_t line = 1, col = 1;
    for (size_t i = 0; i < bad; ++i) {
      if (source[i] == '\n') {
        ++line;
        col = 1;
      } else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80) {
        ++col;
      }
    }
    syntax_error("template is not valid UTF-8 (byte " + std::to_string(bad) + ")", {line, col});
  }
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!options.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), options).run();
}

}  // namespace ubatch::jinja
