#include "server/json_request.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "chat/harmony.h"
#include "chat/tool_call_grammar.h"
#include "grammar/json_schema.h"
#include "server/chat_request.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::server {

using json = nlohmann::json;

namespace {

constexpr int kMaxDepth = 64;         // JSON nesting the server accepts
constexpr size_t kMaxStops = 16;      // stop strings per request
constexpr size_t kMaxStopBytes = 1024;
constexpr int kMaxTopLogprobs = 20;   // as the OpenAI API
constexpr int32_t kDefaultCompletionTokens = 16;  // OpenAI's default for /v1/completions

#define UBATCH_TRY(expr)                      \
  do {                                        \
    if (auto ubatch_err_ = (expr)) return ubatch_err_; \
  } while (0)

// The field's value, or nullptr when absent or null.
const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<ApiError> type_error(const char* key, const char* what) {
  return invalid_request(fmt::format("'{}' must be {}", key, what), key, "invalid_type");
}

// An integer JSON value (or a float with an integral value) as int64; false otherwise.
bool as_int64(const json& v, int64_t& out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) >= 9.2e18) return false;
    out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

std::optional<ApiError> read_int(const json& obj, const char* key, int64_t lo, int64_t hi,
                                 std::optional<int64_t>& out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (!as_int64(*v, x)) {
    if (v->is_number()) {
      // Callers that check the range themselves pass the whole int64 range: don't print it.
      if (lo == std::numeric_limits<int64_t>::min() && hi == std::numeric_limits<int64_t>::max())
        return invalid_request(fmt::format("'{}' must be an integer", key), key);
      return invalid_request(fmt::format("'{}' must be an integer in [{}, {}]", key, lo, hi), key);
    }
    return type_error(key, "an integer");
  }
  if (x < lo || x > hi)
    return invalid_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, x), key);
  out = x;
  return std::nullopt;
}

std::optional<ApiError> read_float(const json& obj, const char* key, double lo, double hi, float& out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return type_error(key, "a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    return invalid_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, x), key);
  out = static_cast<float>(x);
  return std::nullopt;
}

std::optional<ApiError> read_bool(const json& obj, const char* key, bool& out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return type_error(key, "a boolean");
  out = v->get<bool>();
  return std::nullopt;
}

uint64_t random_seed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

std::optional<ApiError> check_ids(const std::vector<int32_t>& ids, int32_t n_vocab, const char* key) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= n_vocab)
      return invalid_request(fmt::format("'{}': token id {} at index {} is outside the vocabulary [0, {})", key,
                                         ids[i], i, n_vocab),
                             key, "invalid_token");
  return std::nullopt;
}

// A JSON array of integers → ids (range checked by check_ids); false if any item is not an integer.
bool as_id_list(const json& arr, std::vector<int32_t>& ids) {
  ids.clear();
  for (const json& item : arr) {
    int64_t x = 0;
    if (!as_int64(item, x)) return false;
    ids.push_back(static_cast<int32_t>(std::clamp<int64_t>(x, -1, std::numeric_limits<int32_t>::max())));
  }
  return true;
}

// A text prompt whose length in bytes already proves it cannot fit the context (each token
// stands for at most max_piece_bytes() of its bytes): refused before tokenizing it, which costs
// time and tens of bytes of memory per byte of text (a prompt up to --max-body, 4 MiB).
std::optional<ApiError> check_text_fits(size_t text_bytes, const Tokenizer& tok, int32_t n_ctx, const char* param) {
  const size_t piece = tok.max_piece_bytes();
  if (piece == 0 || n_ctx <= 0) return std::nullopt;
  const size_t at_least = (text_bytes + piece - 1) / piece;
  if (at_least < static_cast<size_t>(n_ctx)) return std::nullopt;
  return invalid_request(fmt::format("the prompt is {} bytes, so at least {} tokens (one token spells at most {} "
                                     "bytes), but the context holds {} tokens (prompt plus at least one generated "
                                     "token)",
                                     text_bytes, at_least, piece, n_ctx),
                         param, "context_length_exceeded");
}

