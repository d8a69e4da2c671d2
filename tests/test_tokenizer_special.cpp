// Special tokens: control tokens are recognised in text only with parse_special (longest
// match first), user-defined ones always; BOS/EOS/EOT ids, add_bos, is_eog; rendering of
// control tokens only when asked.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "test_tokenizer_fixtures.h"
#include "tokenizer/tokenizer.h"

namespace ubatch {
namespace {

bool contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

TEST(TokenizerSpecial, LlamaSpmControlTokensOnlyWithParseSpecial) {
  UBATCH_TOKENIZER_FROM_REFERENCE(tok, "tokenizer/ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_TRUE(tok->add_bos_default());
  const std::string text = "Hello</s><s>world";
  const std::vector<int32_t> plain = tok->tokenize(text, false, false);
  EXPECT_FALSE(contains(plain, 1));
  EXPECT_FALSE(contains(plain, 2));
  const std::vector<int32_t> special = tok->tokenize(text, false, true);
  // "▁Hello" </s> <s> "▁world": the space prefix goes on text after a special token.
  const std::vector<int32_t> hello = tok->tokenize("Hello", false, false);
  const std::vector<int32_t> world = tok->tokenize("world", false, false);
  std::vector<int32_t> want = hello;
  want.push_back(2);
  want.push_back(1);
  want.insert(want.end(), world.begin(), world.end());
  EXPECT_EQ(special, want);
  // Rendering: control tokens only with special = true.
  EXPECT_EQ(tok->detokenize(special, false), "Hello world");
  EXPECT_EQ(tok->detokenize(special, true), "Hello</s><s> world");
  EXPECT_EQ(tok->token_to_piece(1, false), "");
  EXPECT_EQ(tok->token_to_piece(1, true), "<s>");
  // BOS.
  const std::vector<int32_t> with_bos = tok->tokenize("Hello", true, false);
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos[0], 1);
  EXPECT_EQ(tok->detokenize(with_bos), "Hello");
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(1));
  EXPECT_FALSE(tok->is_eog(-1));
  EXPECT_FALSE(tok->is_eog(tok->n_vocab()));
}

TEST(TokenizerSpecial, Phi3EndTokensAreEog) {
  UBATCH_TOKENIZER_FROM_REFERENCE(tok, "tokenizer/ggml-vocab-phi-3.gguf");
  const std::vector<int32_t> ids = tok->tokenize("<|user|>\nHi<|end|>\n<|assistant|>\n", false, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 32010);  // <|user|>
  EXPECT_TRUE(contains(ids, 32007));  // <|end|>
  EXPECT_TRUE(contains(ids, 32001));  // <|assistant|>
  EXPECT_FALSE(contains(tok->tokenize("<|user|>\nHi<|end|>\n", false, false), 32010));
  EXPECT_EQ(tok->eos(), 32000);
  EXPECT_EQ(tok->eot(), 32007);
  EXPECT_TRUE(tok->is_eog(32000));  // <|endoftext|>
  EXPECT_TRUE(tok->is_eog(32007));  // <|end|>
  EXPECT_FALSE(tok->is_eog(32010));
  EXPECT_FALSE(tok->is_eog(2));  // </s>, USER_DEFINED here, is no end-of-turn text
  EXPECT_EQ(tok->eog_ids(), (std::vector<int32_t>{32000, 32007}));
  EXPECT_EQ(tok->pad(), 32000);
}

TEST(TokenizerSpecial, Gpt2EndOfText) {
  UBATCH_TOKENIZER_FROM_REFERENCE(tok, "tokenizer/ggml-vocab-gpt-2.gguf");
  EXPECT_FALSE(tok->add_bos_default());
  EXPECT_EQ(tok->tokenize("a<|endoftext|>b", false, true),
            (std::vector<int32_t>{64, 50256, 65}));
  const std::vector<int32_t> plain = tok->tokenize("a<|endoftext|>b", false, false);
  EXPECT_FALSE(contains(plain, 50256));
  EXPECT_EQ(tok->detokenize(plain), "a<|endoftext|>b");
  EXPECT_TRUE(tok->is_eog(50256));
  EXPECT_EQ(tok->token_to_piece(50256, true), "<|endoftext|>");
  EXPECT_EQ(tok->token_to_piece(50256, false), "");
}

// Qwen2 vocabulary: eos is <|endoftext|>, a chat turn ends with <|im_end|> (found by its text,
// CONTROL); <|im_start|> and the ordinary token `</s>` (128247, NORMAL) end nothing.
TEST(TokenizerSpecial, Qwen2EndOfTurnIsImEnd) {
  UBATCH_TOKENIZER_FROM_REFERENCE(tok, "tokenizer/ggml-vocab-qwen2.gguf");
  EXPECT_EQ(tok->model_name(), "gpt2");
  EXPECT_EQ(tok->pre_tokenizer(), "qwen2");
  EXPECT_FALSE(tok->add_bos_default());
  EXPECT_EQ(tok->bos(), 151643);
  EXPECT_EQ(tok->eos(), 151643);
  EXPECT_EQ(tok->eot(), 151645);
  EXPECT_EQ(tok->eom(), -1);
  EXPECT_EQ(tok->eog_ids(), (std::vector<int32_t>{151643, 151645}));
  EXPECT_FALSE(tok->is_eog(151644));  // <|im_start|>
  ASSERT_EQ(tok->token_id("</s>"), 128247);
  EXPECT_FALSE(tok->is_eog(128247));
  // ChatML markup with parse_special; the same text as content stays text.
  EXPECT_EQ(tok->tokenize("<|im_start|>user\nHi<|im_end|>", false, true).front(), 151644);
  EXPECT_EQ(tok->tokenize("a<|im_end|>b", false, true), (std::vector<int32_t>{64, 151645, 65}));
  EXPECT_FALSE(contains(tok->tokenize("a<|im_end|>b", false, false), 151645));
  // `</s>` is not promoted to a control token (README, "Two behaviours these vectors do not
  // decide"): typed, it is text whether or not special tokens are parsed.
  EXPECT_EQ(tok->tokenize("a</s>b", false, true), (std::vector<int32_t>{64, 522, 82, 51407}));
  EXPECT_EQ(tok->tokenize("a</s>b", false, false), (std::vector<int32_t>{64, 522, 82, 51407}));
}

TEST(TokenizerSpecial, Llama3PreTokenizerName) {
  UBATCH_TOKENIZER_FROM_REFERENCE(tok, "tokenizer/ggml-vocab-llama-bpe-qwenvocab.gguf");
  EXPECT_EQ(tok->pre_tokenizer(), "llama-bpe");
  UBATCH_TOKENIZER_FROM_REFERENCE(spm, "tokenizer/ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(spm->model_name(), "llama");
  EXPECT_EQ(spm->pre_tokenizer(), "");
}

// deepseek-coder's <|EOT|> is USER_DEFINED (as converters wrote added tokens before marking
// them CONTROL): it still ends a turn.
TEST(TokenizerSpecial, UserDefinedEndOfTurnIsEog) {
  UBATCH_TOKENIZER_FROM_REFERENCE(tok, "tokenizer/ggml-vocab-deepseek-coder.gguf");
  EXPECT_EQ(tok->eos(), 32014);
  EXPECT_EQ(tok->eot(), 32021);
  EXPECT_EQ(tok->eog_ids(), (std::vector<int32_t>{32014, 32021}));
}

// A synthetic ChatML-and-Llama-3 vocabulary: the eot / eom keys are read from the file; the
// texts add their tokens when special; the same texts as NORMAL tokens end nothing.
test::VocabSpec end_tokens_vocab() {
  test::VocabSpec s;
  s.tokens = {"<unk>", "<s>", "</s>", "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>",
              "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<|im_start|>", "a", "b"};
  s.types = {2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1, 1};
  s.scores.assign(s.tokens.size(), 0.0f);
  s.unk = 0;
  s.bos = 1;
  s.eos = 2;
  return s;
}

TEST(TokenizerSpecial, EndOfGenerationSetFromKeysAndTexts) {
  test::VocabSpec s = end_tokens_vocab();
  auto tok = test::tokenizer_from_spec(s);
  ASSERT_TRUE(tok) << tok.message();
  EXPECT_EQ((*tok)->eot(), 3);  // no key: <|eot_id|> is the first end-of-turn text found
  EXPECT_EQ((*tok)->eom(), 4);
  EXPECT_EQ((*tok)->eog_ids(), (std::vector<int32_t>{2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_FALSE((*tok)->is_eog(1));
  EXPECT_FALSE((*tok)->is_eog(10));
  EXPECT_FALSE((*tok)->is_eog(11));

  // The keys win over the texts; a key may name any token (here an ordinary one).
  s.eot = 5;
  s.eom = 12;
  auto keyed = test::tokenizer_from_spec(s);
  ASSERT_TRUE(keyed) << keyed.message();
  EXPECT_EQ((*keyed)->eot(), 5);
  EXPECT_EQ((*keyed)->eom(), 12);
  EXPECT_TRUE((*keyed)->is_eog(12));
  EXPECT_FALSE((*keyed)->is_eog(11));

  // The same texts as NORMAL tokens are text: only eos ends generation.
  test::VocabSpec plain = end_tokens_vocab();
  for (size_t i = 3; i <= 10; ++i) plain.types[i] = 1;
  auto t = test::tokenizer_from_spec(plain);
  ASSERT_TRUE(t) << t.message();
  EXPECT_EQ((*t)->eot(), -1);
  EXPECT_EQ((*t)->eom(), -1);
  EXPECT_EQ((*t)->eog_ids(), (std::vector<int32_t>{2}));

  // USER_DEFINED counts as special; UNUSED (5) does not.
  test::VocabSpec user = end_tokens_vocab();
  user.types[5] = 4;
  user.types[6] = 5;
  auto u = test::tokenizer_from_spec(user);
  ASSERT_TRUE(u) << u.message();
  EXPECT_TRUE((*u)->is_eog(5));
  EXPECT_FALSE((*u)->is_eog(6));
}

TEST(TokenizerSpecial, EndTokenIdOutOfRangeIsAnError) {
  test::VocabSpec s = end_tokens_vocab();
  s.eom = 13;
  auto tok = test::tokenizer_from_spec(s);
  ASSERT_FALSE(tok);
  EXPECT_NE(tok.message().find("eom_token_id"), std::string::npos) << tok.message();
}

TEST(TokenizerSpecial, LongestMatchWins) {
  test::VocabSpec s;
  s.tokens = {"<unk>", "<s>", "</s>", "<a>", "<a><b>", "<", ">", "a", "b", "x"};
  s.types = {2, 3, 3, 3, 3, 1, 1, 1, 1, 1};
  s.scores.assign(s.tokens.size(), 0.0f);
  s.unk = 0;
  s.add_space_prefix = 0;
  auto tok = test::tokenizer_from_spec(s);
  ASSERT_TRUE(tok) << tok.message();
  EXPECT_EQ((*tok)->tokenize("x<a><b>x<a>", false, true), (std::vector<int32_t>{9, 4, 9, 3}));
  EXPECT_EQ((*tok)->tokenize("<a>", false, false), (std::vector<int32_t>{5, 7, 6}));
  EXPECT_EQ((*tok)->tokenize("<a", false, true), (std::vector<int32_t>{5, 7}));
}

TEST(TokenizerSpecial, UserDefinedTokensAreAlwaysAtomic) {
  test::VocabSpec s;
  s.tokens = {"<unk>", "<s>", "</s>", "<ctl>", "\n\n", "\n", "a", "<", ">", "c", "t", "l"};
  s.types = {2, 3, 3, 3, 4, 1, 1, 1, 1, 1, 1, 1};
  s.scores.assign(s.tokens.size(), 0.0f);
  s.unk = 0;
  s.add_space_prefix = 0;
  auto tok = test::tokenizer_from_spec(s);
  ASSERT_TRUE(tok) << tok.message();
  for (bool parse_special : {false, true}) {
    EXPECT_EQ((*tok)->tokenize("a\n\n\na", false, parse_special),
              (std::vector<int32_t>{6, 4, 5, 6}));
  }
  EXPECT_EQ((*tok)->detokenize({6, 4, 5, 6}), "a\n\n\na");
  EXPECT_EQ((*tok)->tokenize("<ctl>", false, true), (std::vector<int32_t>{3}));
  EXPECT_EQ((*tok)->tokenize("<ctl>", false, false), (std::vector<int32_t>{7, 9, 10, 11, 8}));
}

TEST(TokenizerSpecial, GemmaModel) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  auto tok = test::tokenizer_from_path(test::default_model());
  ASSERT_NE(tok, nullptr);
  const int32_t sot = tok->token_id("<start_of_turn>");
  const int32_t eot = tok->token_id("<end_of_turn>");
  ASSERT_GE(sot, 0);
  ASSERT_GE(eot, 0);
  EXPECT_EQ(tok->eot(), eot);
  EXPECT_TRUE(tok->is_eog(eot));
  EXPECT_TRUE(tok->is_eog(tok->eos()));
  EXPECT_FALSE(tok->is_eog(sot));
  EXPECT_TRUE(tok->add_bos_default());
  const std::string text = "<start_of_turn>user\nHi<end_of_turn>\n";
  const std::vector<int32_t> on = tok->tokenize(text, true, true);
  ASSERT_GE(on.size(), 3u);
  EXPECT_EQ(on[0], tok->bos());
  EXPECT_EQ(on[1], sot);
  EXPECT_TRUE(contains(on, eot));
  const std::vector<int32_t> off = tok->tokenize(text, true, false);
  EXPECT_FALSE(contains(off, sot));
  EXPECT_FALSE(contains(off, eot));
  EXPECT_EQ(tok->detokenize(off), text);
  EXPECT_EQ(tok->detokenize(on, true), "<bos>" + text);
  EXPECT_EQ(tok->detokenize(on, false), "user\nHi\n");
}

}  // namespace
}  // namespace ubatch
