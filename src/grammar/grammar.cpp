#include "grammar/grammar.h"

#include <algorithm>

namespace ubatch::grammar {

namespace {
constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;
}

Expr Expr::literal(std::string b) {
  Expr e;
  e.kind = Kind::Literal;
  e.bytes = std::move(b);
  return e;
}

Expr Expr::chars(std::vector<CharRange> r) {
  Expr e;
  e.kind = Kind::Chars;
  e.ranges = normalize_ranges(std::move(r));
  return e;
}

Expr Expr::seq(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Kind::Seq;
  e.items = std::move(items);
  return e;
}

Expr Expr::alt(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Kind::Alt;
  e.items = std::move(items);
  return e;
}

Expr Expr::repeat(Expr item, uint32_t min, uint32_t max) {
  Expr e;
  e.kind = Kind::Repeat;
  e.items.push_back(std::move(item));
  e.min = min;
  e.max = max;
  return e;
}

Expr Expr::ref(int32_t rule) {
  Expr e;
  e.kind = Kind::Ref;
  e.rule = rule;
  return e;
}

std::vector<CharRange> normalize_ranges(std::vector<CharRange> ranges) {
  std::vector<CharRange> split;
  for (CharRange r : ranges) {
    if (r.lo > r.hi) continue;
    r.hi = std::min(r.hi, kMaxCodePoint);
    if (r.lo > r.hi) continue;
    // Cut the surrogates out.
    if (r.lo < kSurrogateLo && r.hi >= kSurrogateLo) {
      split.push_back({r.lo, kSurrogateLo - 1});
      if (r.hi > kSurrogateHi) split.push_back({kSurrogateHi + 1, r.hi});
    } else if (r.lo >= kSurrogateLo && r.lo <= kSurrogateHi) {
      if (r.hi > kSurrogateHi) split.push_back({kSurrogateHi + 1, r.hi});
    } else {
      split.push_back(r);
    }
  }
  std::sort(split.begin(), split.end(), [](const CharRange& a, const CharRange& b) { return a.lo < b.lo; });
  std::vector<CharRange> out;
  for (const CharRange& r : split) {
    // Merge overlapping or adjacent ranges (never across the surrogate gap, so no range
    // holds a surrogate).
    if (!out.empty()) {
      if (r.lo <= out.back().hi + 1) {
        out.back().hi = std::max(out.back().hi, r.hi);
        continue;
      }
    }
    out.push_back(r);
  }
  return out;
}

std::vector<CharRange> complement_ranges(const std::vector<CharRange>& ranges) {
  std::vector<CharRange> out;
  uint32_t next = 0;
  for (const CharRange& r : ranges) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return normalize_ranges(std::move(out));
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace ubatch::grammar