std::optional<ApiError> parse_prompt(const json& body, const Tokenizer& tok, int32_t n_vocab, bool parse_special,
                                     int32_t n_ctx, ParsedRequest& out) {
  const json* p = field(body, "prompt");
  if (!p) return invalid_request("'prompt' is required", "prompt", "missing_required_parameter");
  const char* shape = "'prompt' must be a string, an array of token ids, or a list of one of those";
  std::vector<int32_t>& ids = out.request.prompt;
  bool is_text = false;
  if (p->is_string()) {
    out.prompt_text = p->get<std::string>();
    is_text = true;
  } else if (p->is_array()) {
    if (p->empty()) return invalid_request("'prompt' is empty", "prompt", "empty_prompt");
    const json& first = (*p)[0];
    if (first.is_number()) {
      if (!as_id_list(*p, ids)) return invalid_request(shape, "prompt", "invalid_type");
    } else if (p->size() > 1 && (first.is_string() || first.is_array())) {
      return invalid_request("one prompt per request: use 'n' for several samples of one prompt", "prompt");
    } else if (first.is_string()) {
      out.prompt_text = first.get<std::string>();
      is_text = true;
    } else if (first.is_array()) {
      if (first.empty()) return invalid_request("'prompt' is empty", "prompt", "empty_prompt");
      if (!as_id_list(first, ids)) return invalid_request(shape, "prompt", "invalid_type");
    } else {
      return invalid_request(shape, "prompt", "invalid_type");
    }
  } else {
    return invalid_request(shape, "prompt", "invalid_type");
  }
  if (is_text) {
    if (out.prompt_text.empty()) return invalid_request("'prompt' is empty", "prompt", "empty_prompt");
    UBATCH_TRY(check_text_fits(out.prompt_text.size(), tok, n_ctx, "prompt"));
    ids = tok.tokenize(out.prompt_text, tok.add_bos_default(), parse_special);
  }
  UBATCH_TRY(check_ids(ids, n_vocab, "prompt"));
  if (ids.empty()) return invalid_request("'prompt' is empty", "prompt", "empty_prompt");
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const Tokenizer& tok, const ChatSetup& setup, int32_t n_ctx, ParsedRequest& out) {
  SegmentedText rendered;
  UBATCH_TRY(render_chat_prompt(setup, tok, out, rendered));
  UBATCH_TRY(check_text_fits(rendered.text.size(), tok, n_ctx, "messages"));
  // Only the template's markup is parsed for special tokens; message content is plain text.
  out.request.prompt = tok.tokenize(rendered, setup.renderer->add_bos(rendered, tok.add_bos_default()));
  out.prompt_text = std::move(rendered.text);
  if (out.request.prompt.empty()) return invalid_request("'messages' render to an empty prompt", "messages", "empty_prompt");
  return std::nullopt;
}

std::optional<ApiError> parse_stop(const json& body, std::vector<std::string>& stop) {
  const json* s = field(body, "stop");
  if (!s) return std::nullopt;
  std::vector<std::string> all;
  if (s->is_string()) {
    all.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    for (const json& item : *s) {
      if (!item.is_string()) return type_error("stop", "a string or an array of strings");
      all.push_back(item.get<std::string>());
    }
  } else {
    return type_error("stop", "a string or an array of strings");
  }
  if (all.size() > kMaxStops)
    return invalid_request(fmt::format("'stop' has {} strings; at most {} are allowed", all.size(), kMaxStops), "stop");
  for (std::string& one : all) {
    if (one.size() > kMaxStopBytes)
      return invalid_request(fmt::format("'stop' strings are limited to {} bytes", kMaxStopBytes), "stop");
    if (!one.empty()) stop.push_back(std::move(one));  // an empty stop string would match everywhere: ignored
  }
  return std::nullopt;
}

