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
#include "loadgen/load_client.h"
#include "loadgen/load_mix.h"
#include "common/status.h"

namespace ubatch::loadgen {

using bench::IntRange;

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

// A priority/deadline mix: this share of requests (a seeded draw per request, independent of
// its prompt and length) is urgent, sent with this priority and, when > 0, this deadline.
struct UrgentClass {
  double share = 0.0;        // [0, 1]
  int32_t priority = 10;
  int64_t deadline_ms = 0;   // 0: none
};

// Shared prefixes, as many users of one application share its system prompt: `count` fixed
// texts of `words` synthetic words each (a pure function of the seed and the prefix index);
// each request's prompt starts with one of them (a seeded draw per request, independent of
// the rest of the mix), then a space, then its own prompt. count 0: none.
struct SharedPrefixes {
  int32_t count = 0;
  int32_t words = 256;  // >= 1
};

class RequestMix {
 public:
  // prompt_words and max_tokens: inclusive ranges (min >= 1 for max_tokens). With prompts,
  // request i uses a seeded random entry of them (its max_tokens if set, else drawn).
  RequestMix(uint64_t seed, IntRange prompt_words, IntRange max_tokens, std::vector<PromptEntry> prompts = {},
             UrgentClass urgent = {}, SharedPrefixes prefixes = {});
  RequestSpec make(int64_t index) const;
  // A mix of kinds (load_mix.h): each request's endpoint, model and label are drawn from it.
  void set_classes(std::vector<MixClass> classes) { classes_ = std::move(classes); }
  bool has_kinds() const { return !classes_.empty(); }
  bool has_urgent_class() const { return urgent_.share > 0; }
  // The text of shared prefix k in [0, prefixes.count) (without the space that follows it).
  std::string shared_prefix(int32_t k) const;

 private:
  uint64_t seed_;
  IntRange prompt_words_, max_tokens_;
  std::vector<PromptEntry> prompts_;
  UrgentClass urgent_;
  SharedPrefixes prefixes_;
  std::vector<MixClass> classes_;
};

}  // namespace ubatch::loadgen
