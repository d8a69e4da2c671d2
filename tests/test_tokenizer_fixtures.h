// Helpers for the tokenizer tests: loading the reference vocabularies and building small
// synthetic ones in memory (gguf::Writer), so each behaviour can be pinned on a vocabulary
// whose every piece the test controls.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "support.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::test {

// Opens a GGUF file and builds its tokenizer; nullptr (with a test failure) on error.
inline std::unique_ptr<Tokenizer> tokenizer_from_path(const std::string& path) {
  auto file = gguf::File::open(path);
  if (!file) {
    ADD_FAILURE() << file.message();
    return nullptr;
  }
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok) {
    ADD_FAILURE() << tok.message();
    return nullptr;
  }
  return std::move(tok).value();
}

// A synthetic vocabulary. token_type values: 1 normal, 2 unknown, 3 control, 4 user-defined,
// 6 byte.
struct VocabSpec {
  std::string model = "llama";
  std::string pre;                  // BPE: tokenizer.ggml.pre ("" = absent)
  std::vector<std::string> tokens;
  std::vector<float> scores;        // empty = absent
  std::vector<int32_t> types;       // empty = absent
  std::vector<std::string> merges;  // BPE
  int64_t bos = -1, eos = -1, unk = -1, eot = -1, eom = -1;  // -1 = absent
  int64_t cls = -1, sep = -1;  // WordPiece: cls_token_id, seperator_token_id (sic)
  int add_space_prefix = -1;        // -1 = absent, else 0/1
  int add_bos = -1;
  std::string chat_template;
};

inline std::vector<uint8_t> vocab_gguf_bytes(const VocabSpec& s) {
  gguf::Writer w;
  w.add_string("general.architecture", "llama");
  if (!s.model.empty()) w.add_string("tokenizer.ggml.model", s.model);
  if (!s.pre.empty()) w.add_string("tokenizer.ggml.pre", s.pre);
  w.add_string_array("tokenizer.ggml.tokens", s.tokens);
  if (!s.scores.empty()) {
    std::vector<uint8_t> b(s.scores.size() * 4);
    std::memcpy(b.data(), s.scores.data(), b.size());
    w.add_array("tokenizer.ggml.scores", gguf::ValueType::FLOAT32, s.scores.size(), b);
  }
  if (!s.types.empty()) {
    std::vector<uint8_t> b(s.types.size() * 4);
    std::memcpy(b.data(), s.types.data(), b.size());
    w.add_array("tokenizer.ggml.token_type", gguf::ValueType::INT32, s.types.size(), b);
  }
  if (!s.merges.empty()) w.add_string_array("tokenizer.ggml.merges", s.merges);
  if (s.bos >= 0) w.add_uint("tokenizer.ggml.bos_token_id", gguf::ValueType::UINT32, static_cast<uint64_t>(s.bos));
  if (s.eos >= 0) w.add_uint("tokenizer.ggml.eos_token_id", gguf::ValueType::UINT32, static_cast<uint64_t>(s.eos));
  if (s.unk >= 0) w.add_uint("tokenizer.ggml.unknown_token_id", gguf::ValueType::UINT32, static_cast<uint64_t>(s.unk));
  if (s.eot >= 0) w.add_uint("tokenizer.ggml.eot_token_id", gguf::ValueType::UINT32, static_cast<uint64_t>(s.eot));
  if (s.eom >= 0) w.add_uint("tokenizer.ggml.eom_token_id", gguf::ValueType::UINT32, static_cast<uint64_t>(s.eom));
  if (s.cls >= 0) w.add_uint("tokenizer.ggml.cls_token_id", gguf::ValueType::UINT32, static_cast<uint64_t>(s.cls));
  if (s.sep >= 0) w.add_uint("tokenizer.ggml.seperator_token_id", gguf::ValueType::UINT32, static_cast<uint64_t>(s.sep));
  if (s.add_space_prefix >= 0) w.add_bool("tokenizer.ggml.add_space_prefix", s.add_space_prefix != 0);
  if (s.add_bos >= 0) w.add_bool("tokenizer.ggml.add_bos_token", s.add_bos != 0);
  if (!s.chat_template.empty()) w.add_string("tokenizer.chat_template", s.chat_template);
  return w.bytes();
}

// Builds the tokenizer of a synthetic vocabulary; the Result carries from_gguf's error.
inline Result<std::unique_ptr<Tokenizer>> tokenizer_from_spec(const VocabSpec& s) {
  const std::vector<uint8_t> bytes = vocab_gguf_bytes(s);
  auto file = gguf::File::from_bytes(bytes.data(), bytes.size(), "<synthetic vocab>");
  if (!file) return file.status();
  return Tokenizer::from_gguf(**file);
}

inline std::string spm_space() { return "\xE2\x96\x81"; }

}  // namespace ubatch::test

// Skips when the reference vocabulary is not there.
#define UBATCH_TOKENIZER_FROM_REFERENCE(var, rel)                                   \
  UBATCH_REQUIRE_REFERENCE();                                                       \
  std::unique_ptr<::ubatch::Tokenizer> var =                                        \
      ::ubatch::test::tokenizer_from_path(::ubatch::test::reference_path(rel));     \
  ASSERT_NE(var, nullptr)
