// detokenize(tokenize(s)) == s on every vocabulary we have (reference vocabularies, the tiny
// model's, and the real Gemma 3 model when installed), for ASCII, accented, CJK, emoji, tabs,
// runs of spaces and newlines; and streaming pieces through Utf8StreamDecoder gives the
// same text.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "test_tokenizer_fixtures.h"
#include "tokenizer/tokenizer.h"

namespace ubatch {
namespace {

const std::vector<std::string>& samples() {
  static const std::vector<std::string> s = {
      "Hello world",
      " leading space",
      "trailing space ",
      "  two leading, three inner   spaces and five trailing     ",
      "tabs\tand\t\tmore tabs\n",
      "\n\nnewlines\n\n\nand\r\nCRLF\n",
      "Accents: café, naïve, Äpfel, Cửa Việt, ñandú",
      "CJK: 我想在apple工作1314151天～ 日本語のテキスト 한국어",
      "Emoji: 🦙🚀 😶‍🌫️ ✅ 👍🏽",
      "Cyrillic нещо на Български, Khmer កាន់តែពិសេស",
      "code: for (int i = 0; i < n; ++i) { x[i] *= 2; } // done",
      "numbers 3 33 333 3333 3.14159 1,000,000",
      "' era ''' \"\"\" ... !!! ??? I've been 'told he's there",
      "x",
      "",
  };
  return s;
}

void check_roundtrip(const Tokenizer& tok, const std::string& name) {
  for (const std::string& s : samples()) {
    for (bool add_bos : {false, true}) {
      const std::vector<int32_t> ids = tok.tokenize(s, add_bos, false);
      EXPECT_EQ(tok.detokenize(ids), s) << name << (add_bos ? " (bos)" : "");
      // Streaming: pieces one by one through the decoder (SPM's prefix space kept: the
      // stream has no notion of "first piece"; strip it the way detokenize does).
      Utf8StreamDecoder dec;
      std::string streamed;
      for (int32_t id : ids) streamed += dec.push(tok.token_to_piece(id));
      streamed += dec.flush();
      EXPECT_EQ(streamed, tok.detokenize(ids, false, /*remove_space_prefix=*/false)) << name;
    }
  }
}

class RoundTripReference : public ::testing::TestWithParam<const char*> {};

TEST_P(RoundTripReference, Samples) {
  UBATCH_TOKENIZER_FROM_REFERENCE(tok, GetParam());
  check_roundtrip(*tok, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Vocabs, RoundTripReference,
                         ::testing::Values("tokenizer/ggml-vocab-llama-spm.gguf",
                                           "tokenizer/ggml-vocab-phi-3.gguf",
                                           "tokenizer/ggml-vocab-gpt-2.gguf",
                                           "tokenizer/ggml-vocab-falcon.gguf",
                                           "tokenizer/ggml-vocab-deepseek-coder.gguf",
                                           "tokenizer/ggml-vocab-starcoder.gguf",
                                           "tokenizer/ggml-vocab-qwen2.gguf",
                                           "tokenizer/ggml-vocab-llama-bpe-qwenvocab.gguf",
                                           "models/tiny-llama-f32.gguf",
                                           "models/tiny-gemma3-f32.gguf"));

TEST(RoundTripGemma, DefaultModel) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  auto tok = test::tokenizer_from_path(test::default_model());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->n_vocab(), 262144);
  check_roundtrip(*tok, "gemma");
  // Gemma has no space prefix: a leading space is its own piece and survives.
  const std::vector<int32_t> ids = tok->tokenize(" Hello", false, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(tok->detokenize(ids), " Hello");
  // A few well-known pieces.
  EXPECT_EQ(tok->tokenize("Hello world", false, false),
            (std::vector<int32_t>{tok->token_id("Hello"), tok->token_id("\xE2\x96\x81world")}));
}

TEST(RoundTripGemma, TokenizesManyTokensFast) {
  // Not a timed assertion: prints the rate so a regression is visible in the log.
  UBATCH_REQUIRE_DEFAULT_MODEL();
  auto tok = test::tokenizer_from_path(test::default_model());
  ASSERT_NE(tok, nullptr);
  std::string text;
  while (text.size() < (1u << 20)) {
    for (const std::string& s : samples()) text += s + "\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok->tokenize(text, true, false);
  const auto t1 = std::chrono::steady_clock::now();
  const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
  std::cout << "[ rate     ] gemma: " << text.size() << " bytes -> " << ids.size() << " tokens, "
            << us / static_cast<double>(ids.size()) << " us/token\n";
  EXPECT_EQ(tok->detokenize(ids), text);
}

// The Qwen2 vocabulary (151,936 tokens, 151,387 merges): how long it takes to load, and the
// tokenization rate over mixed text (English, code, CJK, emoji, digits: the samples above).
// Not a timed assertion: prints both so a regression is visible in the log; checks the ids
// round-trip.
TEST(RoundTripQwen2, LoadTimeAndRate) {
  UBATCH_REQUIRE_REFERENCE();
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = test::tokenizer_from_path(test::reference_path("tokenizer/ggml-vocab-qwen2.gguf"));
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_NE(tok, nullptr);
  std::string text;
  while (text.size() < (1u << 20)) {
    for (const std::string& s : samples()) text += s + "\n";
  }
  const auto t2 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok->tokenize(text, false, false);
  const auto t3 = std::chrono::steady_clock::now();
  const double load_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double s = std::chrono::duration<double>(t3 - t2).count();
  std::cout << "[ rate     ] qwen2: vocabulary loaded in " << load_ms << " ms; " << text.size()
            << " bytes -> " << ids.size() << " tokens in " << s * 1e3 << " ms, "
            << static_cast<double>(text.size()) / s / 1e6 << " MB/s\n";
  EXPECT_EQ(tok->detokenize(ids), text);
}

}  // namespace
}  // namespace ubatch
