// SentencePiece BPE segmentation by piece score (Kudo & Richardson 2018, "SentencePiece: A
// simple and language independent subword tokenizer"; the BPE model of its reference
// implementation): start from single characters, repeatedly merge the adjacent pair whose
// concatenation is the vocabulary piece of highest score (leftmost on ties), then map each
// remaining piece to its id, or to its bytes' <0xNN> tokens when it is not in the
// vocabulary (byte fallback), or to the unknown token when there are no byte tokens.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace ubatch::tokenizer {

// Segments `text`, which must already have spaces replaced by U+2581 (and the space prefix
// added), appending ids to out. Invalid UTF-8 bytes are single symbols (→ byte tokens).
// O(n log n) in the number of characters.
void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);

// Appends the pieces' text for decoding: U+2581 → ' ', <0xNN> → the byte.
void spm_append_piece(const Vocab& vocab, int32_t id, std::string& out);

}  // namespace ubatch::tokenizer
