// WordPiece (tokenizer.ggml.model = "bert"): BERT's basic tokenization (controls dropped,
// whitespace splits, punctuation and CJK ideographs alone, lower case without accents) and the
// greedy longest-match split into "▁word-start" and bare continuation pieces. The reference
// vectors (bert-bge, 46 strings) are in test_tokenizer_vectors.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_tokenizer_fixtures.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/wpm.h"

namespace ubatch {
namespace {

using WpmWords = std::vector<std::string>;
using Ids = std::vector<int32_t>;

TEST(WordPieceWords, BasicTokenization) {
  using tokenizer::wpm_words;
  EXPECT_EQ(wpm_words("Hello, World!"), (WpmWords{"hello", ",", "world", "!"}));
  // Accents go (NFD, then the non-spacing marks are dropped), case folds, in any script.
  EXPECT_EQ(wpm_words("\xC3\x84pfel C\xE1\xBB\xAD" "a Vi\xE1\xBB\x87t"), (WpmWords{"apfel", "cua", "viet"}));
  EXPECT_EQ(wpm_words("e\xCC\x81t\xC3\xA9"), (WpmWords{"ete"}));  // a combining acute, then U+00E9
  EXPECT_EQ(wpm_words("\xD0\x91\xD1\x8A\xD0\xBB"), (WpmWords{"\xD0\xB1\xD1\x8A\xD0\xBB"}));  // "Бъл" -> "бъл"
  // CJK ideographs stand alone; kana and Hangul stay in words (Hangul as its jamo, from NFD).
  EXPECT_EQ(wpm_words("ab\xE6\x9D\xB1\xE4\xBA\xAC" "cd"), (WpmWords{"ab", "\xE6\x9D\xB1", "\xE4\xBA\xAC", "cd"}));
  EXPECT_EQ(wpm_words("\xED\x95\x9C"), (WpmWords{"\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"}));
  // Whitespace (tab, newline, CR, Zs such as U+3000) separates; controls and format characters
  // (U+200B ZERO WIDTH SPACE is Cf, U+000B is Cc) are dropped and join their neighbours; ASCII
  // symbols are punctuation, other symbols are letters of the word.
  EXPECT_EQ(wpm_words(" a\tb\r\nc\xE3\x80\x80" "d "), (WpmWords{"a", "b", "c", "d"}));
  EXPECT_EQ(wpm_words("x\xE2\x80\x8By\x0Bz"), (WpmWords{"xyz"}));
  EXPECT_EQ(wpm_words("1+2=3\xC2\xBD"), (WpmWords{"1", "+", "2", "=", "3\xC2\xBD"}));
  // Nothing but whitespace, NUL, U+FFFD or invalid UTF-8: no words.
  EXPECT_EQ(wpm_words(""), WpmWords{});
  EXPECT_EQ(wpm_words(std::string(" \t\n\0\xEF\xBF\xBD\xFF\xC3", 9)), WpmWords{});
  EXPECT_EQ(wpm_words("a\xFF" "b"), (WpmWords{"ab"}));
}

// [PAD] [UNK] [CLS] [SEP] and a few pieces.
test::VocabSpec bert_vocab() {
  test::VocabSpec s;
  s.model = "bert";
  s.tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "\xE2\x96\x81un", "\xE2\x96\x81unaff", "able",
              "aff", "\xE2\x96\x81" "a", "b", "\xE2\x96\x81!", "\xE2\x96\x81", "a"};
  s.types = {3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  s.unk = 1;
  return s;
}

Result<std::unique_ptr<Tokenizer>> bert_tokenizer() {
  test::VocabSpec s = bert_vocab();
  s.cls = 2;
  s.sep = 3;
  return test::tokenizer_from_spec(s);
}

TEST(TokenizerWpm, LongestPieceFirst) {
  auto tok = bert_tokenizer();
  ASSERT_TRUE(tok) << tok.message();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.model_name(), "bert");
  EXPECT_EQ(t.pre_tokenizer(), "");
  // "unaffable": the longest word start is "▁unaff" (not "▁un"), then "able".
  EXPECT_EQ(t.tokenize("unaffable", false, false), (Ids{5, 6}));
  EXPECT_EQ(t.tokenize("UNAFF", false, false), (Ids{5}));
  EXPECT_EQ(t.tokenize("unab", false, false), (Ids{4, 12, 9}));
  EXPECT_EQ(t.tokenize("ab! a", false, false), (Ids{8, 9, 10, 8}));
  // A word with a position no piece covers is one [UNK], whatever its length; so is a word of
  // more than 100 characters, even one the pieces could spell.
  EXPECT_EQ(t.tokenize("unx a", false, false), (Ids{1, 8}));
  EXPECT_EQ(t.tokenize("a" + std::string(99, 'b'), false, false).size(), 100u);
  EXPECT_EQ(t.tokenize("a" + std::string(100, 'b'), false, false), (Ids{1}));
  EXPECT_EQ(t.tokenize(" \n\t", false, false), Ids{});
}

TEST(TokenizerWpm, ClsSepAndDecoding) {
  auto tok = bert_tokenizer();
  ASSERT_TRUE(tok) << tok.message();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.bos(), 2);
  EXPECT_EQ(t.eos(), 3);
  EXPECT_TRUE(t.add_bos_default());
  EXPECT_TRUE(t.add_eos_default());
  EXPECT_EQ(t.tokenize("ab", true, false), (Ids{2, 8, 9}));
  EXPECT_EQ(t.tokenize("[CLS]ab[SEP]", false, true), (Ids{2, 8, 9, 3}));
  EXPECT_EQ(t.detokenize({2, 5, 6, 10, 8, 9, 3}), "unaffable ! ab");
  EXPECT_EQ(t.detokenize({2, 5, 6, 3}, true), "[CLS]unaffable[SEP]");
  // One [UNK] can stand for a word of any length and whitespace vanishes: no bound on the
  // bytes per token.
  EXPECT_EQ(t.max_piece_bytes(), 0u);
}

TEST(TokenizerWpm, BertBgeVocabulary) {
  UBATCH_TOKENIZER_FROM_REFERENCE(tok, "tokenizer/ggml-vocab-bert-bge.gguf");
  EXPECT_EQ(tok->bos(), 101);  // [CLS]
  EXPECT_EQ(tok->eos(), 102);  // [SEP]
  EXPECT_EQ(tok->eog_ids(), (Ids{102}));
  const Ids ids = tok->tokenize("Hello, World!", true, false);
  EXPECT_EQ(ids, (Ids{101, 7592, 1010, 2088, 999}));
  EXPECT_EQ(tok->detokenize(ids), "hello , world !");
}

}  // namespace
}  // namespace ubatch
