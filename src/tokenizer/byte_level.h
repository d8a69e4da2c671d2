// GPT-2 byte-level alphabet (Radford et al. 2019, the `bytes_to_unicode` table of the GPT-2
// release): every byte value maps to one printable Unicode character so that BPE works on
// text without spaces or control characters. Bytes 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF map
// to the code point of the same value; the other 68 bytes, in increasing order, to U+0100,
// U+0101, … (so ' ' (0x20) becomes U+0120 'Ġ' and '\n' (0x0A) becomes U+010A 'Ċ').
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ubatch::tokenizer {

// UTF-8 text of the character that byte b maps to.
std::string_view byte_to_unicode(uint8_t b);

// Appends the byte-level encoding of bytes to out.
void byte_level_encode(std::string_view bytes, std::string& out);

// Appends the bytes that byte-level text stands for; characters outside the alphabet are
// copied unchanged (their UTF-8 bytes), as are invalid bytes.
void byte_level_decode(std::string_view text, std::string& out);

}  // namespace ubatch::tokenizer
