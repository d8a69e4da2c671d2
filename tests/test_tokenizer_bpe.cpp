// Byte-level BPE on synthetic vocabularies (merge ranks, byte alphabet) and the
// pre-tokenizer split rules per `tokenizer.ggml.pre`.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_tokenizer_fixtures.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ubatch {
namespace {

using tokenizer::PreTokenizer;

std::vector<std::string> split(const std::string& pre, const std::string& text) {
  auto p = PreTokenizer::create(pre);
  EXPECT_TRUE(p) << p.message();
  std::vector<std::string> out;
  if (!p) return out;
  std::string joined;
  for (std::string_view w : p->split(text)) {
    out.emplace_back(w);
    joined += w;
  }
  EXPECT_EQ(joined, text) << "words must concatenate to the text";
  return out;
}

using Words = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world's  3 end!!"),
            (Words{"Hello", " world", "'s", " ", " 3", " end", "!!"}));
  EXPECT_EQ(split("gpt-2", "a \n\n b"), (Words{"a", " \n\n", " b"}));
}

TEST(PreTokenizer, StarcoderSplitsDigits) {
  EXPECT_EQ(split("starcoder", "x 123"), (Words{"x", " ", "1", "2", "3"}));
  EXPECT_EQ(split("smollm", "x 123"), split("starcoder", "x 123"));
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(split("llama3", "Hello world 12345 I'VE\n\n  x"),
            (Words{"Hello", " world", " ", "123", "45", " I", "'VE", "\n\n", " ", " x"}));
  EXPECT_EQ(split("llama-bpe", "Hello"), (Words{"Hello"}));
}

TEST(PreTokenizer, Qwen2SplitsDigitsOneByOne) {
  EXPECT_EQ(split("qwen2", "ab 123"), (Words{"ab", " ", "1", "2", "3"}));
}

// Llama 3 groups digits by up to three, full-width and other \p{N} digits included; Qwen2
// takes them one by one (the -extra vectors' string 40 tells the two apart on a real vocabulary).
TEST(PreTokenizer, Llama3AndQwen2DigitGroups) {
  const std::string fw = "\xEF\xBC\x92\xEF\xBC\x90\xEF\xBC\x92\xEF\xBC\x94";  // "２０２４"
  EXPECT_EQ(split("llama-bpe", fw + "x"), (Words{fw.substr(0, 9), fw.substr(9), "x"}));
  EXPECT_EQ(split("qwen2", fw).size(), 4u);
  EXPECT_EQ(split("llama3", "1234567"), (Words{"123", "456", "7"}));
  EXPECT_EQ(split("qwen2", "123"), (Words{"1", "2", "3"}));
  // The rest of the expression is the same: contractions in any case, one leading
  // non-letter before a word, newlines kept with the punctuation before them.
  for (const char* pre : {"llama-bpe", "qwen2"}) {
    EXPECT_EQ(split(pre, "DON'T $x!\n\ny"), (Words{"DON", "'T", " $", "x", "!\n\n", "y"})) << pre;
    EXPECT_EQ(split(pre, "a$x"), (Words{"a", "$x"})) << pre;
  }
}

TEST(PreTokenizer, SmollmIsStarcoder) {
  const std::string text = "SmolLM2 has 135M params, v1.2\n\n  ok";
  EXPECT_EQ(split("smollm", text), split("starcoder", text));
  EXPECT_EQ(split("smollm", "v1.25"), (Words{"v", "1", ".", "2", "5"}));
}

TEST(PreTokenizer, DeepseekCoderAppliesRegexesInSequence) {
  EXPECT_EQ(split("deepseek-coder", "ab, cd\n12"), (Words{"ab", ",", " cd", "\n", "1", "2"}));
}

TEST(PreTokenizer, FalconPunctuationAndThreeDigits) {
  EXPECT_EQ(split("falcon", "a...b 123456"), (Words{"a", "...", "b", " ", "123", "456"}));
}

TEST(PreTokenizer, InvalidUtf8StaysInTheWords) {
  const std::string text = "ab\xFF\xC3 cd\x80";
  split("gpt-2", text);  // checks the words concatenate to the text
  split("llama3", text);
  split("deepseek-coder", text);
}

TEST(PreTokenizer, UnknownNameIsAClearError) {
  auto p = PreTokenizer::create("no-such-pre");
  ASSERT_FALSE(p);
  EXPECT_NE(p.message().find("no-such-pre"), std::string::npos) << p.message();
  EXPECT_NE(p.message().find("gpt-2"), std::string::npos) << "lists the supported names";
}

// Byte-level vocabulary: the 256 byte characters, then merged pieces.
test::VocabSpec bpe_vocab(const std::vector<std::string>& merges, const std::string& pre) {
  test::VocabSpec s;
  s.model = "gpt2";
  s.pre = pre;
  for (int b = 0; b < 256; ++b) s.tokens.emplace_back(tokenizer::byte_to_unicode(static_cast<uint8_t>(b)));
  for (const std::string& m : merges) {
    const size_t sp = m.find(' ');
    s.tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
  }
  s.tokens.push_back("<|endoftext|>");
  s.types.assign(s.tokens.size(), 1);
  s.types.back() = 3;
  s.merges = merges;
  s.eos = static_cast<int64_t>(s.tokens.size() - 1);
  return s;
}

