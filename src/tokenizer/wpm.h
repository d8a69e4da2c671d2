// WordPiece (`tokenizer.ggml.model` = "bert"; Wu et al. 2016, "Google's Neural Machine
// Translation System", §4.1; the BERT release's tokenization, Devlin et al. 2019), private to
// src/tokenizer/.
//
// 1. Basic tokenization, as BERT's uncased models do it: code points 0, U+FFFD and control
//    characters (general category Cc, Cf, Co, Cs, except tab, newline and carriage return) are
//    dropped; whitespace (tab, newline, carriage return, Zs) separates words; every
//    punctuation character (general category P*, and the ASCII symbols !"#$%&'()*+,-./:;<=>?@
//    [\]^_`{|}~) and every CJK ideograph (the CJK Unified Ideographs blocks and their
//    extensions A-F, and the compatibility ideographs) is a word of its own; each character is
//    lower-cased, decomposed canonically (NFD) and stripped of its non-spacing marks (Mn), so
//    "Äpfel" becomes "apfel". Unicode properties come from ICU.
// 2. Each word is split greedily into the longest vocabulary pieces from the left. GGUF
//    vocabularies spell a piece that starts a word with a leading U+2581 ("▁hello") and a
//    continuation piece bare ("fe"), where BERT's vocab.txt wrote "hello" and "##fe"; a word
//    with a position no piece covers, or longer than 100 characters, becomes the unknown token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace ubatch::tokenizer {

// Appends the ids of `text` (raw bytes; invalid UTF-8 is dropped like U+FFFD). Text with no
// word (empty, whitespace, control characters) adds nothing. Words that cannot be spelled add
// vocab.unk, or nothing when the vocabulary has no unknown token.
void wpm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);

// The BERT basic tokenizer alone (step 1): the words of `text`, each lower-cased and without
// accents, in UTF-8.
std::vector<std::string> wpm_words(std::string_view text);

}  // namespace ubatch::tokenizer