// logit_bias: at most one entry per token of the vocabulary (fewer with --max-logit-bias),
// refused by its size before any entry is read. The entries come out sorted by token id, each
// id once ("7" and "07" name one token: refused), in time linear in the entries and the
// vocabulary — the sampler merges them with its other adjustments in one pass.
std::optional<ApiError> parse_logit_bias(const json& body, int32_t n_vocab, int32_t max_entries,
                                         std::vector<std::pair<int32_t, float>>& out) {
  const json* lb = field(body, "logit_bias");
  if (!lb) return std::nullopt;
  if (!lb->is_object()) return type_error("logit_bias", "an object mapping token ids to biases");
  const bool capped = max_entries > 0 && max_entries < n_vocab;
  const size_t limit = static_cast<size_t>(std::max(0, capped ? max_entries : n_vocab));
  if (lb->size() > limit)
    return invalid_request(fmt::format("'logit_bias' has {} entries; at most {} are allowed ({})", lb->size(), limit,
                                       capped ? "the server's --max-logit-bias" : "one per token of the vocabulary"),
                           "logit_bias");
  out.clear();
  out.reserve(lb->size());
  for (auto it = lb->begin(); it != lb->end(); ++it) {
    const std::string& key = it.key();
    int64_t id = -1;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || key.empty())
      return invalid_request(fmt::format("'logit_bias' key '{}' is not a token id", key.substr(0, 64)), "logit_bias",
                             "invalid_token");
    if (id < 0 || id >= n_vocab)
      return invalid_request(fmt::format("'logit_bias' key {} is outside the vocabulary [0, {})", id, n_vocab),
                             "logit_bias", "invalid_token");
    if (!it.value().is_number())
      return invalid_request(fmt::format("'logit_bias' value for {} must be a number", id), "logit_bias",
                             "invalid_type");
    const double bias = it.value().get<double>();
    if (!std::isfinite(bias) || bias < -100.0 || bias > 100.0)
      return invalid_request(fmt::format("'logit_bias' value for {} must be in [-100, 100], got {}", id, bias),
                             "logit_bias");
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  auto twice = [](int32_t id) {
    return invalid_request(fmt::format("'logit_bias' names token {} twice", id), "logit_bias", "invalid_token");
  };
  if (out.size() <= 64) {  // the usual few entries: a small sort
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 1; i < out.size(); ++i)
      if (out[i].first == out[i - 1].first) return twice(out[i].first);
    return std::nullopt;
  }
  // Many: each id's entry by id (a counting sort over the vocabulary).
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> at(static_cast<size_t>(n_vocab), kNone);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t& slot = at[static_cast<size_t>(out[i].first)];
    if (slot != kNone) return twice(out[i].first);
    slot = static_cast<uint32_t>(i);
  }
  std::vector<std::pair<int32_t, float>> sorted;
  sorted.reserve(out.size());
  for (uint32_t i : at)
    if (i != kNone) sorted.push_back(out[i]);
  out = std::move(sorted);
  return std::nullopt;
}

std::optional<ApiError> parse_logprobs(const json& body, Endpoint endpoint, ParsedRequest& out) {
  const json* lp = field(body, "logprobs");
  int64_t n_top = -1;
  if (endpoint == Endpoint::Completions) {
    // Legacy completions: "logprobs": k asks for the chosen token and k alternatives.
    if (lp) {
      if (lp->is_boolean()) {
        n_top = lp->get<bool>() ? 0 : -1;
      } else {
        std::optional<int64_t> k;
        UBATCH_TRY(read_int(body, "logprobs", 0, kMaxTopLogprobs, k));
        n_top = *k;
      }
    }
  } else {
    bool want = false;
    UBATCH_TRY(read_bool(body, "logprobs", want));
    std::optional<int64_t> k;
    UBATCH_TRY(read_int(body, "top_logprobs", 0, kMaxTopLogprobs, k));
    if (k && !want) return invalid_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (want) n_top = k.value_or(0);
  }
  out.logprobs = n_top >= 0;
  out.request.top_logprobs = static_cast<int32_t>(n_top);
  return std::nullopt;
}

