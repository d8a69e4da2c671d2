#include "loadgen/prompts.h"

#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace ubatch::loadgen {

Result<std::vector<PromptEntry>> parse_prompts_jsonl(std::string_view text, const std::string& source) {
  std::vector<PromptEntry> out;
  size_t line_no = 0, start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    ++line_no;
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) {
      if (end == text.size()) break;
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return Status::error(fmt::format("{}:{}: not a JSON object", source, line_no));
    auto p = j.find("prompt");
    if (p == j.end() || !p->is_string())
      return Status::error(fmt::format("{}:{}: needs a string field \"prompt\"", source, line_no));
    PromptEntry e;
    e.prompt = p->get<std::string>();
    if (auto m = j.find("max_tokens"); m != j.end() && !m->is_null()) {
      if (!m->is_number_integer() || m->get<int64_t>() < 1 || m->get<int64_t>() > (1 << 24))
        return Status::error(fmt::format("{}:{}: \"max_tokens\" must be an integer in [1, {}]", source, line_no, 1 << 24));
      e.max_tokens = static_cast<int32_t>(m->get<int64_t>());
    }
    out.push_back(std::move(e));
    if (end == text.size()) break;
  }
  if (out.empty()) return Status::error(fmt::format("{}: no prompts", source));
  return out;
}

Result<std::vector<PromptEntry>> read_prompts_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(fmt::format("{}: cannot open", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_prompts_jsonl(ss.str(), path);
}

namespace {

// Short, frequent English words: one token each (with the leading space) in common vocabularies.
constexpr const char* kWords[] = {
    "the",   "of",    "and",   "to",    "in",    "is",    "was",   "for",   "on",    "that",  "with",  "as",
    "it",    "at",    "by",    "from",  "his",   "her",   "they",  "this",  "be",    "are",   "or",    "an",
    "had",   "not",   "but",   "one",   "all",   "were",  "we",    "when",  "there", "can",   "been",  "has",
    "more",  "if",    "no",    "out",   "so",    "what",  "up",    "its",   "about", "into",  "than",  "them",
    "only",  "other", "new",   "some",  "time",  "could", "these", "two",   "may",   "first", "then",  "do",
    "any",   "like",  "my",    "now",   "over",  "such",  "our",   "man",   "me",    "even",  "most",  "made",
    "after", "also",  "did",   "many",  "before","must",  "through","back", "years", "where", "much",  "your",
    "way",   "well",  "down",  "should","because","each", "just",  "those", "people","how",   "too",   "little",
    "state", "good",  "very",  "make",  "world", "still", "own",   "see",   "men",   "work",  "long",  "get",
    "here",  "between","both", "life",  "being", "under", "never", "day",   "same",  "another","know", "while",
    "last",  "might", "us",    "great", "old",   "year",  "off",   "come",  "since", "against","go",   "came",
    "right", "used",  "take",  "three", "house", "water", "city",  "light", "story", "small", "world", "river",
};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

std::mt19937_64 request_rng(uint64_t seed, int64_t index) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(index), static_cast<uint32_t>(static_cast<uint64_t>(index) >> 32)};
  return std::mt19937_64(seq);
}

}  // namespace

RequestMix::RequestMix(uint64_t seed, IntRange prompt_words, IntRange max_tokens, std::vector<PromptEntry> prompts,
                       UrgentClass urgent, SharedPrefixes prefixes)
    : seed_(seed),
      prompt_words_(prompt_words),
      max_tokens_(max_tokens),
      prompts_(std::move(prompts)),
      urgent_(urgent),
      prefixes_(prefixes) {}

std::string RequestMix::shared_prefix(int32_t k) const {
  std::mt19937_64 rng = request_rng(seed_ ^ 0x707265666978ull, k);
  std::uniform_int_distribution<size_t> word(0, kNumWords - 1);
  std::string text;
  for (int32_t i = 0; i < prefixes_.words; ++i) {
    if (i > 0) text += ' ';
    text += kWords[word(rng)];
  }
  return text;
}

RequestSpec RequestMix::make(int64_t index) const {
  std::mt19937_64 rng = request_rng(seed_, index);
  RequestSpec s;
  s.index = index;
  int32_t max_tokens = -1;
  if (!prompts_.empty()) {
    const PromptEntry& e = prompts_[std::uniform_int_distribution<size_t>(0, prompts_.size() - 1)(rng)];
    s.prompt = e.prompt;
    max_tokens = e.max_tokens;
  } else {
    const int64_t n = std::uniform_int_distribution<int64_t>(prompt_words_.min, prompt_words_.max)(rng);
    std::uniform_int_distribution<size_t> word(0, kNumWords - 1);
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) s.prompt += ' ';
      s.prompt += kWords[word(rng)];
    }
  }
  if (max_tokens < 0)
    max_tokens = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(max_tokens_.min, max_tokens_.max)(rng));
  s.max_tokens = max_tokens;
  if (prefixes_.count > 0) {
    // Its own generator: the rest of the request is that of the same run without prefixes.
    std::mt19937_64 prefix_rng = request_rng(seed_ ^ 0x73686172ull, index);
    const auto k = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, prefixes_.count - 1)(prefix_rng));
    s.prompt = shared_prefix(k) + ' ' + s.prompt;
  }
  if (!classes_.empty()) {
    const MixClass& c = pick_class(classes_, seed_, index);
    s.endpoint = c.endpoint;
    s.model = c.model;
    s.kind = c.label();
  }
  if (urgent_.share > 0) {
    // Its own generator, so adding the urgent class leaves prompts and lengths as they were.
    std::mt19937_64 class_rng = request_rng(seed_ ^ 0x75726765ull, index);
    s.urgent = std::uniform_real_distribution<double>(0.0, 1.0)(class_rng) < urgent_.share;
    if (s.urgent) {
      s.priority = urgent_.priority;
      s.deadline_ms = urgent_.deadline_ms;
    }
  }
  return s;
}

}  // namespace ubatch::loadgen
