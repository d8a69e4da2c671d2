// UTF-8 helpers shared by the tokenizers (private to src/tokenizer/).
//
// Well-formedness follows the Unicode Standard, chapter 3, table 3-7 ("Well-Formed UTF-8 Byte
// Sequences"): no overlongs, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ubatch::tokenizer {

// What the bytes at the start of a buffer hold.
struct Utf8Scan {
  enum Kind { COMPLETE, INCOMPLETE, INVALID };
  Kind kind = INVALID;
  // COMPLETE: length of the character (1..4). INCOMPLETE: the whole buffer (a valid prefix
  // of a character that more bytes could complete). INVALID: length of the maximal subpart
  // of an ill-formed sequence (>= 1), which a decoder replaces by one U+FFFD.
  size_t len = 1;
};

// Classifies the sequence starting at s[0]; s must not be empty.
Utf8Scan utf8_scan(std::string_view s);

// Length of the character at s[0] if it is a well-formed UTF-8 character, else 1 (an invalid
// byte stands alone). s must not be empty.
inline size_t utf8_char_len(std::string_view s) {
  Utf8Scan r = utf8_scan(s);
  return r.kind == Utf8Scan::COMPLETE ? r.len : 1;
}

// Decodes the well-formed character at s[0] (len from utf8_char_len); an invalid byte b
// decodes as 0xDC00 + b (never produced by valid input, so it stays distinct).
uint32_t utf8_decode(std::string_view s, size_t len);

// Appends the UTF-8 encoding of cp (cp <= 0x10FFFF, not a surrogate; else U+FFFD).
void utf8_append(std::string& out, uint32_t cp);

// U+FFFD REPLACEMENT CHARACTER, U+2581 LOWER ONE EIGHTH BLOCK (SentencePiece's space).
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

}  // namespace ubatch::tokenizer