std::optional<ApiError> parse_sampling(const json& body, const RequestLimits& limits, SamplingParams& sp) {
  UBATCH_TRY(read_float(body, "temperature", 0.0, 2.0, sp.temperature));
  UBATCH_TRY(read_float(body, "top_p", 0.0, 1.0, sp.top_p));
  UBATCH_TRY(read_float(body, "min_p", 0.0, 1.0, sp.min_p));
  std::optional<int64_t> top_k;
  UBATCH_TRY(read_int(body, "top_k", 0, std::numeric_limits<int32_t>::max(), top_k));
  if (top_k) sp.top_k = static_cast<int32_t>(*top_k);  // 0: disabled (the whole vocabulary)
  UBATCH_TRY(read_float(body, "repeat_penalty", 0.0, 10.0, sp.repeat_penalty));
  if (field(body, "repeat_penalty") && sp.repeat_penalty <= 0.0f)
    return invalid_request("'repeat_penalty' must be > 0 (1 is off)", "repeat_penalty");
  std::optional<int64_t> last_n;
  UBATCH_TRY(read_int(body, "repeat_last_n", -1, 1 << 20, last_n));
  if (last_n) sp.repeat_last_n = *last_n < 0 ? limits.n_ctx : static_cast<int32_t>(*last_n);
  UBATCH_TRY(read_float(body, "presence_penalty", -2.0, 2.0, sp.presence_penalty));
  UBATCH_TRY(read_float(body, "frequency_penalty", -2.0, 2.0, sp.frequency_penalty));
  if (const json* seed = field(body, "seed")) {
    if (seed->is_number_unsigned()) {
      sp.seed = seed->get<uint64_t>();
    } else {
      int64_t s = 0;
      if (!as_int64(*seed, s)) return type_error("seed", "an integer");
      sp.seed = static_cast<uint64_t>(s);
    }
  } else if (limits.random_seed) {
    sp.seed = random_seed();
  }
  UBATCH_TRY(parse_logit_bias(body, limits.n_vocab, limits.max_logit_bias, sp.logit_bias));
  return std::nullopt;
}

}  // namespace

bool is_valid_utf8(std::string_view s, size_t* bad_offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  auto fail = [&](size_t at) {
    if (bad_offset) *bad_offset = at;
    return false;
  };
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // range of the second byte (Unicode table 3-7)
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return fail(i);
    }
    if (i + len > n) return fail(i);
    if (p[i + 1] < lo || p[i + 1] > hi) return fail(i);
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return fail(i);
    i += len;
  }
  return true;
}

std::optional<ApiError> parse_json_body(std::string_view body, json& out) {
  if (body.empty()) return invalid_request("the request body is empty; a JSON object is expected", "", "invalid_json");
  size_t bad = 0;
  if (!is_valid_utf8(body, &bad))
    return invalid_request(fmt::format("the request body is not valid UTF-8 (first bad byte at offset {})", bad), "",
                           "invalid_encoding");
  // Bound the nesting before parsing (deep documents would only cost stack and memory).
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth)
        return invalid_request(fmt::format("the request JSON nests deeper than {} levels", kMaxDepth), "",
                               "invalid_json");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    out = json::parse(body);
  } catch (const json::exception& e) {
    // nlohmann rejects malformed documents and escapes of lone surrogates ("\ud800").
    return invalid_request(fmt::format("invalid JSON: {}", e.what()), "", "invalid_json");
  }
  if (!out.is_object()) return invalid_request("the request body must be a JSON object", "", "invalid_json");
  return std::nullopt;
}

namespace {

// Thrown by the ordered parse's callback to stop at an object that is too wide.
struct TooWide {
  std::string member;  // the top-level member it is in
};

}  // namespace

