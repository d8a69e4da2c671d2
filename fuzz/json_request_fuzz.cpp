// libFuzzer target: the request parser and validator of the server
// (src/server/json_request.cpp): body bytes → JSON → sched::Request, for /v1/completions and
// /v1/chat/completions, with the default model's vocabulary (fuzz_tokenizer.h) and the
// Gemma chat format. Build and run: docs/FUZZING.md; the dictionary fuzz/json_request_fuzz.dict
// names the fields. The same bodies are also read as the agents' APIs' bodies
// (src/server/responses_request.cpp for POST /v1/responses, messages_request.cpp for
// POST /v1/messages and count_tokens): each translation is a 400 or a chat body, which is then
// checked as a chat request like any other.
//
// Checks, for every input:
//  - no exception escapes (the server would answer 500) and nothing crashes;
//  - an error is a 400 with a message, and its JSON serializes;
//  - an accepted request is consistent: a non-empty prompt of ids in [0, n_vocab),
//    1 <= n <= max_n, 1 <= max_tokens <= cap, prompt + max_tokens within n_ctx, sampling
//    values in their documented ranges, logit_bias ids in the vocabulary.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_tokenizer.h"
#include "server/errors.h"
#include "server/json_request.h"
#include "server/messages_request.h"
#include "server/responses_request.h"

namespace {

using namespace ubatch;
using namespace ubatch::server;

#define FUZZ_CHECK(cond)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      __builtin_trap();                                                            \
    }                                                                              \
  } while (0)

void check_error(const ApiError& e) {
  FUZZ_CHECK(e.status == 400);
  FUZZ_CHECK(!e.message.empty());
  FUZZ_CHECK(!dump_json(error_json(e)).empty());
}

void check_request(const ParsedRequest& p, const RequestLimits& limits) {
  const sched::Request& r = p.request;
  FUZZ_CHECK(!r.prompt.empty());
  for (int32_t id : r.prompt) FUZZ_CHECK(id >= 0 && id < limits.n_vocab);
  FUZZ_CHECK(r.n >= 1 && r.n <= limits.max_n);
  FUZZ_CHECK(r.max_tokens >= 1 && r.max_tokens <= limits.max_tokens_cap);
  FUZZ_CHECK(static_cast<int64_t>(r.prompt.size()) + r.max_tokens <= limits.n_ctx);
  const SamplingParams& s = r.sampling;
  FUZZ_CHECK(std::isfinite(s.temperature) && s.temperature >= 0 && s.temperature <= 2);
  FUZZ_CHECK(s.top_p >= 0 && s.top_p <= 1 && s.min_p >= 0 && s.min_p <= 1);
  FUZZ_CHECK(s.top_k >= 0);
  FUZZ_CHECK(s.repeat_penalty > 0 && s.repeat_penalty <= 10);
  for (const auto& [id, bias] : s.logit_bias) FUZZ_CHECK(id >= 0 && id < limits.n_vocab && std::fabs(bias) <= 100);
  FUZZ_CHECK(r.top_logprobs >= -1 && r.top_logprobs <= 20);
  FUZZ_CHECK(p.logprobs == (r.top_logprobs >= 0));
  FUZZ_CHECK(r.stop.size() <= 16);
  for (const std::string& stop : r.stop) FUZZ_CHECK(!stop.empty() && stop.size() <= 1024);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)ubatch::fuzz::tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = ubatch::fuzz::tokenizer();
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  nlohmann::json j;
  if (std::optional<ApiError> e = parse_json_body(body, j)) {
    check_error(*e);
    return 0;
  }
  FUZZ_CHECK(j.is_object());
  static const std::shared_ptr<const ubatch::chat::ChatRenderer> renderer =
      ubatch::chat::ChatRenderer::create("gemma", "", "<bos>", "<eos>").value();
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body);
  const ChatSetup setup{renderer.get(), &ordered};
  RequestLimits limits;
  limits.n_ctx = 4096;
  limits.n_vocab = tok.n_vocab();
  limits.max_tokens_cap = 2048;
  limits.max_n = 16;
  limits.random_seed = false;
  // The agents' APIs: translated (or refused), then parsed as the chat path parses them.
  for (int api = 0; api < 3; ++api) {
    nlohmann::ordered_json chat;
    std::optional<ApiError> e = api == 0 ? responses_to_chat(ordered, chat) : messages_to_chat(ordered, api == 2, chat);
    if (e) {
      check_error(*e);
      continue;
    }
    const std::string chat_text = chat.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    nlohmann::json chat_body;
    if (std::optional<ApiError> err = parse_json_body(chat_text, chat_body)) {  // nesting deeper than allowed
      check_error(*err);
      continue;
    }
    const ChatSetup chat_setup{renderer.get(), &chat};
    ParsedRequest parsed;
    limits.parse_special = true;
    if (std::optional<ApiError> err =
            parse_completion_request(chat_body, Endpoint::ChatCompletions, tok, chat_setup, limits, parsed)) {
      check_error(*err);
      continue;
    }
    check_request(parsed, limits);
  }
  for (Endpoint endpoint : {Endpoint::Completions, Endpoint::ChatCompletions}) {
    for (bool parse_special : {true, false}) {
      if (endpoint == Endpoint::ChatCompletions && !parse_special) continue;  // chat ignores it
      limits.parse_special = parse_special;
      ParsedRequest parsed;
      if (std::optional<ApiError> e = parse_completion_request(j, endpoint, tok, setup, limits, parsed)) {
        check_error(*e);
        continue;
      }
      check_request(parsed, limits);
    }
  }
  return 0;
}
