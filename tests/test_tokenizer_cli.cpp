// `ubatch tokenize`: reads stdin as-is and prints the ids on one line; `ubatch info`'s tokenizer
// section. Runs the built binary; skips when it has not been built or the vocabulary is absent.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "test_tokenizer_fixtures.h"
#include "tokenizer/tokenizer.h"

namespace ubatch {
namespace {

std::string ids_line(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s.push_back(' ');
    s += std::to_string(ids[i]);
  }
  return s + "\n";
}

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::ubatch_binary())) {
      GTEST_SKIP() << "ubatch binary not built at " << test::ubatch_binary();
    }
    UBATCH_REQUIRE_REFERENCE();
    input_ = (std::filesystem::temp_directory_path() /
              ("ubatch_tokenize_cli_" + std::to_string(::getpid()) + ".txt")).string();
  }
  void TearDown() override {
    if (!input_.empty()) std::filesystem::remove(input_);
  }
  std::string run(const std::string& model, const std::string& text, const std::string& flags,
                  int* status) {
    std::ofstream(input_, std::ios::binary) << text;
    return test::run_command(test::ubatch_command() + " tokenize -m '" + model + "' " + flags +
                                 " < '" + input_ + "'",
                             status);
  }
  std::string input_;
};

TEST_F(TokenizeCli, MatchesTheLibrary) {
  const std::string model = test::reference_path("tokenizer/ggml-vocab-llama-spm.gguf");
  auto tok = test::tokenizer_from_path(model);
  ASSERT_NE(tok, nullptr);
  const std::string text = "Hello world</s>\n\n";  // trailing newlines are part of the input
  int status = -1;
  EXPECT_EQ(run(model, text, "", &status), ids_line(tok->tokenize(text, true, false)));
  EXPECT_EQ(status, 0);
  EXPECT_EQ(run(model, text, "--no-bos", &status), ids_line(tok->tokenize(text, false, false)));
  EXPECT_EQ(run(model, text, "--no-bos --parse-special", &status),
            ids_line(tok->tokenize(text, false, true)));
}

// `ubatch info` ends its metadata with the tokenizer the vocabulary builds.
TEST_F(TokenizeCli, InfoShowsTheTokenizer) {
  int status = -1;
  const std::string qwen = test::run_command(
      test::ubatch_command() + " info --no-tensors '" +
          test::reference_path("tokenizer/ggml-vocab-qwen2.gguf") + "'",
      &status);
  EXPECT_EQ(status, 0) << qwen;
  EXPECT_NE(qwen.find("tokenizer: gpt2 (byte-level BPE), 151936 tokens, pre-tokenizer qwen2\n"),
            std::string::npos) << qwen;
  EXPECT_NE(qwen.find("  bos 151643 <|endoftext|>; eos 151643 <|endoftext|>; eot 151645 <|im_end|>; "
                      "eom -\n  end of generation: 151643 <|endoftext|>, 151645 <|im_end|>\n"),
            std::string::npos) << qwen;
  const std::string phi3 = test::run_command(
      test::ubatch_command() + " info --no-tensors '" +
          test::reference_path("tokenizer/ggml-vocab-phi-3.gguf") + "'",
      &status);
  EXPECT_NE(phi3.find("tokenizer: llama (SPM), 32064 tokens\n  bos 1 <s> (added); eos 32000 "
                      "<|endoftext|>; eot 32007 <|end|>;"),
            std::string::npos) << phi3;
}

TEST_F(TokenizeCli, BadModelFails) {
  int status = 0;
  run("/nonexistent/model.gguf", "x", "", &status);
  EXPECT_NE(status, 0);
}

}  // namespace
}  // namespace ubatch
