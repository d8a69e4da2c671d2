// POST /v1/messages and /v1/messages/count_tokens bodies (Anthropic API reference, "Messages"
// → "Create a Message" and "Count tokens in a Message") translated into /v1/chat/completions
// bodies, which the chat path parses, renders and constrains as any chat completion
// (wire_format.h).
//
// Read (everything else is ignored; docs/API.md, "Three wire formats"):
//   model            as for chat
//   max_tokens       integer >= 1; required (not for count_tokens)
//   system           string, or [{type: "text", text}] blocks: a system message first
//   messages         [{role: user|assistant, content: string | blocks}], blocks:
//                      {type: "text", text}
//                      {type: "tool_use", id, name, input (object)}         (assistant)
//                      {type: "thinking", thinking, signature?}             (assistant: its
//                        reasoning_content; "redacted_thinking" blocks are skipped)
//                      {type: "tool_result", tool_use_id, content?: string | [text blocks],
//                       is_error?}                                          (user: a tool
//                        message, its text prefixed "Error: " when is_error)
//   tools            [{name, description?, input_schema (object)}] (type absent or "custom")
//   tool_choice      {type: "auto" | "any" | "tool" (with name) | "none", disable_parallel_tool_use?}
//   stop_sequences   [string]
//   temperature, top_p, top_k
//   thinking         {type: "enabled", budget_tokens: 1 <= n < max_tokens} → the reasoning budget
//                    (reasoning_budget_tokens) and enable_thinking true for the template;
//                    {type: "disabled"} → enable_thinking false
//   stream           boolean
//   metadata, service_tier, … : ignored
// Refused (400, invalid_request_error): a missing or bad max_tokens, an empty messages list,
// roles other than user/assistant, block types not listed (image, document, server tools, …)
// or in the wrong role, a tool_result whose tool_use_id no earlier tool_use has, tools of another
// type or without input_schema, a tool_choice of another type or naming no tool, a thinking
// type other than enabled/disabled, a budget_tokens that is not an integer in [1, max_tokens).
#pragma once

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/errors.h"

namespace ubatch::server {

// The members of a Messages body that messages_to_chat reads (for parse_ordered_members).
inline constexpr std::string_view kMessagesMembers[] = {
    "model", "max_tokens", "system", "messages", "tools", "tool_choice", "stop_sequences", "temperature",
    "top_p", "top_k", "thinking", "stream", "metadata"};

// body → chat. count_only (count_tokens): max_tokens is optional and stream is not read.
std::optional<ApiError> messages_to_chat(const nlohmann::ordered_json& body, bool count_only,
                                         nlohmann::ordered_json& chat);

}  // namespace ubatch::server