std::optional<ApiError> parse_ordered_members(std::string_view body, std::span<const std::string_view> keys,
                                              nlohmann::ordered_json& out) {
  using ojson = nlohmann::ordered_json;
  // Depth 1 is the top-level object's members: each is kept or skipped as a whole (a skipped
  // member's contents are parsed but never built). Within kept members, every object's members
  // are counted (the innermost open object's count is the top of `counts`).
  bool keep = false;
  std::string member;
  std::vector<size_t> counts;
  auto callback = [&](int depth, ojson::parse_event_t event, ojson& parsed) -> bool {
    using E = ojson::parse_event_t;
    if (depth == 1 && event == E::key) {
      member = parsed.get<std::string>();
      keep = std::find(keys.begin(), keys.end(), member) != keys.end();
      return keep;
    }
    if (depth < 1 || !keep) return true;  // the top level itself, or inside a skipped member
    if (event == E::object_start) {
      counts.push_back(0);
    } else if (event == E::object_end) {
      if (!counts.empty()) counts.pop_back();
    } else if (event == E::key && !counts.empty() && ++counts.back() > kMaxOrderedObjectMembers) {
      throw TooWide{member};
    }
    return true;
  };
  try {
    out = ojson::parse(body, callback);
  } catch (const TooWide& w) {
    return invalid_request(fmt::format("an object in '{}' has more than {} members", w.member, kMaxOrderedObjectMembers),
                           w.member);
  } catch (const nlohmann::json::exception& e) {
    return invalid_request(fmt::format("invalid JSON: {}", e.what()), "", "invalid_json");
  }
  return std::nullopt;
}

