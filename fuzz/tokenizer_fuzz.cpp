// libFuzzer target: the tokenizer on arbitrary bytes, with the default model's vocabulary
// (fuzz_tokenizer.h). Build and run: docs/FUZZING.md.
//
// Input: byte 0 = flags (bit 0 add_bos, bit 1 parse_special, bits 2..7 seed the segment
// split), the rest = text. Checks, for every input:
//  - every id is in [0, n_vocab); BOS first exactly when asked;
//  - plain text round-trips: detokenize(tokenize(text, _, false)) == text (every byte has a
//    token in Gemma's vocabulary, so nothing may be lost or invented; SentencePiece's space
//    character U+2581 comes back as a space);
//  - with special tokens parsed, the text round-trips when control tokens are rendered;
//  - SegmentedText: the text cut into segments of alternating kind tokenizes with no control
//    token outside a parse_special segment — the control ids are exactly those each markup
//    segment gives alone — and round-trips too; with no parse_special segment it has no
//    control token at all;
//  - token_to_piece of every id through Utf8StreamDecoder gives valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_tokenizer.h"

namespace {

using ubatch::SegmentedText;
using ubatch::Tokenizer;
using ubatch::Utf8StreamDecoder;

#define FUZZ_CHECK(cond)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      __builtin_trap();                                                            \
    }                                                                              \
  } while (0)

// What plain text decodes back to: SentencePiece vocabularies (Gemma's) spell a space as
// U+2581, so a literal U+2581 in the input comes back as a space (as in SentencePiece itself).
std::string round_tripped(const Tokenizer& tok, std::string s) {
  if (tok.token_id("\xE2\x96\x81") < 0 && tok.token_id("\xE2\x96\x81\xE2\x96\x81") < 0) return s;
  for (size_t p = s.find("\xE2\x96\x81"); p != std::string::npos; p = s.find("\xE2\x96\x81", p + 1)) s.replace(p, 3, " ");
  return s;
}

bool valid_utf8(const std::string& s) {
  Utf8StreamDecoder d;
  return d.push(s) + d.flush() == s;
}

int64_t count_control(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  int64_t n = 0;
  for (int32_t id : ids) n += ubatch::fuzz::is_control(tok, id) ? 1 : 0;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)ubatch::fuzz::tokenizer();  // load the vocabulary before the first input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tok = ubatch::fuzz::tokenizer();
  const uint8_t flags = data[0];
  const bool add_bos = flags & 1, parse_special = flags & 2;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string back = round_tripped(tok, text);

  const std::vector<int32_t> ids = tok.tokenize(text, add_bos, parse_special);
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tok.n_vocab());
  if (add_bos && tok.bos() >= 0) FUZZ_CHECK(!ids.empty() && ids[0] == tok.bos());
  const std::vector<int32_t> body(ids.begin() + (add_bos && tok.bos() >= 0 ? 1 : 0), ids.end());
  if (!parse_special) {
    FUZZ_CHECK(count_control(tok, body) == 0);
    FUZZ_CHECK(tok.detokenize(body) == back);
  } else {
    FUZZ_CHECK(tok.detokenize(body, /*special=*/true) == back);
  }

  // Segments: cut the text at pseudo-random points, kinds alternating from the flags.
  SegmentedText seg;
  SegmentedText plain_only;
  uint32_t state = 0x9E3779B9u ^ (flags >> 2);
  bool special = (flags >> 2) & 1;
  size_t pos = 0;
  std::vector<std::string_view> markup;
  while (pos < text.size()) {
    state = state * 1664525u + 1013904223u;
    const size_t len = 1 + (state >> 16) % 24;
    const std::string_view piece = std::string_view(text).substr(pos, len);
    seg.append(piece, special);
    plain_only.append(piece, false);
    if (special) markup.push_back(piece);
    pos += piece.size();
    special = !special;
  }
  const std::vector<int32_t> seg_ids = tok.tokenize(seg, false);
  int64_t markup_control = 0;
  for (std::string_view m : markup) markup_control += count_control(tok, tok.tokenize(m, false, true));
  FUZZ_CHECK(count_control(tok, seg_ids) == markup_control);
  FUZZ_CHECK(tok.detokenize(seg_ids, true) == back);
  const std::vector<int32_t> plain_ids = tok.tokenize(plain_only, false);
  FUZZ_CHECK(count_control(tok, plain_ids) == 0);
  FUZZ_CHECK(tok.detokenize(plain_ids) == back);

  // Pieces through the stream decoder: always valid UTF-8.
  Utf8StreamDecoder d;
  std::string streamed;
  for (int32_t id : ids) streamed += d.push(tok.token_to_piece(id, true));
  streamed += d.flush();
  FUZZ_CHECK(valid_utf8(streamed));
  return 0;
}
