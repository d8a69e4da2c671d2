// The OpenAI response shapes for completions and chat completions, built from engine
// events: whole responses (CompletionAccumulator) and streamed chunks (ChunkBuilder).
//
// Text per choice is the concatenation of its Token events' text, so a streamed reply and
// the same reply unstreamed are identical by construction. Logprobs: chat uses
// {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}, completions the legacy
// {"tokens", "token_logprobs", "top_logprobs", "text_offset"} arrays.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/harmony.h"
#include "chat/reasoning.h"
#include "chat/tool_call_stream.h"
#include "chat/tool_format.h"
#include "chat/tool_types.h"
#include "sched/request.h"
#include "server/json_request.h"

namespace ubatch {
class Tokenizer;
}

namespace ubatch::server {

struct ResponseMeta {
  Endpoint endpoint = Endpoint::Completions;
  std::string id;       // "cmpl-…" or "chatcmpl-…"
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool logprobs = false;
  // Chat with tools: replies are parsed for calls in this format (null: plain text replies).
  const chat::ToolFormat* tool_format = nullptr;
  std::shared_ptr<const std::vector<chat::ToolDef>> tools;
  std::string tool_prefill;  // the prompt's last markup, read as each reply's start
  bool tool_special_text = false;  // no grammar: control tokens' text is kept for the parser (tool_reply_text)
  // Chat: replies are split into reasoning_content and content (chat/reasoning.h).
  bool reasoning = false;
  bool reasoning_open = false;  // the prompt ends inside an open <think> block
  // Chat: replies are read as harmony channels (chat/harmony.h): reasoning_content, content and
  // calls to `tools` (tool_format is null; tool_prefill, when set, is the reply's start).
  bool harmony = false;
};

// "stop", "length", "cancelled", "error", "deadline"
const char* finish_reason_text(sched::FinishReason r);

// The text a Token event adds to a reply that is parsed for tool calls: its text, or with
// `special` for a control token (whose text generation leaves out) the token's own text, so
// that markers such as [TOOL_CALLS] reach the parser (used when no grammar constrains the
// reply: tool_choice auto in a format whose trigger is a control token).
std::string tool_reply_text(const Tokenizer& tok, const sched::Event& e, bool special);
// The same for a harmony reply: a control token's text only when it is one of harmony's markers
// (other control tokens stay out, as in the reply's text).
std::string harmony_reply_text(const Tokenizer& tok, const sched::Event& e);

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}.
nlohmann::json usage_json(const sched::Usage& u);
// Extension: {"queue_ms", "ttft_ms", "tpot_ms", "total_ms", "preempted", "preempted_ms"}.
nlohmann::json timings_json(const sched::Timings& t);

// Collects Token and Finish events of a non-streamed request; response() builds the body
// from the Done event.
class CompletionAccumulator {
 public:
  CompletionAccumulator(ResponseMeta meta, int32_t n, const Tokenizer& tokenizer);
  void add(const sched::Event& e);
  nlohmann::json response(const sched::Event& done) const;

 private:
  struct Choice {
    std::string text;
    std::string tool_text;    // tools or harmony: the reply with control-token text (tool_reply_text)
    nlohmann::json logprobs;  // chat: array of entries; completions: legacy object
    sched::FinishReason finish = sched::FinishReason::Stop;
    bool finished = false;
    std::string error;
  };
  ResponseMeta meta_;
  const Tokenizer& tokenizer_;
  std::vector<Choice> choices_;
};

// Builds the chunks of a streamed request, in order: role() per choice (chat), token() per
// Token event, finish() per Finish event, usage() at the end when asked for.
class ChunkBuilder {
 public:
  ChunkBuilder(ResponseMeta meta, int32_t n, const Tokenizer& tokenizer, bool include_usage);
  // Chat: the first chunk of choice `index` (delta {"role": "assistant", "content": ""}).
  nlohmann::json role(int32_t index) const;
  // A Token event's chunk; false (out untouched) when there is nothing to send (text held
  // back and no logprobs requested).
  bool token(const sched::Event& e, nlohmann::json& out);
  nlohmann::json finish(const sched::Event& e) const;
  // Tools: the chunk of what the choice's tool-call stream still holds when its Finish event
  // comes (sent before finish()); false when nothing is held.
  bool flush(const sched::Event& e, nlohmann::json& out);
  // The last chunk when stream_options.include_usage: no choices, usage and timings.
  nlohmann::json usage(const sched::Event& done) const;

 private:
  nlohmann::json chunk(nlohmann::json choices) const;
  ResponseMeta meta_;
  const Tokenizer& tokenizer_;
  bool include_usage_;
  std::vector<int64_t> text_offset_;  // per choice: bytes of text sent so far (legacy logprobs)
  std::vector<std::unique_ptr<chat::ToolCallStream>> tool_streams_;  // per choice, with tools
  std::vector<std::unique_ptr<chat::ReasoningStream>> reasoning_streams_;  // per choice, with reasoning
  std::vector<std::unique_ptr<chat::HarmonyStream>> harmony_streams_;      // per choice, harmony replies
  bool harmony_token(const sched::Event& e, bool want_logprobs, nlohmann::json& out);
  nlohmann::json delta_json(const chat::ToolStreamDelta& d) const;
};

}  // namespace ubatch::server
