// Tool-call formats: how a model writes its function calls, as data. Each format names the
// markers around the calls and the syntax of one call; the parser (tool_call_parser.h), the
// grammar (tool_call_grammar.h) and the streaming splitter (tool_call_stream.h) read the same
// description, so a format is added as one table row (docs/CHAT.md, "Tool-call formats",
// lists them with the templates that use each).
//
// The format is chosen from the chat template's source (detect_tool_format): each row has
// marker strings that the template writes when it renders an assistant's tool calls. A
// template whose markers match no row — or that renders no tools at all (SmolLM2's, the
// Gemma 3 default's, every hand-written fallback family) — uses the generic format: the tool
// descriptions are put in the system turn (generic_tools.h) and a call is the JSON object
// {"tool_calls": [{"name": …, "arguments": {…}}, …]} as the whole reply.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ubatch::chat {

enum class CallSyntax {
  GenericObject,  // the whole reply: {"tool_calls": [{"name", "arguments"}, …]}
  JsonObject,     // one call = one JSON object {name_key: "…", args_key: {…}}, call_open/close around each
  JsonArray,      // the section holds one JSON array of such objects
  JsonNameMap,    // the section holds a JSON array of {"NAME": {args}} (Apertus)
  NameThenJson,   // call_open NAME name_end [id_open ID id_end] {args} call_close (Mistral v11, functionary, Kimi-K2,
                  // Solar)
  XmlParams,      // call_open NAME name_end (param_open KEY key_end VALUE value_end)* call_close (Qwen3-Coder, GLM,
                  // MiniCPM)
};

struct ToolFormat {
  std::string_view id;  // "hermes", "llama3", "mistral", … (docs, logs, /apply-template)
  CallSyntax syntax = CallSyntax::GenericObject;
  // Text that starts the calls of a reply (the parser looks for it; under tool_choice "auto"
  // the grammar lets free text run until it). For formats without any marker ("llama3":
  // a bare JSON object) it is "{" and must open the reply.
  std::string_view trigger;
  bool trigger_at_start = false;  // the calls can only start the reply (after whitespace)
  std::string_view section_open;  // written once before the calls ("" none); starts with trigger when set
  std::string_view section_close;
  std::string_view call_open;  // before each call; the first call's starts with trigger when section_open is ""
  std::string_view call_close;
  std::string_view call_sep;                       // between calls (grammar; the parser skips whitespace and ',')
  std::string_view name_key = "name";              // JsonObject / JsonArray
  std::string_view args_key = "arguments";         // JsonObject / JsonArray
  std::vector<std::string_view> args_key_aliases;  // also read by the parser ("parameters" ↔ "arguments")
  std::string_view name_end;                       // NameThenJson, XmlParams: ends the name
  std::string_view id_open;         // NameThenJson: optional call id after the name (Mistral "[CALL_ID]")
  std::string_view id_end;          // ends the id
  std::string_view id_before_name;  // NameThenJson: the call id comes first and this ends it (Solar)
  std::string_view name_prefix;     // stripped from the name (Kimi-K2 "functions.")
  bool name_index_suffix = false;   // the name ends with ":N" (Kimi-K2), dropped
  std::string_view param_open, key_end, value_end;  // XmlParams
  bool single_call = false;                         // the format holds one call per reply
};

// The generic format (also the fallback for templates without tools or with markers of no known format).
const ToolFormat& generic_tool_format();
// Every known format, generic first.
const std::vector<ToolFormat>& tool_formats();
// By id; nullptr when unknown.
const ToolFormat* find_tool_format(std::string_view id);

// The format a chat template's calls are written in, from markers in its source (no Jinja is
// evaluated). The generic format when none matches (the caller also uses it for templates
// that render no tools: see renders_tools in chat_renderer.h).
const ToolFormat& detect_tool_format(std::string_view template_source);

}  // namespace ubatch::chat
