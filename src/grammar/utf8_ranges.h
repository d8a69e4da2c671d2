// Code-point ranges as UTF-8 byte-range sequences (RFC 3629, section 3), so that a
// character class can run on a byte automaton.
//
// A range [lo, hi] of scalar values becomes a list of sequences; each sequence is one byte
// range per byte of the encoding, and a byte string is the UTF-8 encoding of a code point in
// [lo, hi] exactly when it matches one sequence. E.g. [U+0000, U+07FF] gives
// {[00-7F]}, {[C2-DF][80-BF]}.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace ubatch::grammar {

struct ByteRange {
  uint8_t lo = 0, hi = 0;  // inclusive
};

// Precondition: lo <= hi <= kMaxCodePoint and the range holds no surrogate.
std::vector<std::vector<ByteRange>> utf8_sequences(uint32_t lo, uint32_t hi);

}  // namespace ubatch::grammar
