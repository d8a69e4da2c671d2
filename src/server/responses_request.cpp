// responses_to_chat (responses_request.h).
#include "server/responses_request.h"

#include <set>
#include <string>

#include <fmt/format.h>

namespace ubatch::server {

namespace responses_wire {

using ojson = nlohmann::ordered_json;

const ojson* member(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

ApiError bad(const std::string& message, const char* param, const char* code = "invalid_value") {
  return invalid_request(message, param, code);
}

// Text parts ([{type: input_text|output_text|text, text}]) or a string → chat content parts.
std::optional<ApiError> text_parts(const ojson& content, const std::string& where, const char* param, ojson& out) {
  if (content.is_string()) {
    out = content;
    return std::nullopt;
  }
  if (!content.is_array())
    return bad(where + " must be a string or an array of input_text parts", param, "invalid_type");
  out = ojson::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& part = content[k];
    const ojson* type = part.is_object() ? member(part, "type") : nullptr;
    const ojson* text = part.is_object() ? member(part, "text") : nullptr;
    const std::string t = type && type->is_string() ? type->get<std::string>() : "";
    if (t != "input_text" && t != "output_text" && t != "text")
      return bad(fmt::format("{}[{}]: content part type '{}' is not supported (only input_text and output_text)", where,
                             k, t.substr(0, 64)),
                 param, "unsupported_content");
    if (!text || !text->is_string())
      return bad(fmt::format("{}[{}].text must be a string", where, k), param, "invalid_type");
    out.push_back({{"type", "text"}, {"text", *text}});
  }
  return std::nullopt;
}

std::optional<ApiError> string_member(const ojson& item, const char* key, const std::string& where, std::string& out) {
  const ojson* v = member(item, key);
  if (!v || !v->is_string()) return bad(fmt::format("{}.{} must be a string", where, key), "input", "invalid_type");
  out = v->get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> input_messages(const ojson& input, ojson& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return std::nullopt;
  }
  if (!input.is_array()) return bad("'input' must be a string or an array of input items", "input", "invalid_type");
  if (input.empty()) return bad("'input' is empty", "input", "empty_prompt");
  std::set<std::string> calls;  // call_ids of the function_call items so far
  std::string reasoning;        // a reasoning item's text, for the next assistant message
  // The assistant message that function_call items join (index into messages, -1 none).
  long open_assistant = -1;
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string where = fmt::format("input[{}]", i);
    if (!item.is_object()) return bad(where + " must be an object", "input", "invalid_type");
    const ojson* type = member(item, "type");
    if (type && !type->is_string()) return bad(where + ".type must be a string", "input", "invalid_type");
    const std::string t = type ? type->get<std::string>() : "message";
    if (t == "message") {
      const ojson* role = member(item, "role");
      const std::string r = role && role->is_string() ? role->get<std::string>() : "";
      if (r != "user" && r != "assistant" && r != "system" && r != "developer")
        return bad(where + ".role must be \"user\", \"assistant\", \"system\" or \"developer\"", "input");
      const ojson* content = member(item, "content");
      if (!content) return bad(where + ".content is required", "input", "missing_required_parameter");
      ojson msg = {{"role", r}};
      ojson parts;
      if (auto e = text_parts(*content, where + ".content", "input", parts)) return e;
      msg["content"] = std::move(parts);
      if (r == "assistant" && !reasoning.empty()) msg["reasoning_content"] = std::move(reasoning);
      reasoning.clear();
      messages.push_back(std::move(msg));
      open_assistant = r == "assistant" ? static_cast<long>(messages.size()) - 1 : -1;
    } else if (t == "function_call") {
      std::string call_id, name, arguments;
      if (auto e = string_member(item, "call_id", where, call_id)) return e;
      if (auto e = string_member(item, "name", where, name)) return e;
      if (auto e = string_member(item, "arguments", where, arguments)) return e;
      calls.insert(call_id);
      if (open_assistant < 0) {
        ojson msg = {{"role", "assistant"}, {"content", nullptr}};
        if (!reasoning.empty()) msg["reasoning_content"] = std::move(reasoning);
        reasoning.clear();
        messages.push_back(std::move(msg));
        open_assistant = static_cast<long>(messages.size()) - 1;
      }
      ojson& msg = messages[static_cast<size_t>(open_assistant)];
      if (!msg.contains("tool_calls")) msg["tool_calls"] = ojson::array();
      msg["tool_calls"].push_back(
          {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}});
    } else if (t == "function_call_output") {
      std::string call_id;
      if (auto e = string_member(item, "call_id", where, call_id)) return e;
      if (!calls.count(call_id))
        return bad(fmt::format("{}: function_call_output for call_id '{}', but no earlier function_call item has "
                               "that call_id (this server keeps no state: send the call with its output)",
                               where, call_id.substr(0, 64)),
                   "input", "unknown_call_id");
      const ojson* output = member(item, "output");
      if (!output) return bad(where + ".output is required", "input", "missing_required_parameter");
      ojson content;
      if (auto e = text_parts(*output, where + ".output", "input", content)) return e;
      messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(content)}});
      open_assistant = -1;
    } else if (t == "reasoning") {
      // Returned reasoning: its text (content reasoning_text, else the summary) goes with the
      // next assistant turn, for templates that render earlier reasoning.
      std::string text;
      for (const char* key : {"content", "summary"}) {
        const ojson* parts = member(item, key);
        if (!parts) continue;
        if (!parts->is_array()) return bad(fmt::format("{}.{} must be an array", where, key), "input", "invalid_type");
        for (const ojson& p : *parts)
          if (p.is_object())
            if (const ojson* pt = member(p, "text"); pt && pt->is_string()) text += pt->get<std::string>();
        if (!text.empty()) break;
      }
      reasoning = std::move(text);
    } else {
      return bad(fmt::format("{}: item type '{}' is not supported (message, function_call, function_call_output, "
                             "reasoning)",
                             where, t.substr(0, 64)),
                 "input", "unsupported_item");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> tools_of(const ojson& tools, ojson& out) {
  if (!tools.is_array()) return bad("'tools' must be an array of function tools", "tools", "invalid_type");
  out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!t.is_object()) return bad(where + " must be an object", "tools", "invalid_type");
    const ojson* type = member(t, "type");
    const std::string ty = type && type->is_string() ? type->get<std::string>() : "";
    if (ty != "function")
      return bad(fmt::format("{}.type '{}' is not supported: only {{\"type\": \"function\", \"name\", "
                             "\"parameters\"}} tools",
                             where, ty.substr(0, 64)),
                 "tools", "unsupported_tool");
    ojson fn = ojson::object();
    for (const char* key : {"name", "description", "parameters", "strict"})
      if (const ojson* v = member(t, key)) fn[key] = *v;
    if (fn.contains("strict") && !fn["strict"].is_boolean())
      return bad(where + ".strict must be a boolean", "tools", "invalid_type");
    fn.erase("strict");  // the grammar always enforces the schema
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return std::nullopt;
}

