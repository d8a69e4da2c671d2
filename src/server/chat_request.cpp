// parse_chat_request (chat_request.h).
#include "server/chat_request.h"

#include <set>

#include <fmt/format.h>

namespace ubatch::server {

namespace {

using ojson = nlohmann::ordered_json;

const ojson* field(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool valid_function_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
          c == '.'))
      return false;
  return true;
}

std::optional<ApiError> normalize_content(ojson& msg, const std::string& where) {
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) {
    msg["content"] = "";
    return std::nullopt;
  }
  if (it->is_string()) return std::nullopt;
  if (!it->is_array())
    return invalid_request(where + ".content must be a string, an array of text parts, or null", "messages",
                           "invalid_type");
  std::string text;
  for (size_t k = 0; k < it->size(); ++k) {
    const ojson& part = (*it)[k];
    const ojson* type = part.is_object() ? field(part, "type") : nullptr;
    const ojson* t = part.is_object() ? field(part, "text") : nullptr;
    if (!type || !type->is_string() || type->get<std::string>() != "text" || !t || !t->is_string())
      return invalid_request(
          fmt::format("{}.content[{}]: only {{\"type\": \"text\", \"text\": ...}} parts are supported", where, k),
          "messages");
    if (k > 0) text += '\n';
    text += t->get<std::string>();
  }
  msg["content"] = text;
  return std::nullopt;
}

std::optional<ApiError> normalize_tool_calls(ojson& msg, const std::string& where) {
  auto it = msg.find("tool_calls");
  if (it == msg.end()) return std::nullopt;
  if (it->is_null()) {
    msg.erase("tool_calls");
    return std::nullopt;
  }
  if (!it->is_array()) return invalid_request(where + ".tool_calls must be an array", "messages", "invalid_type");
  for (size_t k = 0; k < it->size(); ++k) {
    ojson& call = (*it)[k];
    const std::string cw = fmt::format("{}.tool_calls[{}]", where, k);
    if (!call.is_object()) return invalid_request(cw + " must be an object", "messages", "invalid_type");
    if (const ojson* id = field(call, "id"); id && !id->is_string())
      return invalid_request(cw + ".id must be a string", "messages", "invalid_type");
    ojson* fn = call.contains("function") ? &call["function"] : nullptr;
    if (!fn || !fn->is_object())
      return invalid_request(cw + ".function must be an object {\"name\", \"arguments\"}", "messages", "invalid_type");
    const ojson* name = field(*fn, "name");
    if (!name || !name->is_string())
      return invalid_request(cw + ".function.name must be a string", "messages", "invalid_type");
    auto args = fn->find("arguments");
    if (args == fn->end() || args->is_null()) {
      (*fn)["arguments"] = ojson::object();
    } else if (args->is_string()) {
      // OpenAI sends arguments as a JSON text; templates expect the value.
      try {
        *args = ojson::parse(args->get<std::string>());
      } catch (const nlohmann::json::exception& e) {
        return invalid_request(fmt::format("{}.function.arguments is not valid JSON: {}", cw, e.what()), "messages",
                               "invalid_tool_arguments");
      }
    }
    if (!call.contains("type")) call["type"] = "function";
  }
  return std::nullopt;
}

