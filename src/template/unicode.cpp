// Code-point helpers (unicode.h). Tables are from the Unicode Character Database as Python
// 3.11 ships it (UnicodeData.txt general categories and simple case mappings), reduced to the
// ranges listed in the header.
#include "template/unicode.h"

namespace ubatch::jinja::unicode {

uint32_t next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t n = seq_len(b0);
  if (n == 1 || i + n > s.size()) {
    ++i;
    return b0;
  }
  uint32_t cp = n == 2 ? (b0 & 0x1Fu) : n == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
  i += n;
  return cp;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

size_t byte_offset(std::string_view s, size_t cp_index) {
  size_t i = 0;
  while (cp_index > 0 && i < s.size()) {
    i += seq_len(static_cast<unsigned char>(s[i]));
    --cp_index;
  }
  return i < s.size() ? i : s.size();
}

std::vector<uint32_t> decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next(s, i));
  return out;
}

bool valid(std::string_view s, size_t* bad_offset) {
  size_t i = 0;
  auto fail = [&] {
    if (bad_offset) *bad_offset = i;
    return false;
  };
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      n = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      n = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      n = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return fail();
    }
    if (i + n > s.size()) return fail();
    const auto b1 = static_cast<unsigned char>(s[i + 1]);
    if (b1 < lo || b1 > hi) return fail();
    for (size_t k = 2; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < 0x80 || b > 0xBF) return fail();
    }
    i += n;
  }
  return true;
}

bool is_space(uint32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_printable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0)) return false;  // C0, DEL, C1, NBSP
  if (cp < 0xAD) return true;
  if (cp == 0xAD) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
      (cp >= 0x205F && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206F) || cp == 0x3000)
    return false;
  if ((cp >= 0x0600 && cp <= 0x0605) || cp == 0x061C || cp == 0x06DD || cp == 0x070F || cp == 0x0890 ||
      cp == 0x0891 || cp == 0x08E2 || cp == 0x180E)
    return false;
  if ((cp >= 0xD800 && cp <= 0xF8FF) || (cp >= 0xFDD0 && cp <= 0xFDEF) || cp == 0xFEFF ||
      (cp >= 0xFFF9 && cp <= 0xFFFB))
    return false;
  if ((cp & 0xFFFE) == 0xFFFE) return false;  // U+xFFFE, U+xFFFF non-characters
  if (cp == 0x110BD || cp == 0x110CD || (cp >= 0x13430 && cp <= 0x1343F) || (cp >= 0x1BCA0 && cp <= 0x1BCA3) ||
      (cp >= 0x1D173 && cp <= 0x1D17A) || cp == 0xE0001 || (cp >= 0xE0020 && cp <= 0xE007F))
    return false;
  if (cp >= 0xF0000) return false;  // planes 15-16: private use
  return true;
}

uint32_t to_upper(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  if (cp == 0xB5) return 0x39C;
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp >= 0x100 && cp <= 0x17F) {
    if (cp == 0x131) return 'I';
    if (cp == 0x17F) return 'S';
    if (cp == 0x130 || cp == 0x138 || cp == 0x149) return cp;
    const bool odd_lower = (cp <= 0x137) || (cp >= 0x14A && cp <= 0x177);
    if (odd_lower) return (cp & 1) ? cp - 1 : cp;
    return (cp & 1) ? cp : cp - 1;  // 0x139..0x148, 0x179..0x17E: even is lower
  }
  if (cp >= 0x370 && cp <= 0x3FF) {
    if (cp == 0x3C2) return 0x3A3;
    if ((cp >= 0x3B1 && cp <= 0x3C1) || (cp >= 0x3C3 && cp <= 0x3CB)) return cp - 32;
    if (cp == 0x3AC) return 0x386;
    if (cp >= 0x3AD && cp <= 0x3AF) return cp - 37;
    if (cp == 0x3CC) return 0x38C;
    if (cp == 0x3CD || cp == 0x3CE) return cp - 63;
    return cp;
  }
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  if (cp >= 0xFF41 && cp <= 0xFF5A) return cp - 32;
  return cp;
}

uint32_t to_lower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp >= 0x100 && cp <= 0x17F) {
    if (cp == 0x130) return 'i';
    if (cp == 0x178) return 0xFF;
    if (cp == 0x131 || cp == 0x138 || cp == 0x149 || cp == 0x17F) return cp;
    const bool even_upper = (cp <= 0x137) || (cp >= 0x14A && cp <= 0x177);
    if (even_upper) return (cp & 1) ? cp : cp + 1;
    return (cp & 1) ? cp + 1 : cp;  // 0x139..0x148, 0x179..0x17E: odd is upper
  }
  if (cp >= 0x370 && cp <= 0x3FF) {
    if ((cp >= 0x391 && cp <= 0x3A1) || (cp >= 0x3A3 && cp <= 0x3AB)) return cp + 32;
    if (cp == 0x386) return 0x3AC;
    if (cp >= 0x388 && cp <= 0x38A) return cp + 37;
    if (cp == 0x38C) return 0x3CC;
    if (cp == 0x38E || cp == 0x38F) return cp + 63;
    return cp;
  }
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  if (cp >= 0xFF21 && cp <= 0xFF3A) return cp + 32;
  return cp;
}

bool is_upper(uint32_t cp) { return to_lower(cp) != cp || cp == 0x130; }
bool is_lower(uint32_t cp) { return to_upper(cp) != cp || cp == 0xDF || cp == 0x138 || cp == 0x149; }

bool is_alpha(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (is_upper(cp) || is_lower(cp) || cp == 0xAA || cp == 0xBA) return true;
  return (cp >= 0x5D0 && cp <= 0x5EA) || (cp >= 0x620 && cp <= 0x64A) || (cp >= 0x3041 && cp <= 0x30FA) ||
         (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7A3) ||
         (cp >= 0xF900 && cp <= 0xFAFF);
}

bool is_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = next(s, i);
    if (cp == 0xDF) {
      out += "SS";
    } else {
      append(out, to_upper(cp));
    }
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = next(s, i);
    if (cp == 0x130) {
      out += "i\xCC\x87";  // İ lower-cases to i + U+0307 COMBINING DOT ABOVE
    } else {
      append(out, to_lower(cp));
    }
  }
  return out;
}

}  // namespace ubatch::jinja::unicode
