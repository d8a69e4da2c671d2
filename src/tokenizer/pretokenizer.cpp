#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"

namespace ubatch::tokenizer {

namespace {

constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Rules {
  std::vector<const char*> regexes;
  bool ignore_merges = false;
};

bool rules_for(std::string_view pre, Rules* r) {
  if (pre == "gpt-2" || pre == "default" || pre == "phi-2" || pre == "mpt" || pre == "olmo") {
    *r = {{kGpt2}, false};
  } else if (pre == "starcoder" || pre == "refact" || pre == "command-r" || pre == "smollm" ||
             pre == "codeshell") {
    *r = {{R"(\p{N})", kGpt2}, false};
  } else if (pre == "falcon") {
    *r = {{R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, R"([0-9][0-9][0-9])"}, false};
  } else if (pre == "deepseek-coder") {
    *r = {{R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
           R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)", R"(\p{N})"},
          false};
  } else if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe") {
    *r = {{kLlama3}, true};
  } else if (pre == "qwen2") {
    *r = {{kQwen2}, false};
  } else {
    return false;
  }
  return true;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

Result<PreTokenizer> PreTokenizer::create(std::string_view pre) {
  Rules rules;
  if (!rules_for(pre, &rules)) {
    return Status::error("tokenizer: unknown pre-tokenizer tokenizer.ggml.pre = \"" +
                         std::string(pre) +
                         "\" (supported: gpt-2, default, phi-2, mpt, olmo, starcoder, refact, "
                         "command-r, smollm, codeshell, falcon, deepseek-coder, llama3, "
                         "llama-v3, llama-bpe, qwen2)");
  }
  PreTokenizer p;
  p.name_ = std::string(pre);
  p.ignore_merges_ = rules.ignore_merges;
  for (const char* pattern : rules.regexes) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    auto re = std::make_unique<Regex>();
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset,
                             nullptr);
    if (!re->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return Status::error("tokenizer: pre-tokenizer \"" + std::string(pre) + "\": regex " +
                           pattern + " does not compile at offset " +
                           std::to_string(err_offset) + ": " + reinterpret_cast<char*>(msg));
    }
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    p.regexes_.push_back(std::move(re));
  }
  return p;
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> words;
  if (text.empty()) return words;
  words.push_back(text);
  std::vector<std::string_view> next;
  for (const auto& re : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    UBATCH_CHECK(md != nullptr);
    next.clear();
    next.reserve(words.size() * 2);
    for (std::string_view frag : words) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(frag.data());
      size_t pos = 0;      // where the next search starts
      size_t emitted = 0;  // end of what is already in `next`
      while (pos < frag.size()) {
        int rc = pcre2_match(re->code, subject, frag.size(), pos, 0, md, nullptr);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && re->jit) {  // e.g. JIT stack exhausted
          rc = pcre2_match(re->code, subject, frag.size(), pos, PCRE2_NO_JIT, md, nullptr);
        }
        if (rc < 0) break;  // no match (or a resource limit): the rest stays one word
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t start = ov[0], end = ov[1];
        if (end <= start) {  // empty match: step over one character
          if (start >= frag.size()) break;
          pos = start + utf8_char_len(frag.substr(start));
          continue;
        }
        if (start > emitted) next.push_back(frag.substr(emitted, start - emitted));
        next.push_back(frag.substr(start, end - start));
        emitted = end;
        pos = end;
      }
      if (emitted < frag.size()) next.push_back(frag.substr(emitted));
    }
    pcre2_match_data_free(md);
    words.swap(next);
  }
  return words;
}

}  // namespace ubatch::tokenizer