std::optional<ApiError> tool_choice_of(const ojson& choice, ojson& out) {
  if (choice.is_string()) {
    out = choice;  // "auto", "none", "required": checked by the chat path
    return std::nullopt;
  }
  const ojson* type = choice.is_object() ? member(choice, "type") : nullptr;
  const ojson* name = choice.is_object() ? member(choice, "name") : nullptr;
  if (!type || !type->is_string() || type->get<std::string>() != "function" || !name || !name->is_string())
    return bad("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}",
               "tool_choice");
  out = {{"type", "function"}, {"function", {{"name", *name}}}};
  return std::nullopt;
}

std::optional<ApiError> text_format_of(const ojson& text, ojson& chat) {
  if (!text.is_object()) return bad("'text' must be an object {\"format\": ...}", "text", "invalid_type");
  const ojson* format = member(text, "format");
  if (!format) return std::nullopt;
  const ojson* type = format->is_object() ? member(*format, "type") : nullptr;
  if (!type || !type->is_string())
    return bad("'text.format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}", "text",
               "invalid_type");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    chat["response_format"] = {{"type", "json_object"}};
    return std::nullopt;
  }
  if (t != "json_schema")
    return bad(fmt::format("'text.format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"{}\"",
                           t.substr(0, 64)),
               "text");
  ojson js = ojson::object();
  for (const char* key : {"name", "schema", "strict", "description"})
    if (const ojson* v = member(*format, key)) js[key] = *v;
  if (!js.contains("schema")) return bad("'text.format.schema' is required for json_schema", "text");
  chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
  return std::nullopt;
}

}  // namespace responses_wire