std::optional<ApiError> parse_tools(const ojson& body, chat::ToolRequest& out) {
  if (const ojson* tools = field(body, "tools")) {
    if (!tools->is_array())
      return invalid_request("'tools' must be an array of function definitions", "tools", "invalid_type");
    std::set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& t = (*tools)[i];
      const std::string where = fmt::format("tools[{}]", i);
      if (!t.is_object()) return invalid_request(where + " must be an object", "tools", "invalid_type");
      const ojson* type = field(t, "type");
      if (type && (!type->is_string() || type->get<std::string>() != "function"))
        return invalid_request(where + ".type must be \"function\"", "tools");
      const ojson* fn = field(t, "function");
      if (!fn || !fn->is_object())
        return invalid_request(where + ".function must be an object {\"name\", \"description\", \"parameters\"}",
                               "tools", "invalid_type");
      const ojson* name = field(*fn, "name");
      if (!name || !name->is_string() || !valid_function_name(name->get<std::string>()))
        return invalid_request(where + ".function.name must be 1-64 letters, digits, '_', '-' or '.'", "tools");
      chat::ToolDef def;
      def.name = name->get<std::string>();
      if (!names.insert(def.name).second)
        return invalid_request(fmt::format("{}: the function name '{}' is given twice", where, def.name), "tools");
      if (const ojson* d = field(*fn, "description")) {
        if (!d->is_string())
          return invalid_request(where + ".function.description must be a string", "tools", "invalid_type");
        def.description = d->get<std::string>();
      }
      if (const ojson* p = field(*fn, "parameters")) {
        if (!p->is_object())
          return invalid_request(where + ".function.parameters must be a JSON Schema object", "tools", "invalid_type");
        def.parameters = *p;
      } else {
        def.parameters = ojson{{"type", "object"}, {"properties", ojson::object()}};
      }
      def.raw = t;
      if (!type) def.raw["type"] = "function";
      out.tools.push_back(std::move(def));
    }
  }
  if (const ojson* choice = field(body, "tool_choice")) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "auto")
        out.choice.mode = chat::ToolChoice::Mode::Auto;
      else if (c == "none")
        out.choice.mode = chat::ToolChoice::Mode::None;
      else if (c == "required")
        out.choice.mode = chat::ToolChoice::Mode::Required;
      else
        return invalid_request(fmt::format("'tool_choice' must be \"auto\", \"none\", \"required\" or "
                                           "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got \"{}\"",
                                           c),
                               "tool_choice");
    } else if (choice->is_object()) {
      const ojson* fn = field(*choice, "function");
      const ojson* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
      if (!name || !name->is_string())
        return invalid_request("'tool_choice' object must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                               "tool_choice", "invalid_type");
      out.choice.mode = chat::ToolChoice::Mode::Named;
      out.choice.name = name->get<std::string>();
      bool known = false;
      for (const chat::ToolDef& t : out.tools) known = known || t.name == out.choice.name;
      if (!known)
        return invalid_request(
            fmt::format("'tool_choice' names the function '{}', which is not among 'tools'", out.choice.name),
            "tool_choice");
    } else {
      return invalid_request("'tool_choice' must be a string or an object", "tool_choice", "invalid_type");
    }
    if (out.tools.empty() && (out.choice.mode == chat::ToolChoice::Mode::Required))
      return invalid_request("'tool_choice' \"required\" needs 'tools'", "tool_choice");
  }
  if (const ojson* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean())
      return invalid_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls", "invalid_type");
    out.parallel = p->get<bool>();
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_chat_request(const ojson& body, ChatRequest& out) {
  out = ChatRequest{};
  const ojson* m = field(body, "messages");
  if (!m) return invalid_request("'messages' is required", "messages", "missing_required_parameter");
  if (!m->is_array())
    return invalid_request("'messages' must be an array of {role, content} objects", "messages", "invalid_type");
  if (m->empty()) return invalid_request("'messages' is empty", "messages", "empty_prompt");
  for (size_t i = 0; i < m->size(); ++i) {
    ojson msg = (*m)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!msg.is_object()) return invalid_request(where + " must be an object", "messages", "invalid_type");
    const ojson* role = field(msg, "role");
    if (!role || !role->is_string())
      return invalid_request(where + ".role must be a string", "messages", "invalid_type");
    if (auto e = normalize_content(msg, where)) return e;
    if (auto e = normalize_tool_calls(msg, where)) return e;
    if (const ojson* id = field(msg, "tool_call_id"); id && !id->is_string())
      return invalid_request(where + ".tool_call_id must be a string", "messages", "invalid_type");
    if (const ojson* rc = field(msg, "reasoning_content"); rc && !rc->is_string())
      return invalid_request(where + ".reasoning_content must be a string", "messages", "invalid_type");
    out.render.messages.push_back(std::move(msg));
  }
  if (auto e = parse_tools(body, out.tools)) return e;
  if (const ojson* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object())
      return invalid_request("'chat_template_kwargs' must be an object", "chat_template_kwargs", "invalid_type");
    for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
      if (kw->contains(reserved))
        return invalid_request(fmt::format("'chat_template_kwargs' cannot set '{}': the server sets it", reserved),
                               "chat_template_kwargs");
    out.render.kwargs = *kw;
  }
  // reasoning_effort: the template variable gpt-oss's template reads (chat_template_kwargs may
  // set it too; the top-level field wins).
  if (const ojson* re = field(body, "reasoning_effort")) {
    const std::string v = re->is_string() ? re->get<std::string>() : std::string();
    if (v != "low" && v != "medium" && v != "high")
      return invalid_request(fmt::format("'reasoning_effort' must be \"low\", \"medium\" or \"high\", got {}", re->dump()),
                             "reasoning_effort", re->is_string() ? "invalid_value" : "invalid_type");
    out.render.kwargs["reasoning_effort"] = v;
  }
  if (const ojson* b = field(body, "reasoning_budget_tokens")) {
    constexpr int64_t kMaxBudget = int64_t{1} << 20;
    if (!b->is_number_integer())
      return invalid_request("'reasoning_budget_tokens' must be an integer", "reasoning_budget_tokens", "invalid_type");
    const int64_t v = b->get<int64_t>();
    if (v < 0 || v > kMaxBudget)
      return invalid_request(
          fmt::format("'reasoning_budget_tokens' must be in [0, {}], got {}", kMaxBudget, b->dump()),
          "reasoning_budget_tokens");
    out.reasoning_budget = static_cast<int32_t>(v);
  }
  if (const ojson* rf = field(body, "reasoning_format")) {
    if (!rf->is_string())
      return invalid_request("'reasoning_format' must be \"none\", \"auto\" or \"deepseek\"", "reasoning_format",
                             "invalid_type");
    out.reasoning_format = chat::parse_reasoning_format(rf->get<std::string>());
    if (!out.reasoning_format)
      return invalid_request(fmt::format("'reasoning_format' must be \"none\", \"auto\" or \"deepseek\", got \"{}\"",
                                         rf->get<std::string>()),
                             "reasoning_format");
  }
  return std::nullopt;
}

}  // namespace ubatch::server