std::optional<ApiError> parse_completion_request(const json& body, Endpoint endpoint, const Tokenizer& tokenizer,
                                                 const ChatSetup& setup, const RequestLimits& limits,
                                                 ParsedRequest& out) {
  out = ParsedRequest{};
  out.endpoint = endpoint;
  sched::Request& r = out.request;
  r.sampling = limits.defaults;

  if (const json* model = field(body, "model")) {
    if (!model->is_string()) return type_error("model", "a string");
    out.model = model->get<std::string>();
  }
  UBATCH_TRY(read_bool(body, "stream", out.stream));
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) return type_error("stream_options", "an object");
    UBATCH_TRY(read_bool(*so, "include_usage", out.include_usage));
  }
  if (endpoint == Endpoint::Completions) {
    bool echo = false;
    UBATCH_TRY(read_bool(body, "echo", echo));
    if (echo) return invalid_request("'echo' is not supported", "echo", "unsupported_parameter");
  }

  std::optional<int64_t> n;
  UBATCH_TRY(read_int(body, "n", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), n));
  if (n && (*n < 1 || *n > limits.max_n))
    return invalid_request(fmt::format("'n' must be in [1, {}] (the server's --max-n), got {}", limits.max_n, *n), "n");
  r.n = static_cast<int32_t>(n.value_or(1));

  // max_completion_tokens (newer name) wins over max_tokens.
  const char* mt_key = field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  std::optional<int64_t> max_tokens;
  UBATCH_TRY(read_int(body, mt_key, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                      max_tokens));
  if (max_tokens && *max_tokens < 1)
    return invalid_request(fmt::format("'{}' must be at least 1, got {}", mt_key, *max_tokens), mt_key);
  if (max_tokens && *max_tokens > limits.max_tokens_cap)
    return invalid_request(
        fmt::format("'{}' is {}, above this server's limit of {} tokens", mt_key, *max_tokens, limits.max_tokens_cap),
        mt_key);

  UBATCH_TRY(parse_stop(body, r.stop));
  UBATCH_TRY(read_bool(body, "ignore_eos", r.ignore_eos));
  UBATCH_TRY(read_bool(body, "speculative", r.speculative));
  std::optional<int64_t> priority, deadline;
  UBATCH_TRY(read_int(body, "priority", -1000000, 1000000, priority));
  if (priority) r.priority = static_cast<int32_t>(*priority);
  UBATCH_TRY(read_int(body, "deadline_ms", 0, int64_t{1} << 40, deadline));
  if (deadline) r.deadline_ms = *deadline;
  if (const json* dp = field(body, "deadline_policy")) {
    if (!dp->is_string()) return type_error("deadline_policy", "a string (\"strict\" or \"best_effort\")");
    const std::string v = dp->get<std::string>();
    if (v == "strict")
      r.deadline_policy = sched::DeadlinePolicy::Strict;
    else if (v == "best_effort")
      r.deadline_policy = sched::DeadlinePolicy::BestEffort;
    else
      return invalid_request(fmt::format("'deadline_policy' must be \"strict\" or \"best_effort\", got \"{}\"", v),
                             "deadline_policy");
  }
  UBATCH_TRY(parse_sampling(body, limits, r.sampling));
  UBATCH_TRY(parse_logprobs(body, endpoint, out));

  if (endpoint == Endpoint::Completions) {
    UBATCH_TRY(parse_prompt(body, tokenizer, limits.n_vocab, limits.parse_special, limits.n_ctx, out));
  } else {
    UBATCH_TRY(parse_messages(tokenizer, setup, limits.n_ctx, out));
  }

  const int64_t n_prompt = static_cast<int64_t>(r.prompt.size());
  if (n_prompt >= limits.n_ctx)
    return invalid_request(fmt::format("the prompt is {} tokens, but the context holds {} tokens (prompt plus at "
                                       "least one generated token)",
                                       n_prompt, limits.n_ctx),
                           endpoint == Endpoint::Completions ? "prompt" : "messages", "context_length_exceeded");
  if (max_tokens) {
    if (n_prompt + *max_tokens > limits.n_ctx)
      return invalid_request(fmt::format("the context holds {} tokens, but the request needs {} ({} in the prompt, {} "
                                         "to generate); lower '{}' or shorten the prompt",
                                         limits.n_ctx, n_prompt + *max_tokens, n_prompt, *max_tokens, mt_key),
                             mt_key, "context_length_exceeded");
    r.max_tokens = static_cast<int32_t>(*max_tokens);
  } else {
    const int64_t room = limits.n_ctx - n_prompt;
    const int64_t dflt = endpoint == Endpoint::Completions ? kDefaultCompletionTokens : room / r.n;
    r.max_tokens = static_cast<int32_t>(std::clamp<int64_t>(std::min<int64_t>(dflt, room), 1, limits.max_tokens_cap));
  }
  // A thinking budget closes the open block after that many tokens (docs/API.md, "Reasoning"):
  // the answer needs room after it.
  if (out.reasoning_budget >= 0) {
    if (out.reasoning_budget >= r.max_tokens)
      return invalid_request(fmt::format("'reasoning_budget_tokens' ({}) must be below the tokens to generate ({}): the "
                                         "answer follows the reasoning",
                                         out.reasoning_budget, r.max_tokens),
                             "reasoning_budget_tokens");
    if (out.prompt_opens_block) {
      r.reasoning_budget = out.reasoning_budget;
      r.reasoning_close = std::string(chat::kReasoningClose);
      // The close as thinking templates write a closed block: "\n</think>\n\n".
      r.reasoning_close_tokens = tokenizer.tokenize("\n" + std::string(chat::kReasoningClose) + "\n\n", false, true);
      r.speculative = false;
    } else if (out.harmony_analysis_open) {
      // Harmony: the analysis message ends with <|end|> (a control token, or its text where the
      // vocabulary has none); the forced close opens the final channel.
      r.reasoning_budget = out.reasoning_budget;
      r.reasoning_close = std::string(chat::kHarmonyEnd);
      const std::vector<int32_t> end = tokenizer.tokenize(chat::kHarmonyEnd, false, true);
      if (end.size() == 1) r.reasoning_close_token = end[0];
      r.reasoning_close_tokens = tokenizer.tokenize(chat::kHarmonyFinalOpen, false, true);
      r.speculative = false;
    }
  }
  return std::nullopt;
}

