// Tokenizer test vectors from the reference implementation (shared/reference/tokenizer/):
// every string of each .inp must tokenize (no BOS, no special parsing) to its .out line. Every
// vector file there is run: SPM (llama-spm, phi-3, the tiny models), byte-level BPE under each
// pre-tokenizer (gpt-2, falcon, deepseek-coder, starcoder, qwen2 on a 151,936-token vocabulary,
// and llama-bpe on the same vocabulary: its -extra strings tell the two apart), WordPiece
// (bert-bge).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "support.h"
#include "tokenizer/tokenizer.h"

namespace ubatch {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// .inp: every test string is followed by "\n__ggml_vocab_test__\n" (strings may themselves
// be empty or contain newlines), so splitting on that separator leaves one empty tail.
std::vector<std::string> split_inputs(const std::string& data) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t next = data.find(sep, pos);
    if (next == std::string::npos) break;
    out.push_back(data.substr(pos, next - pos));
    pos = next + sep.size();
  }
  EXPECT_EQ(pos, data.size()) << "text after the last separator";
  return out;
}

// .out: one line of space-separated ids per string.
std::vector<std::vector<int32_t>> read_expected(const std::string& path) {
  std::vector<std::vector<int32_t>> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<int32_t> ids;
    std::istringstream ls(line);
    int64_t id;
    while (ls >> id) ids.push_back(static_cast<int32_t>(id));
    out.push_back(std::move(ids));
  }
  return out;
}

std::string escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out.push_back(static_cast<char>(c));
  }
  return out;
}

std::string join(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    out.push_back(' ');
    out += std::to_string(id);
  }
  return out;
}

// Runs one vocabulary's vectors and prints how many passed.
void check_vectors(const std::string& gguf_rel, const std::string& inp_rel) {
  UBATCH_REQUIRE_REFERENCE();
  const std::string gguf_path = test::reference_path(gguf_rel);
  const std::string inp = test::reference_path(inp_rel);
  const std::string outp = inp.substr(0, inp.size() - 4) + ".out";
  ASSERT_TRUE(std::filesystem::exists(gguf_path)) << gguf_path;
  auto file = gguf::File::open(gguf_path);
  ASSERT_TRUE(file) << file.message();
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok) << tok.message();

  const std::vector<std::string> inputs = split_inputs(read_text(inp));
  const std::vector<std::vector<int32_t>> expected = read_expected(outp);
  ASSERT_EQ(inputs.size(), expected.size()) << inp;
  ASSERT_FALSE(inputs.empty());
  size_t passed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> got = (*tok)->tokenize(inputs[i], /*add_bos=*/false,
                                                      /*parse_special=*/false);
    if (got == expected[i]) {
      ++passed;
    } else {
      ADD_FAILURE() << gguf_rel << " string " << i << " \"" << escape(inputs[i]) << "\"\n  expected:"
                    << join(expected[i]) << "\n  got:     " << join(got);
    }
  }
  std::cout << "[ vectors  ] " << gguf_rel << ": " << passed << "/" << inputs.size() << " passed\n";
  EXPECT_EQ(passed, inputs.size());
}

TEST(TokenizerVectors, LlamaSpm) {
  check_vectors("tokenizer/ggml-vocab-llama-spm.gguf", "tokenizer/ggml-vocab-llama-spm.gguf.inp");
}
TEST(TokenizerVectors, Phi3) {
  check_vectors("tokenizer/ggml-vocab-phi-3.gguf", "tokenizer/ggml-vocab-phi-3.gguf.inp");
}
TEST(TokenizerVectors, Gpt2) {
  check_vectors("tokenizer/ggml-vocab-gpt-2.gguf", "tokenizer/ggml-vocab-gpt-2.gguf.inp");
}
TEST(TokenizerVectors, Falcon) {
  check_vectors("tokenizer/ggml-vocab-falcon.gguf", "tokenizer/ggml-vocab-falcon.gguf.inp");
}
TEST(TokenizerVectors, DeepseekCoder) {
  check_vectors("tokenizer/ggml-vocab-deepseek-coder.gguf",
                "tokenizer/ggml-vocab-deepseek-coder.gguf.inp");
}
TEST(TokenizerVectors, Starcoder) {
  check_vectors("tokenizer/ggml-vocab-starcoder.gguf", "tokenizer/ggml-vocab-starcoder.gguf.inp");
}
TEST(TokenizerVectors, Qwen2) {
  check_vectors("tokenizer/ggml-vocab-qwen2.gguf", "tokenizer/ggml-vocab-qwen2.gguf.inp");
}
TEST(TokenizerVectors, Qwen2Extra) {
  check_vectors("tokenizer/ggml-vocab-qwen2.gguf", "tokenizer/ggml-vocab-qwen2-extra.inp");
}
TEST(TokenizerVectors, LlamaBpeQwenVocab) {
  check_vectors("tokenizer/ggml-vocab-llama-bpe-qwenvocab.gguf",
                "tokenizer/ggml-vocab-llama-bpe-qwenvocab.gguf.inp");
}
TEST(TokenizerVectors, LlamaBpeQwenVocabExtra) {
  check_vectors("tokenizer/ggml-vocab-llama-bpe-qwenvocab.gguf",
                "tokenizer/ggml-vocab-llama-bpe-qwenvocab-extra.inp");
}
TEST(TokenizerVectors, TinyVocab) {
  check_vectors("models/tiny-llama-f32.gguf", "tokenizer/tiny-vocab.inp");
}
TEST(TokenizerVectors, BertBge) {
  check_vectors("tokenizer/ggml-vocab-bert-bge.gguf", "tokenizer/ggml-vocab-bert-bge.gguf.inp");
}

}  // namespace
}  // namespace ubatch
