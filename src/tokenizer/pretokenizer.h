// Pre-tokenization for byte-level BPE: splits text into words before merging, by one or more
// regular expressions chosen by `tokenizer.ggml.pre`, run with PCRE2 in UTF mode with Unicode
// properties (\p{L}, \s, … per the Unicode Character Database).
//
// Several expressions apply in sequence: each one splits every fragment left by the previous
// one into its matches and the text between them (both kept, in order); lookaheads see only
// the fragment. Split rules per model (from each model's published tokenizer configuration):
//   gpt-2, default, phi-2, mpt, olmo:
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   starcoder, refact, command-r, smollm, codeshell: \p{N} (digits one by one), then gpt-2
//   falcon: [\p{P}\$\+<=>\^~\|`]+ (punctuation runs), then gpt-2, then [0-9][0-9][0-9]
//   deepseek-coder: [\r\n], \s?\p{L}+, \s?\p{P}+, [\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}
//       \x{AC00}-\x{D7FF}]+, \p{N}
//   llama3, llama-v3, llama-bpe: the cl100k expression (contractions any case, letters with
//       one leading non-letter, numbers of 1–3 digits, …); whole words that are tokens skip
//       merging (ignore_merges)
//   qwen2: as llama3 but numbers digit by digit
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ubatch::tokenizer {

class PreTokenizer {
 public:
  // Errors: a name not in the list above (the message lists the supported names).
  static Result<PreTokenizer> create(std::string_view pre);
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Splits text into words (views into text, in order, concatenating to text). Never fails:
  // invalid UTF-8 never matches, so it ends up in the words between matches. Thread-safe.
  std::vector<std::string_view> split(std::string_view text) const;

  bool ignore_merges() const { return ignore_merges_; }
  const std::string& name() const { return name_; }

 private:
  PreTokenizer() = default;
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
  bool ignore_merges_ = false;
  std::string name_;
};

}  // namespace ubatch::tokenizer
