// Parsing and validation of request bodies: bytes → JSON (UTF-8 checked, nesting bounded)
// → sched::Request for /v1/completions and /v1/chat/completions. Every rule and its error is
// listed in docs/API.md; unknown fields are ignored, null means "absent".
//
// The prompt is tokenized here (so its length is known before the engine sees it): text
// with BOS per the model (`add_bos_default`) and special tokens parsed unless
// RequestLimits::parse_special is off; chat messages are rendered with the chat template
// (render_chat, generation prompt opened) and only the template's markup is parsed for
// special tokens — message content is always plain text.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/chat_renderer.h"
#include "chat/reasoning.h"
#include "chat/tool_types.h"
#include "sched/request.h"
#include "server/errors.h"

namespace ubatch {
class Tokenizer;
}

namespace ubatch::server {

enum class Endpoint { Completions, ChatCompletions };

// What validation needs to know about the backend and the server's limits.
struct RequestLimits {
  int32_t n_ctx = 0;           // most tokens one sequence may hold (min of the KV capacity and the trained context)
  int32_t n_vocab = 0;
  int32_t max_tokens_cap = 1 << 20;
  int32_t max_n = 16;
  SamplingParams defaults;     // sampling for fields the request leaves out
  bool random_seed = true;     // no "seed" in the request: a random one (else defaults.seed)
  bool parse_special = true;   // /v1/completions text prompts: special-token text becomes special tokens
  int32_t max_logit_bias = 0;  // most logit_bias entries (--max-logit-bias; 0: the vocabulary size)
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::Completions;
  sched::Request request;      // prompt holds the token ids (prompt_text is left empty)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // report logprobs (request.top_logprobs >= 0)
  std::string model;           // as sent (informational; the served model answers)
  std::string prompt_text;     // rendered prompt text ("" when given as ids), for --log-prompts
  // Chat with tools (docs/API.md, "Tool calling"): what the reply is parsed for.
  chat::ToolRequest tools;                        // tools, tool_choice, parallel_tool_calls
  const chat::ToolFormat* tool_format = nullptr;  // non-null: replies are parsed for calls in this format
  std::string tool_prefill;    // markup the prompt ends with (the reply's start, for the parser)
  std::string tool_gbnf;       // the grammar for calls ("" none); compiled by the caller
  // Reasoning (docs/API.md, "Reasoning"): replies are split into reasoning_content and content.
  bool reasoning = false;
  bool reasoning_open = false;  // the prompt ends inside an open <think> block
  int32_t reasoning_budget = -1;  // reasoning_budget_tokens (-1: none)
  bool prompt_opens_block = false;  // the prompt ends with <think> (whatever reasoning_format says)
  // A harmony template (chat/harmony.h) with reasoning_format other than none: replies are read
  // as harmony channels (reasoning, content and calls; tool_format stays null).
  bool harmony = false;
  bool harmony_analysis_open = false;  // a budget on a harmony reply: the prompt opens the analysis channel
};

// What chat requests need besides the body: the model's renderer and the body as ordered
// JSON (tool schemas keep their property order).
struct ChatSetup {
  const chat::ChatRenderer* renderer = nullptr;
  const nlohmann::ordered_json* ordered_body = nullptr;
  chat::ReasoningFormat reasoning_format = chat::ReasoningFormat::Auto;  // --reasoning-format
};

// Most members one JSON object may have in the parts of a body parsed as ordered JSON (messages,
// tools, chat_template_kwargs, response_format, json_schema): ordered JSON finds a member by a
// linear search, so a wider object would cost quadratic time. docs/API.md, "Request limits".
constexpr size_t kMaxOrderedObjectMembers = 4096;

// Parses `body` (already checked by parse_json_body) as ordered JSON, keeping only the top-level
// members named in `keys` (a logit_bias of 100,000 entries is skipped, not built). Time linear
// in the body; an error when a kept object has more than kMaxOrderedObjectMembers members.
std::optional<ApiError> parse_ordered_members(std::string_view body, std::span<const std::string_view> keys,
                                              nlohmann::ordered_json& out);
// The members a chat request's rendering reads (parse_chat_request).
inline constexpr std::string_view kChatMembers[] = {"messages", "tools", "tool_choice", "parallel_tool_calls",
                                                    "chat_template_kwargs", "reasoning_format",
                                                    "reasoning_budget_tokens", "reasoning_effort"};

// True when `s` is well-formed UTF-8 (Unicode ch. 3, table 3-7: no overlongs, no surrogates,
// nothing above U+10FFFF). On failure *bad_offset (when given) is the first bad byte.
bool is_valid_utf8(std::string_view s, size_t* bad_offset = nullptr);

// Body → JSON object. Errors (400): empty body, invalid UTF-8, nesting deeper than 64,
// malformed JSON (including lone surrogate escapes such as "\ud800"), not an object.
std::optional<ApiError> parse_json_body(std::string_view body, nlohmann::json& out);

// JSON object → request. chat: the renderer and ordered body (chat only). Errors (400):
// wrong types, out-of-range values, empty prompt or messages, token ids or logit_bias keys
// outside the vocabulary, prompt (+ max_tokens) longer than the context (code
// "context_length_exceeded", message with the token counts), chat_request.h's errors,
// template errors (code "template_error", the template's message), tool schemas the grammar
// converter refuses (code "invalid_json_schema", param "tools").
std::optional<ApiError> parse_completion_request(const nlohmann::json& body, Endpoint endpoint,
                                                 const Tokenizer& tokenizer, const ChatSetup& setup,
                                                 const RequestLimits& limits, ParsedRequest& out);

// The chat prompt of a body (messages, tools, tool_choice, chat_template_kwargs) as the model
// will see it, with the tool grammar it runs under (out: tools, tool_format, tool_prefill,
// tool_gbnf). Used by parse_completion_request and POST /apply-template. Same errors.
std::optional<ApiError> render_chat_prompt(const ChatSetup& setup, const Tokenizer& tokenizer, ParsedRequest& out,
                                           SegmentedText& prompt);

}  // namespace ubatch::server
