// The request mix of `ubatch load`: prompts from a JSONL file or synthetic prompts of seeded
// random length, and max_tokens per request.
//
// Synthetic prompts are words drawn from a fixed list of short, common English words; with
// the usual BPE/SPM vocabularies each such word (with its leading space) is one token, so
// "N tokens" is approximated by N words (the server's usage.prompt_tokens reports the truth).
// Request i is a pure function of (seed, i): the mix does not depend on thread timing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/args.h"
#include "bench/load_client.h"
#include "common/status.h"

namespace ubatch::bench {

struct PromptEntry {
  std::string prompt;
  int32_t max_tokens = -1;  // -1: drawn from the --max-tokens range
};

// One JSON object per line: {"prompt": "...", "max_tokens": n} (max_tokens optional, > 0);
// blank lines are skipped. Errors name the source and line: not JSON, no string "prompt",
// bad max_tokens, no prompts at all.
Result<std::vector<PromptEntry>> parse_prompts_jsonl(std::string_view text, const std::string& source);
// Reads and parses a file; errors name the path.
Result<std::vector<PromptEntry>> read_prompts_jsonl(const std::string& path);

class RequestMix {
 public:
  // prompt_words and max_tokens: inclusive ranges (min >= 1 for max_tokens). With prompts,
  // request i uses a seeded random entry of them (its max_tokens if set, else drawn).
  RequestMix(uint64_t seed, IntRange prompt_words, IntRange max_tokens, std::vector<PromptEntry> prompts = {});
  RequestSpec make(int64_t index) const;

 private:
  uint64_t seed_;
  IntRange prompt_words_, max_tokens_;
  std::vector<PromptEntry> prompts_;
};

}  // namespace ubatch::bench