TEST(TokenizerBpe, LowerRankMergesFirst) {
  // "abc" with merges [b c, a b]: "bc" merges first, then no "a bc" merge: [a, bc].
  auto tok = test::tokenizer_from_spec(bpe_vocab({"b c", "a b"}, "gpt-2"));
  ASSERT_TRUE(tok) << tok.message();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.tokenize("abc", false, false), (std::vector<int32_t>{'a' - 0, t.token_id("bc")}))
      << "byte 'a' is token 97";
  auto tok2 = test::tokenizer_from_spec(bpe_vocab({"a b", "b c"}, "gpt-2"));
  ASSERT_TRUE(tok2) << tok2.message();
  EXPECT_EQ((*tok2)->tokenize("abc", false, false),
            (std::vector<int32_t>{(*tok2)->token_id("ab"), 'c'}));
}

// Llama 3's rule (ignore_merges): a pre-tokenized word that is itself a token is emitted whole,
// even when the merges would not build it; other pre-tokenizers always merge.
TEST(TokenizerBpe, Llama3TakesWholeWordsWithoutMerging) {
  test::VocabSpec s = bpe_vocab({"b c"}, "llama-bpe");
  s.tokens.insert(s.tokens.end() - 1, "abc");  // a token no merge reaches ("a bc" is absent)
  s.types.insert(s.types.end() - 1, 1);
  s.eos = static_cast<int64_t>(s.tokens.size() - 1);
  auto llama = test::tokenizer_from_spec(s);
  ASSERT_TRUE(llama) << llama.message();
  const int32_t abc = (*llama)->token_id("abc"), bc = (*llama)->token_id("bc");
  ASSERT_GE(abc, 0);
  EXPECT_EQ((*llama)->tokenize("abc", false, false), (std::vector<int32_t>{abc}));
  EXPECT_EQ((*llama)->tokenize("abcd", false, false), (std::vector<int32_t>{'a', bc, 'd'}))
      << "a word that is not a token is merged as usual";
  for (const char* pre : {"gpt-2", "qwen2", "smollm"}) {
    s.pre = pre;
    auto other = test::tokenizer_from_spec(s);
    ASSERT_TRUE(other) << other.message();
    EXPECT_EQ((*other)->tokenize("abc", false, false), (std::vector<int32_t>{'a', bc})) << pre;
  }
  // A control token's text is never taken whole from plain text.
  s.pre = "llama-bpe";
  s.tokens.insert(s.tokens.end() - 1, "xyz");
  s.types.insert(s.types.end() - 1, 3);
  s.eos = static_cast<int64_t>(s.tokens.size() - 1);
  auto ctl = test::tokenizer_from_spec(s);
  ASSERT_TRUE(ctl) << ctl.message();
  EXPECT_EQ((*ctl)->tokenize("xyz", false, false), (std::vector<int32_t>{'x', 'y', 'z'}));
}

TEST(TokenizerBpe, SpaceIsByteLevelG) {
  auto tok = test::tokenizer_from_spec(bpe_vocab({"\xC4\xA0 a"}, "gpt-2"));  // "Ġ a"
  ASSERT_TRUE(tok) << tok.message();
  const Tokenizer& t = **tok;
  const int32_t ga = t.token_id("\xC4\xA0" "a");
  ASSERT_GE(ga, 0);
  EXPECT_EQ(t.tokenize("a a", false, false), (std::vector<int32_t>{'a', ga}));
  EXPECT_EQ(t.detokenize({'a', ga}), "a a");
  EXPECT_EQ(t.token_to_piece(ga), " a");
}

TEST(TokenizerBpe, EveryByteRoundTrips) {
  auto tok = test::tokenizer_from_spec(bpe_vocab({"a b"}, "gpt-2"));
  ASSERT_TRUE(tok) << tok.message();
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::vector<int32_t> ids = (*tok)->tokenize(all, false, false);
  EXPECT_EQ(ids.size(), 255u);  // 'a' 'b' merged
  EXPECT_EQ((*tok)->detokenize(ids), all);
}

TEST(TokenizerBpe, MissingPreIsDefault) {
  auto tok = test::tokenizer_from_spec(bpe_vocab({"a b"}, ""));
  ASSERT_TRUE(tok) << tok.message();
}

TEST(TokenizerBpe, UnknownPreIsAnError) {
  auto tok = test::tokenizer_from_spec(bpe_vocab({"a b"}, "mystery-pre"));
  ASSERT_FALSE(tok);
  EXPECT_NE(tok.message().find("mystery-pre"), std::string::npos) << tok.message();
}

TEST(TokenizerBpe, MissingMergesIsAnError) {
  auto s = bpe_vocab({"a b"}, "gpt-2");
  s.merges.clear();
  auto tok = test::tokenizer_from_spec(s);
  ASSERT_FALSE(tok);
  EXPECT_NE(tok.message().find("merges"), std::string::npos) << tok.message();
}

}  // namespace
}  // namespace ubatch
