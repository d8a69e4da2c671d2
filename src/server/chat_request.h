// The chat-specific fields of /v1/chat/completions and /apply-template (docs/API.md, "Chat
// messages" and "Tool calling"), read from the body as ordered JSON so that a tool's
// parameters schema keeps its property order (the order the model writes them in):
//
//   messages            [{role, content: string | [{"type": "text", "text"}] | null, name?,
//                         tool_calls? (assistant), tool_call_id? (tool), …}]
//   tools               [{"type": "function", "function": {"name", "description"?, "parameters"?}}]
//   tool_choice         "auto" | "none" | "required" | {"type": "function", "function": {"name"}}
//   parallel_tool_calls boolean (default true)
//   chat_template_kwargs object: extra template variables (e.g. {"enable_thinking": false})
//   reasoning_effort    "low" | "medium" | "high": the template variable `reasoning_effort`
//                       (gpt-oss), over chat_template_kwargs' own
//
// Normalization before rendering (what templates expect): content parts are joined with "\n",
// null content becomes "", and tool_calls arguments sent as JSON strings (as OpenAI clients
// send them) are parsed into JSON values. Other message fields pass through to the template.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "chat/chat_renderer.h"
#include "chat/reasoning.h"
#include "chat/tool_types.h"
#include "server/errors.h"

namespace ubatch::server {

struct ChatRequest {
  chat::ChatRenderInput render;  // messages (normalized), kwargs; tools left empty (the caller decides)
  chat::ToolRequest tools;       // tools, tool_choice, parallel_tool_calls
  std::optional<chat::ReasoningFormat> reasoning_format;  // absent: the server's --reasoning-format
  int32_t reasoning_budget = -1;  // reasoning_budget_tokens (-1: none)
};

// Errors (400, param the field): a missing or empty messages array, a message that is not an
// object or has no string role, content of another type or with non-text parts, tool_calls
// that are not a list of {function: {name, arguments}}, arguments that are not valid JSON
// (the parser's message), tools that are not function definitions, a function name outside
// [A-Za-z0-9_.-]{1,64} or given twice, parameters that are not an object, a tool_choice of
// another value or naming a function not among the tools, tool_choice required or a named
// function without tools, chat_template_kwargs that is not an object (or that sets a variable
// the renderer sets: messages, tools, add_generation_prompt, bos_token, eos_token), a
// reasoning_format other than "none", "auto" or "deepseek", an assistant message's
// reasoning_content that is not a string, a reasoning_effort other than "low", "medium" or
// "high", a reasoning_budget_tokens that is not an integer in
// [0, 1048576].
std::optional<ApiError> parse_chat_request(const nlohmann::ordered_json& body, ChatRequest& out);

}  // namespace ubatch::server
