#include "tokenizer/utf8.h"

namespace ubatch::tokenizer {

namespace {
// Allowed range of the second byte for a lead byte (table 3-7); the third and fourth
// bytes are always 80..BF.
struct Lead {
  size_t len;      // total length, 0 if the byte cannot start a character
  uint8_t lo, hi;  // range of the second byte
};

Lead lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}
}  // namespace

Utf8Scan utf8_scan(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const Lead lead = lead_info(p[0]);
  if (lead.len == 0) return {Utf8Scan::INVALID, 1};
  if (lead.len == 1) return {Utf8Scan::COMPLETE, 1};
  for (size_t k = 1; k < lead.len; ++k) {
    if (k >= n) return {Utf8Scan::INCOMPLETE, n};
    const uint8_t lo = k == 1 ? lead.lo : 0x80;
    const uint8_t hi = k == 1 ? lead.hi : 0xBF;
    if (p[k] < lo || p[k] > hi) return {Utf8Scan::INVALID, k};
  }
  return {Utf8Scan::COMPLETE, lead.len};
}

uint32_t utf8_decode(std::string_view s, size_t len) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  switch (len) {
    case 1: return p[0] < 0x80 ? p[0] : 0xDC00u + p[0];
    case 2: return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3: return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    case 4:
      return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
             (p[3] & 0x3Fu);
    default: return 0xFFFD;
  }
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
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

}  // namespace ubatch::tokenizer
