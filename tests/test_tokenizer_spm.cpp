// SPM segmentation on synthetic vocabularies: merge order by score, leftmost on ties, byte
// fallback, the unknown token when there are no byte tokens, the space prefix, decoding.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "test_tokenizer_fixtures.h"
#include "tokenizer/tokenizer.h"

namespace ubatch {
namespace {

using test::spm_space;

// <unk> <s> </s>, then the given normal pieces with their scores; byte tokens optional.
test::VocabSpec spm_vocab(const std::vector<std::pair<std::string, float>>& pieces,
                          bool byte_tokens) {
  test::VocabSpec s;
  s.tokens = {"<unk>", "<s>", "</s>"};
  s.types = {2, 3, 3};
  s.scores = {0, 0, 0};
  if (byte_tokens) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      s.tokens.push_back(name);
      s.types.push_back(6);
      s.scores.push_back(0);
    }
  }
  for (const auto& [p, score] : pieces) {
    s.tokens.push_back(p);
    s.types.push_back(1);
    s.scores.push_back(score);
  }
  s.unk = 0;
  s.bos = 1;
  s.eos = 2;
  return s;
}

int32_t id_of(const Tokenizer& tok, const std::string& piece) {
  const int32_t id = tok.token_id(piece);
  EXPECT_GE(id, 0) << piece;
  return id;
}

TEST(TokenizerSpm, HigherScoreMergesFirst) {
  for (bool ab_first : {true, false}) {
    auto s = spm_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", ab_first ? -1.f : -5.f},
                        {"bc", ab_first ? -5.f : -1.f}},
                       false);
    s.add_space_prefix = 0;
    auto tok = test::tokenizer_from_spec(s);
    ASSERT_TRUE(tok) << tok.message();
    const Tokenizer& t = **tok;
    const std::vector<int32_t> want =
        ab_first ? std::vector<int32_t>{id_of(t, "ab"), id_of(t, "c")}
                 : std::vector<int32_t>{id_of(t, "a"), id_of(t, "bc")};
    EXPECT_EQ(t.tokenize("abc", false, false), want);
  }
}

TEST(TokenizerSpm, EqualScoresMergeLeftmostFirst) {
  auto s = spm_vocab({{"a", -10}, {"ab", -1}, {"ba", -1}, {"b", -10}}, false);
  s.add_space_prefix = 0;
  auto tok = test::tokenizer_from_spec(s);
  ASSERT_TRUE(tok) << tok.message();
  const Tokenizer& t = **tok;
  // "aba": pairs "ab" (left 0) and "ba" (left 1) tie: "ab" merges, then "a".
  EXPECT_EQ(t.tokenize("aba", false, false), (std::vector<int32_t>{id_of(t, "ab"), id_of(t, "a")}));
}

TEST(TokenizerSpm, MergesChainThroughIntermediatePieces) {
  auto s = spm_vocab({{"h", -10}, {"e", -10}, {"l", -10}, {"o", -10}, {"he", -3}, {"ll", -2},
                      {"hell", -1}, {"hello", -0.5f}},
                     false);
  s.add_space_prefix = 0;
  auto tok = test::tokenizer_from_spec(s);
  ASSERT_TRUE(tok) << tok.message();
  EXPECT_EQ((*tok)->tokenize("hello", false, false), (std::vector<int32_t>{id_of(**tok, "hello")}));
}

TEST(TokenizerSpm, SpacePrefixAndSpaces) {
  auto s = spm_vocab({{spm_space(), -10}, {"a", -10}, {spm_space() + "a", -1}}, false);
  auto tok = test::tokenizer_from_spec(s);  // add_space_prefix absent: SPM default is true
  ASSERT_TRUE(tok) << tok.message();
  const Tokenizer& t = **tok;
  const int32_t sp = id_of(t, spm_space()), a = id_of(t, "a"), spa = id_of(t, spm_space() + "a");
  EXPECT_EQ(t.tokenize("a", false, false), (std::vector<int32_t>{spa}));
  EXPECT_EQ(t.tokenize("a a", false, false), (std::vector<int32_t>{spa, spa}));
  EXPECT_EQ(t.tokenize(" a", false, false), (std::vector<int32_t>{sp, spa}));
  EXPECT_EQ(t.tokenize("", false, false), (std::vector<int32_t>{}));
  EXPECT_EQ(t.tokenize("", true, false), (std::vector<int32_t>{1}));
  EXPECT_EQ(t.detokenize({spa, spa}), "a a");
  EXPECT_EQ(t.detokenize({spa, spa}, false, /*remove_space_prefix=*/false), " a a");
  EXPECT_EQ(t.detokenize({1, spa}), "a");  // after BOS, the first text piece loses the prefix
  (void)a;

  s.add_space_prefix = 0;
  auto no_prefix = test::tokenizer_from_spec(s);
  ASSERT_TRUE(no_prefix) << no_prefix.message();
  EXPECT_EQ((*no_prefix)->tokenize("a a", false, false), (std::vector<int32_t>{a, spa}));
  EXPECT_EQ((*no_prefix)->detokenize({a, spa}), "a a");
}

TEST(TokenizerSpm, ByteFallbackForUnknownCharacters) {
  auto s = spm_vocab({{"a", -1}}, true);
  s.add_space_prefix = 0;
  auto tok = test::tokenizer_from_spec(s);
  ASSERT_TRUE(tok) << tok.message();
  const Tokenizer& t = **tok;
  // "é" = C3 A9 → <0xC3> <0xA9> (ids 3 + byte).
  EXPECT_EQ(t.tokenize("a\xC3\xA9", false, false),
            (std::vector<int32_t>{id_of(t, "a"), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t.detokenize({id_of(t, "a"), 3 + 0xC3, 3 + 0xA9}), "a\xC3\xA9");
  EXPECT_EQ(t.token_to_piece(3 + 0xC3), "\xC3");
}

TEST(TokenizerSpm, UnknownTokenWithoutByteTokens) {
  auto s = spm_vocab({{"a", -1}, {"b", -1}}, false);
  s.add_space_prefix = 0;
  auto tok = test::tokenizer_from_spec(s);
  ASSERT_TRUE(tok) << tok.message();
  const Tokenizer& t = **tok;
  // One <unk> per character no piece covers (é is one character of two bytes).
  EXPECT_EQ(t.tokenize("a\xC3\xA9" "b\xFF", false, false),
            (std::vector<int32_t>{id_of(t, "a"), 0, id_of(t, "b"), 0}));
  EXPECT_EQ(t.token_to_piece(0, false), "\xEF\xBF\xBD");
  EXPECT_EQ(t.token_to_piece(0, true), "<unk>");
}

TEST(TokenizerSpm, ControlTokensAreNeverMergedFromText) {
  auto s = spm_vocab({{"<", -1}, {"s", -1}, {">", -1}, {"<s", -1}}, false);
  s.add_space_prefix = 0;
  auto tok = test::tokenizer_from_spec(s);
  ASSERT_TRUE(tok) << tok.message();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.tokenize("<s>", false, false), (std::vector<int32_t>{id_of(t, "<s"), id_of(t, ">")}));
  EXPECT_EQ(t.tokenize("<s>", false, true), (std::vector<int32_t>{1}));
}

}  // namespace
}  // namespace ubatch
