// Splits a code-point range until every piece has encodings of one length whose bytes vary
// independently (each continuation byte spans its full 80-BF range below the first byte
// that differs), then reads the byte ranges off the endpoints' encodings.
#include "grammar/utf8_ranges.h"

#include "common/status.h"

namespace ubatch::grammar {

namespace {

constexpr uint32_t kMaxForLength[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

int encoded_length(uint32_t cp) {
  for (int n = 0; n < 4; ++n)
    if (cp <= kMaxForLength[n]) return n + 1;
  return 4;
}

void encode(uint32_t cp, int len, uint8_t* out) {
  static constexpr uint8_t kLead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
  for (int k = len - 1; k > 0; --k) {
    out[k] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    cp >>= 6;
  }
  out[0] = static_cast<uint8_t>(kLead[len] | cp);
}

void split(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>& out) {
  const int n_lo = encoded_length(lo), n_hi = encoded_length(hi);
  if (n_lo != n_hi) {
    const uint32_t edge = kMaxForLength[n_lo - 1];
    split(lo, edge, out);
    split(edge + 1, hi, out);
    return;
  }
  const int len = n_lo;
  for (int i = 1; i < len; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;  // the low i continuation bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode(lo, len, a);
  encode(hi, len, b);
  std::vector<ByteRange> seq;
  for (int k = 0; k < len; ++k) seq.push_back({a[k], b[k]});
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<std::vector<ByteRange>> utf8_sequences(uint32_t lo, uint32_t hi) {
  UBATCH_CHECK(lo <= hi && hi <= kMaxCodePoint);
  std::vector<std::vector<ByteRange>> out;
  split(lo, hi, out);
  return out;
}

}  // namespace ubatch::grammar
