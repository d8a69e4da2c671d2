#include "grammar/gbnf_text.h"

#include <fmt/format.h>

namespace ubatch::grammar {

namespace {

// One code point inside a literal or class; `in_class` also escapes what a class treats
// specially.
void put(uint32_t cp, bool in_class, std::string& out) {
  if (cp == '"' || cp == '\\' || (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^'))) {
    out += '\\';
    out += static_cast<char>(cp);
  } else if (cp < 0x20 || cp == 0x7F) {
    out += fmt::format("\\x{:02X}", cp);
  } else if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += fmt::format("\\U{:08X}", cp);
  }
}

}  // namespace

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      put(c, false, out);
    } else {
      out += static_cast<char>(c);  // multi-byte UTF-8 passes through unchanged
    }
  }
  out += '"';
  return out;
}

std::string gbnf_class(const std::vector<CharRange>& ranges) {
  std::string out = "[";
  for (const CharRange& r : ranges) {
    put(r.lo, true, out);
    if (r.hi != r.lo) {
      if (r.hi > r.lo + 1) out += '-';
      put(r.hi, true, out);
    }
  }
  out += ']';
  return out;
}

}  // namespace ubatch::grammar
