// The values tool calling works with, shared by the request parser (server), the tool-call
// formats (tool_format.h), their parsers (tool_call_parser.h), grammars
// (tool_call_grammar.h) and the streaming splitter (tool_call_stream.h).
//
// Shapes follow the OpenAI Chat Completions API: a tool is
// {"type": "function", "function": {"name", "description"?, "parameters"? (JSON Schema)}};
// a call is {"id", "type": "function", "function": {"name", "arguments" (a JSON text)}}.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ubatch::chat {

// One function the model may call.
struct ToolDef {
  std::string name;         // [A-Za-z0-9_.-]{1,64} (checked by the request parser)
  std::string description;  // "" when absent
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();  // JSON Schema of the arguments object
  nlohmann::ordered_json raw;  // the tool as the client sent it ({"type": "function", "function": {...}})
};

// tool_choice: "auto" (text or calls, the model chooses), "none" (text only), "required" (at
// least one call), or one named function (exactly that function).
struct ToolChoice {
  enum class Mode { Auto, None, Required, Named };
  Mode mode = Mode::Auto;
  std::string name;  // Named: the function
};

// What a request asks of tool calling.
struct ToolRequest {
  std::vector<ToolDef> tools;
  ToolChoice choice;
  bool parallel = true;  // parallel_tool_calls: more than one call in one reply
  // Calls are wanted at all: tools given and tool_choice is not "none".
  bool active() const { return !tools.empty() && choice.mode != ToolChoice::Mode::None; }
  // The grammar forces a call (required or a named function).
  bool forced() const {
    return active() && (choice.mode == ToolChoice::Mode::Required || choice.mode == ToolChoice::Mode::Named);
  }
};

// One call the model made.
struct ToolCall {
  std::string id;  // "call_…" (assigned by the server; some formats carry their own)
  std::string name;
  std::string arguments;  // a JSON text of an object, as OpenAI sends it
};

// A reply split into text and calls.
struct ParsedReply {
  std::string content;          // text outside the calls (may be "")
  std::vector<ToolCall> calls;  // empty: the reply is text only
};

}  // namespace ubatch::chat
