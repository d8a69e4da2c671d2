// Hostile input never crashes or corrupts: invalid UTF-8, NUL bytes, 1 MB of one character,
// every byte value, out-of-range ids; and malformed vocabulary metadata is a clear error.
// Every input also keeps the bytes-per-token bound (Tokenizer::max_piece_bytes).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "test_tokenizer_fixtures.h"
#include "tokenizer/tokenizer.h"

namespace ubatch {
namespace {

bool is_valid_utf8(const std::string& s) {
  Utf8StreamDecoder d;
  return d.push(s) + d.flush() == s;
}

// What must round-trip. ALL: every byte value has its own byte token. VALID_UTF8:
// DeepSeek-Coder's vocabulary lacks the byte-level characters of the 13 bytes that never
// occur in UTF-8 (C0, C1, F5..FF) and has user-defined tokens with those characters' text
// instead (õ, ÿ, …); a stray such byte tokenizes to one and decodes as that character.
// NONE: Falcon's vocabulary lacks some byte characters altogether (e.g. 0x03, 0xFF): those
// bytes are dropped (it has no unknown token); WordPiece (bert-bge) drops whitespace and
// control characters and spells a whole unknown word as one [UNK].
enum class RoundTrip { ALL, VALID_UTF8, NONE };

void check_hostile(const Tokenizer& tok, const std::string& name, RoundTrip round_trip) {
  std::vector<std::string> inputs = {
      std::string("a\0b\0\0c", 6),
      "\xFF\xFE\xFD",
      "\xC3",
      "ok \xE6\x97 broken \xF0\x9F\xA6 tail\x80",
      "\xED\xA0\x80 surrogate \xC0\xAF overlong",
      std::string(1 << 20, 'a'),
      std::string(1 << 20, ' '),
      std::string(1 << 20, '\n'),
      std::string(1 << 20, '3'),
      std::string(1 << 20, '\xFF'),
  };
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  inputs.push_back(all_bytes);
  std::string emoji;
  while (emoji.size() < (1u << 20)) emoji += "\xF0\x9F\xA6\x99";
  inputs.push_back(emoji);
  // The piece that spells the most bytes, 1,000 times: the lower bound of max_piece_bytes() is tight.
  int32_t longest = -1;
  for (int32_t id = 0; id < tok.n_vocab(); ++id)
    if (longest < 0 || tok.token_to_piece(id, true).size() > tok.token_to_piece(longest, true).size()) longest = id;
  std::string repeated;
  for (int k = 0; k < 1000; ++k) repeated += tok.token_to_piece(longest, true);
  inputs.push_back(repeated);
  std::mt19937 rng(1234);
  for (int k = 0; k < 20; ++k) {
    std::string r(1 + rng() % 200, '\0');
    for (char& c : r) c = static_cast<char>(rng() & 0xFF);
    inputs.push_back(r);
  }
  // A vocabulary that drops bytes it cannot spell has no bytes-per-token bound; the others do.
  const size_t piece = tok.max_piece_bytes();
  if (round_trip == RoundTrip::NONE) {
    EXPECT_EQ(piece, 0u) << name;
  } else {
    EXPECT_EQ(piece, tok.token_to_piece(longest, true).size()) << name;
  }
  for (const std::string& s : inputs) {
    for (bool parse_special : {false, true}) {
      const std::vector<int32_t> ids = tok.tokenize(s, true, parse_special);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.n_vocab()) << name;
      // The server refuses a prompt by this bound before tokenizing it (json_request.cpp).
      if (piece > 0) {
        EXPECT_GE(ids.size(), (s.size() + piece - 1) / piece) << name << ": input of " << s.size() << " bytes";
      }
      const bool must_round_trip = round_trip == RoundTrip::ALL ||
                                   (round_trip == RoundTrip::VALID_UTF8 && is_valid_utf8(s));
      if (!parse_special && must_round_trip) {
        // Whatever the bytes, byte-level BPE and SPM with byte fallback give them back.
        EXPECT_EQ(tok.detokenize(ids), s) << name << ": input of " << s.size() << " bytes";
      }
    }
  }
  // Out-of-range ids decode to nothing.
  EXPECT_EQ(tok.token_to_piece(-1), "");
  EXPECT_EQ(tok.token_to_piece(tok.n_vocab()), "");
  EXPECT_EQ(tok.detokenize({-5, tok.n_vocab(), 1 << 30}), "");
}

struct HostileCase {
  const char* vocab;
  RoundTrip round_trip;
};

class HostileReference : public ::testing::TestWithParam<HostileCase> {};

TEST_P(HostileReference, NeverCrashes) {
  UBATCH_TOKENIZER_FROM_REFERENCE(tok, GetParam().vocab);
  check_hostile(*tok, GetParam().vocab, GetParam().round_trip);
}

INSTANTIATE_TEST_SUITE_P(
    Vocabs, HostileReference,
    ::testing::Values(HostileCase{"tokenizer/ggml-vocab-llama-spm.gguf", RoundTrip::ALL},
                      HostileCase{"tokenizer/ggml-vocab-gpt-2.gguf", RoundTrip::ALL},
                      HostileCase{"tokenizer/ggml-vocab-deepseek-coder.gguf", RoundTrip::VALID_UTF8},
                      HostileCase{"tokenizer/ggml-vocab-falcon.gguf", RoundTrip::NONE},
                      HostileCase{"tokenizer/ggml-vocab-qwen2.gguf", RoundTrip::ALL},
                      HostileCase{"tokenizer/ggml-vocab-bert-bge.gguf", RoundTrip::NONE}));

TEST(HostileGemma, NeverCrashes) {
  UBATCH_REQUIRE_DEFAULT_MODEL();
  auto tok = test::tokenizer_from_path(test::default_model());
  ASSERT_NE(tok, nullptr);
  check_hostile(*tok, "gemma", RoundTrip::ALL);
}

// Malformed metadata.
test::VocabSpec good_spm() {
  test::VocabSpec s;
  s.tokens = {"<unk>", "<s>", "</s>", "a"};
  s.types = {2, 3, 3, 1};
  s.scores = {0, 0, 0, -1};
  return s;
}

void expect_error(const test::VocabSpec& s, const std::string& fragment) {
  auto tok = test::tokenizer_from_spec(s);
  ASSERT_FALSE(tok) << "expected an error mentioning " << fragment;
  EXPECT_NE(tok.message().find(fragment), std::string::npos) << tok.message();
}

TEST(TokenizerMetadata, GoodVocabularyLoads) {
  auto tok = test::tokenizer_from_spec(good_spm());
  ASSERT_TRUE(tok) << tok.message();
  EXPECT_EQ((*tok)->n_vocab(), 4);
  EXPECT_EQ((*tok)->bos(), 1);  // conventional SPM ids when the keys are absent
  EXPECT_EQ((*tok)->eos(), 2);
  EXPECT_EQ((*tok)->eot(), -1);
  EXPECT_EQ((*tok)->chat_template(), "");
}

TEST(TokenizerMetadata, Errors) {
  test::VocabSpec s = good_spm();
  s.model = "";
  expect_error(s, "tokenizer.ggml.model");
  s = good_spm();
  s.model = "t5";
  expect_error(s, "\"t5\"");
  s = good_spm();
  s.model = "rwkv";
  expect_error(s, "\"bert\" (WordPiece)");  // the message lists the supported models
  s = good_spm();
  s.scores.pop_back();
  expect_error(s, "tokenizer.ggml.scores");
  s = good_spm();
  s.types.push_back(1);
  expect_error(s, "tokenizer.ggml.token_type");
  s = good_spm();
  s.types[3] = 9;
  expect_error(s, "token_type[3]");
  s = good_spm();
  s.bos = 4;
  expect_error(s, "tokenizer.ggml.bos_token_id = 4");
  s = good_spm();
  s.eot = 100;
  expect_error(s, "eot_token_id");
  s = good_spm();
  s.tokens.clear();
  s.types.clear();
  s.scores.clear();
  expect_error(s, "tokenizer.ggml.tokens");
}

// A hostile vocabulary cannot make a load take memory out of proportion to the file: one
// user-defined token of 1 MiB (each of its bytes would be a node of the special-token tries,
// about 100 bytes of memory per byte of file: a 100 MB token took 8.9 GB and 49 s), too much
// special-token text in all, and a chat template of 2 MiB, are refused by name.
TEST(TokenizerMetadata, OverlongTokensAndTemplatesAreRefused) {
  test::VocabSpec s = good_spm();
  s.tokens.push_back(std::string(size_t{1} << 20, 'x'));
  s.types.push_back(4);  // USER_DEFINED
  s.scores.push_back(0);
  expect_error(s, "tokenizer.ggml.tokens[4] is 1048576 bytes long");
  s = good_spm();
  s.tokens[3] = std::string(4096, 'a');  // the longest allowed
  ASSERT_TRUE(test::tokenizer_from_spec(s)) << "a 4 KiB token is allowed";
  // 300 user-defined tokens of 4 KiB each: each within the bound, 1.2 MiB of trie text in all.
  s = good_spm();
  for (int i = 0; i < 300; ++i) {
    s.tokens.push_back(std::to_string(i) + std::string(4090, 'u'));
    s.types.push_back(4);
    s.scores.push_back(0);
  }
  expect_error(s, "user-defined and unknown tokens of tokenizer.ggml.tokens spell");
  s = good_spm();
  s.chat_template = std::string(size_t{2} << 20, ' ');
  expect_error(s, "tokenizer.chat_template is 2097152 bytes long");
}

}  // namespace
}  // namespace ubatch
