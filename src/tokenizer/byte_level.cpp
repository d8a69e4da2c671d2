#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace ubatch::tokenizer {

namespace {
struct Tables {
  std::array<std::string, 256> encoded;  // byte -> UTF-8 of its character
  std::array<int16_t, 324> decoded;      // code point (< 324) -> byte, -1 if not in alphabet
  Tables() {
    decoded.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cp = printable ? b : next++;
      utf8_append(encoded[b], cp);
      decoded[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}
}  // namespace

std::string_view byte_to_unicode(uint8_t b) { return tables().encoded[b]; }

void byte_level_encode(std::string_view bytes, std::string& out) {
  const Tables& t = tables();
  for (char c : bytes) out.append(t.encoded[static_cast<uint8_t>(c)]);
}

void byte_level_decode(std::string_view text, std::string& out) {
  const Tables& t = tables();
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = utf8_char_len(text.substr(i));
    const uint32_t cp = utf8_decode(text.substr(i), len);
    if (cp < t.decoded.size() && t.decoded[cp] >= 0) {
      out.push_back(static_cast<char>(t.decoded[cp]));
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
}

}  // namespace ubatch::tokenizer
