// Shared by the fuzz targets that need a real vocabulary: the default model's tokenizer
// (Gemma 3, 262,144 tokens), loaded once per process. UBATCH_FUZZ_MODEL overrides the path
// (default: models/gemma-3-270m-q4_k_m.gguf of the source tree, UBATCH_FUZZ_DEFAULT_MODEL).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::fuzz {

// The tokenizer; exits the process with a message when the model cannot be loaded (a fuzz
// run without its vocabulary would test nothing).
inline const Tokenizer& tokenizer() {
  static std::unique_ptr<gguf::File> file_kept;  // the tokenizer needs nothing of it, but keep it as the engine does
  static const std::unique_ptr<Tokenizer> tok = [] {
    const char* env = std::getenv("UBATCH_FUZZ_MODEL");
    const std::string path = env && *env ? env : UBATCH_FUZZ_DEFAULT_MODEL;
    auto file = gguf::File::open(path);
    if (!file) {
      std::fprintf(stderr, "fuzz: cannot open the model for its vocabulary (%s): %s\n"
                   "  run scripts/setup.sh or set UBATCH_FUZZ_MODEL\n", path.c_str(), file.message().c_str());
      std::exit(2);
    }
    auto t = Tokenizer::from_gguf(**file);
    if (!t) {
      std::fprintf(stderr, "fuzz: %s: %s\n", path.c_str(), t.message().c_str());
      std::exit(2);
    }
    file_kept = std::move(file).value();
    return std::move(t).value();
  }();
  return *tok;
}

// A control token: rendered only with `special` (token_to_piece's contract).
inline bool is_control(const Tokenizer& tok, int32_t id) {
  return tok.token_to_piece(id, false).empty() && !tok.token_to_piece(id, true).empty();
}

}  // namespace ubatch::fuzz
