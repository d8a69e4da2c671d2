// POST /v1/responses bodies (OpenAI API reference, "Responses" → "Create a model response")
// translated into /v1/chat/completions bodies, which the chat path then parses, renders and
// constrains as any chat completion (wire_format.h). Stateless: nothing is stored.
//
// Read (everything else is ignored; docs/API.md, "Three wire formats"):
//   model                  as for chat
//   input                  string (one user message) or a list of items:
//                            {type?: "message", role: user|assistant|system|developer,
//                             content: string | [{type: input_text|output_text, text}]}
//                            {type: "function_call", call_id, name, arguments (JSON text)}
//                            {type: "function_call_output", call_id, output: string | [input_text parts]}
//                            {type: "reasoning", content?: [{type: reasoning_text, text}], summary?}
//                              (its text becomes the next assistant message's reasoning_content)
//   instructions           string: a system message first
//   tools                  [{type: "function", name, description?, parameters?, strict?}]
//   tool_choice            "auto" | "none" | "required" | {type: "function", name}
//   parallel_tool_calls    boolean
//   max_output_tokens      integer >= 1 (chat's max_tokens)
//   temperature, top_p     as for chat (also the extensions top_k, min_p, seed, repeat_penalty,
//                          presence_penalty, frequency_penalty)
//   text.format            {type: "text"} | {type: "json_object"} |
//                          {type: "json_schema", name, schema, strict?} (structured output)
//   reasoning              object ({effort, summary}): accepted, echoed, not applied
//   stream                 boolean
//   store                  boolean: accepted, treated as false
// Refused (400, OpenAI's error shape, param the field): previous_response_id, conversation and
// background true (no state is kept), input items of another type (item_reference, images,
// files, …) or content parts other than text, a function_call_output whose call_id no earlier
// function_call has, tools of another type (web_search, file_search, …), wrong JSON types.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "server/errors.h"

namespace ubatch::server {

// The members of a Responses body that responses_to_chat reads (for parse_ordered_members).
inline constexpr std::string_view kResponsesMembers[] = {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens",
    "temperature", "top_p", "top_k", "min_p", "seed", "repeat_penalty", "presence_penalty", "frequency_penalty",
    "text", "reasoning", "stream", "store", "previous_response_id", "conversation", "background", "metadata"};

// body (a JSON object) → chat (a /v1/chat/completions body). Errors as listed above.
std::optional<ApiError> responses_to_chat(const nlohmann::ordered_json& body, nlohmann::ordered_json& chat);

}  // namespace ubatch::server
