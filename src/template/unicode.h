// Code-point helpers for the template engine: UTF-8 walking and the few Unicode character
// properties Python's str methods need (isspace, isprintable for repr, simple case mapping).
//
// Every string inside the engine is valid UTF-8 (template source is checked at parse time,
// JSON input is valid by construction, and every operation cuts at code-point boundaries),
// so these helpers assume it and never see a malformed sequence.
//
// Coverage (documented approximations of Python 3.11's Unicode database):
//  - is_space: exactly Python's str.isspace (the 29 code points of White_Space + the four
//    information separators U+001C..U+001F).
//  - is_printable: false for C0/C1 controls, DEL, the Zs/Zl/Zp separators other than ' ', the
//    common format characters (Cf: soft hyphen, ZWSP..RLM, bidi embeddings and isolates,
//    word joiner, BOM, tags …), private use and the non-characters; everything else is
//    printable (unassigned code points are not detected).
//  - case mapping (upper/lower): ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and the
//    fullwidth Latin letters, one code point to one (except ß → "SS" in upper and İ → "i̇"
//    in lower); the Greek final sigma rule of str.lower is not applied.
//  - is_alpha/is_digit/is_alnum: ASCII exact; beyond ASCII a letter is a code point the case
//    mapping knows or one in the main CJK/Hangul/Kana blocks; digits are ASCII only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ubatch::jinja::unicode {

// Length in bytes of the UTF-8 sequence whose first byte is `lead` (1 for a stray byte).
inline size_t seq_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at s[i] and advances i past it. i < s.size().
uint32_t next(std::string_view s, size_t& i);
// Appends the UTF-8 encoding of cp.
void append(std::string& out, uint32_t cp);
// Number of code points.
size_t length(std::string_view s);
// Byte offset of code point index `cp_index` (s.size() when past the end).
size_t byte_offset(std::string_view s, size_t cp_index);
// The code points of s.
std::vector<uint32_t> decode(std::string_view s);
// Whether s is well-formed UTF-8 (Unicode table 3-7: no overlong, no surrogate, <= U+10FFFF);
// on failure *bad_offset is the first bad byte.
bool valid(std::string_view s, size_t* bad_offset = nullptr);

bool is_space(uint32_t cp);
bool is_printable(uint32_t cp);
bool is_alpha(uint32_t cp);
bool is_digit(uint32_t cp);
inline bool is_alnum(uint32_t cp) { return is_alpha(cp) || is_digit(cp); }
// Simple case mapping (see above); the code point itself when it has none.
uint32_t to_upper(uint32_t cp);
uint32_t to_lower(uint32_t cp);
bool is_upper(uint32_t cp);  // has a lowercase mapping different from itself
bool is_lower(uint32_t cp);  // has an uppercase mapping different from itself

// Whole-string forms (Python str.upper / str.lower: ß upper-cases to "SS").
std::string upper(std::string_view s);
std::string lower(std::string_view s);

}  // namespace ubatch::jinja::unicode
