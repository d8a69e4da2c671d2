// The generic tool format for chat formats that render no tools (the hand-written fallback
// families; templates such as SmolLM2's or Gemma 3's whose output does not change with
// `tools`): the tools are described in the system turn and the model calls them with one
// JSON object as its whole reply (tool_format.h, "generic"). The text is fixed for a given
// tool list, so requests with the same tools share their prompt prefix (prefix cache).
//
// System text (appended to the first system message, or a system message of its own first):
//
//   You can call functions. Each function, as JSON with its parameters' JSON Schema:
//   {"name": "get_weather", "description": "…", "parameters": {…}}
//   To call functions, reply with only this JSON object:
//   {"tool_calls": [{"name": "<function name>", "arguments": {<arguments>}}]}
//   Otherwise reply with text.
//
// History: an assistant message's tool_calls become that JSON object in its text (after any
// text it had, on a new line); a `tool` message becomes a user message
// "Result of <name> (<tool_call_id>): <content>" (the name from the message, or from the call
// it answers).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_types.h"

namespace ubatch::chat {

// The system text above for `tools` (non-empty).
std::string generic_tools_system_text(const std::vector<ToolDef>& tools);

// A conversation (OpenAI messages, normalized: string contents, tool_calls arguments as JSON
// values) rewritten for a chat format without tools: tool descriptions in the system turn
// (when tools is non-empty), calls and results as text. Messages without tool fields are
// unchanged.
nlohmann::ordered_json generic_tools_messages(const nlohmann::ordered_json& messages,
                                              const std::vector<ToolDef>& tools);

}  // namespace ubatch::chat