std::optional<ApiError> responses_to_chat(const nlohmann::ordered_json& body, nlohmann::ordered_json& chat) {
  using namespace responses_wire;
  chat = ojson::object();
  if (!body.is_object()) return bad("the request body must be a JSON object", "", "invalid_json");
  if (member(body, "previous_response_id"))
    return bad("'previous_response_id' is not supported: this server keeps no responses ('store' is treated as "
               "false); send the whole conversation in 'input'",
               "previous_response_id", "unsupported_parameter");
  if (member(body, "conversation"))
    return bad("'conversation' is not supported: this server keeps no conversations; send them in 'input'",
               "conversation", "unsupported_parameter");
  if (const ojson* bg = member(body, "background")) {
    if (!bg->is_boolean()) return bad("'background' must be a boolean", "background", "invalid_type");
    if (bg->get<bool>())
      return bad("'background' responses are not supported (nothing is stored)", "background", "unsupported_parameter");
  }
  if (const ojson* store = member(body, "store"); store && !store->is_boolean())
    return bad("'store' must be a boolean", "store", "invalid_type");
  if (const ojson* model = member(body, "model")) chat["model"] = *model;
  ojson messages = ojson::array();
  if (const ojson* ins = member(body, "instructions")) {
    if (!ins->is_string()) return bad("'instructions' must be a string", "instructions", "invalid_type");
    messages.push_back({{"role", "system"}, {"content", *ins}});
  }
  const ojson* input = member(body, "input");
  if (!input) return bad("'input' is required", "input", "missing_required_parameter");
  if (auto e = input_messages(*input, messages)) return e;
  chat["messages"] = std::move(messages);
  if (const ojson* tools = member(body, "tools")) {
    ojson t;
    if (auto e = tools_of(*tools, t)) return e;
    if (!t.empty()) chat["tools"] = std::move(t);
  }
  if (const ojson* choice = member(body, "tool_choice")) {
    ojson c;
    if (auto e = tool_choice_of(*choice, c)) return e;
    chat["tool_choice"] = std::move(c);
  }
  if (const ojson* p = member(body, "parallel_tool_calls")) chat["parallel_tool_calls"] = *p;
  if (const ojson* mot = member(body, "max_output_tokens")) {
    if (!mot->is_number_integer() || mot->get<int64_t>() < 1)
      return bad("'max_output_tokens' must be an integer >= 1", "max_output_tokens");
    chat["max_tokens"] = *mot;
  }
  for (const char* key : {"temperature", "top_p", "top_k", "min_p", "seed", "repeat_penalty", "presence_penalty",
                          "frequency_penalty"})
    if (const ojson* v = member(body, key)) chat[key] = *v;
  if (const ojson* text = member(body, "text"))
    if (auto e = text_format_of(*text, chat)) return e;
  if (const ojson* r = member(body, "reasoning"); r && !r->is_object())
    return bad("'reasoning' must be an object {\"effort\", \"summary\"}", "reasoning", "invalid_type");
  // reasoning.effort low/medium/high is the template's reasoning_effort (gpt-oss); the other
  // values (none, minimal, xhigh) have no template meaning and are not applied.
  if (const ojson* r = member(body, "reasoning"))
    if (const ojson* e = member(*r, "effort"); e && e->is_string())
      if (const std::string v = e->get<std::string>(); v == "low" || v == "medium" || v == "high")
        chat["reasoning_effort"] = v;
  if (const ojson* s = member(body, "stream")) {
    if (!s->is_boolean()) return bad("'stream' must be a boolean", "stream", "invalid_type");
    chat["stream"] = *s;
  }
  return std::nullopt;
}

}  // namespace ubatch::server