std::optional<ApiError> render_chat_prompt(const ChatSetup& setup, const Tokenizer& tok, ParsedRequest& out,
                                           SegmentedText& prompt) {
  if (!setup.renderer || !setup.ordered_body) return server_error("chat rendering is not set up");
  ChatRequest req;
  UBATCH_TRY(parse_chat_request(*setup.ordered_body, req));
  out.tools = req.tools;
  const chat::ChatRenderer& renderer = *setup.renderer;
  // tool_choice "none": the tools are not shown (no call is wanted).
  if (req.tools.active()) req.render.tools = req.tools.tools;
  Result<SegmentedText> rendered = renderer.render(req.render);
  if (!rendered) return invalid_request("chat template: " + rendered.message(), "messages", "template_error");
  prompt = std::move(rendered.value());
  // Reasoning: separated when asked (deepseek), or (auto) when the template thinks or the
  // generation prompt leaves a block open.
  const chat::ReasoningFormat rf = req.reasoning_format.value_or(setup.reasoning_format);
  const bool open_block = chat::prompt_opens_reasoning(prompt.text);
  out.harmony = renderer.harmony() && rf != chat::ReasoningFormat::None;
  out.reasoning = !out.harmony && (rf == chat::ReasoningFormat::Deepseek ||
                                   (rf == chat::ReasoningFormat::Auto && (renderer.thinks() || open_block)));
  out.reasoning_open = out.reasoning && open_block;
  out.reasoning_budget = req.reasoning_budget;
  out.prompt_opens_block = open_block;
  // Harmony: a generation prompt that opens a channel for the model is the reply's start.
  if (out.harmony) out.tool_prefill = chat::harmony_reply_start(prompt.text);
  // Harmony with a thinking budget: the prompt opens the analysis channel (as gpt-oss begins
  // its replies), so that the engine can count the reasoning and close it (docs/API.md).
  if (out.harmony && req.reasoning_budget >= 0 && out.tool_prefill.empty() && !req.tools.forced()) {
    out.tool_prefill = std::string(chat::kHarmonyAnalysisOpen);
    prompt.markup(out.tool_prefill);
    out.harmony_analysis_open = true;
  }
  if (!req.tools.active()) return std::nullopt;
  if (out.harmony) {
    // Harmony: calls are read from the reply's channels (chat/harmony.h). A forced choice of one
    // function opens its call in the prompt — the header's markers are control tokens, which a
    // grammar cannot write — and constrains the arguments by the tool's schema. A required
    // choice among several functions is not constrained (its calls are read as under auto).
    const chat::ToolDef* one = nullptr;
    for (const chat::ToolDef& t : req.tools.tools)
      if (req.tools.choice.mode == chat::ToolChoice::Mode::Named ? t.name == req.tools.choice.name
                                                                 : req.tools.tools.size() == 1)
        one = &t;
    if (!req.tools.forced() || !one) return std::nullopt;
    Result<std::string> g = grammar::json_schema_to_gbnf(one->parameters);
    if (!g) return invalid_request(fmt::format("tools ('{}'): parameters: {}", one->name, g.message()), "tools",
                                   "invalid_json_schema");
    const std::string open = fmt::format("<|channel|>commentary to=functions.{} <|constrain|>json<|message|>", one->name);
    out.tool_prefill += open;
    out.tool_gbnf = std::move(g.value());
    prompt.markup(open);
    return std::nullopt;
  }
  // Markup the model can write as text (a control token's piece is empty: grammars cannot produce it).
  auto spellable = [&tok](std::string_view s) {
    for (int32_t id : tok.tokenize(s, false, true))
      if (tok.token_to_piece(id, false).empty()) return false;
    return true;
  };
  // A thinking template's generation prompt may leave a reasoning block open.
  Result<chat::ToolGrammar> g = chat::tool_call_grammar(renderer.tool_format(), req.tools, spellable,
                                                        open_block ? chat::kReasoningClose : std::string_view());
  if (!g) return invalid_request(g.message(), "tools", "invalid_json_schema");
  out.tool_format = &renderer.tool_format();
  out.tool_prefill = g->prefill;
  out.tool_gbnf = g->gbnf;
  prompt.markup(g->prefill);
  return std::nullopt;
}

#undef UBATCH_TRY

}  // namespace ubatch::server
