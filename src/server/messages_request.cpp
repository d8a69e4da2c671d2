// messages_to_chat (messages_request.h).
#include "server/messages_request.h"

#include <set>
#include <string>

#include <fmt/format.h>

namespace ubatch::server {

namespace messages_wire {

using ojson = nlohmann::ordered_json;

constexpr int64_t kMaxMessagesTokens = int64_t{1} << 20;

const ojson* member(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

ApiError bad(const std::string& message, const char* param, const char* code = "invalid_value") {
  return invalid_request(message, param, code);
}

std::string type_of(const ojson& block) {
  const ojson* t = block.is_object() ? member(block, "type") : nullptr;
  return t && t->is_string() ? t->get<std::string>() : "";
}

// A string, or text blocks joined; `where` names the field for errors.
std::optional<ApiError> text_of(const ojson& v, const std::string& where, const char* param, std::string& out) {
  out.clear();
  if (v.is_string()) {
    out = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return bad(where + " must be a string or an array of text blocks", param, "invalid_type");
  for (size_t k = 0; k < v.size(); ++k) {
    const ojson* text = v[k].is_object() ? member(v[k], "text") : nullptr;
    if (type_of(v[k]) != "text" || !text || !text->is_string())
      return bad(fmt::format("{}[{}]: only {{\"type\": \"text\", \"text\": ...}} blocks are supported here, got type "
                             "'{}'",
                             where, k, type_of(v[k]).substr(0, 64)),
                 param, "unsupported_content");
    if (k > 0) out += '\n';
    out += text->get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> user_message(const ojson& content, const std::string& where, const std::set<std::string>& uses,
                                     ojson& messages) {
  if (content.is_string()) {
    messages.push_back({{"role", "user"}, {"content", content}});
    return std::nullopt;
  }
  std::string text;
  bool has_text = false;
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& b = content[k];
    const std::string bw = fmt::format("{}.content[{}]", where, k);
    const std::string t = type_of(b);
    if (t == "text") {
      const ojson* tx = member(b, "text");
      if (!tx || !tx->is_string()) return bad(bw + ".text must be a string", "messages", "invalid_type");
      if (has_text) text += '\n';
      text += tx->get<std::string>();
      has_text = true;
    } else if (t == "tool_result") {
      const ojson* id = member(b, "tool_use_id");
      if (!id || !id->is_string()) return bad(bw + ".tool_use_id must be a string", "messages", "invalid_type");
      const std::string use_id = id->get<std::string>();
      if (!uses.count(use_id))
        return bad(fmt::format("{}: tool_result for tool_use_id '{}', but no earlier tool_use block has that id", bw,
                               use_id.substr(0, 64)),
                   "messages", "unknown_tool_use_id");
      std::string result;
      if (const ojson* c = member(b, "content"))
        if (auto e = text_of(*c, bw + ".content", "messages", result)) return e;
      if (const ojson* err = member(b, "is_error")) {
        if (!err->is_boolean()) return bad(bw + ".is_error must be a boolean", "messages", "invalid_type");
        if (err->get<bool>()) result = "Error: " + result;
      }
      messages.push_back({{"role", "tool"}, {"tool_call_id", use_id}, {"content", result}});
    } else {
      return bad(fmt::format("{}: block type '{}' is not supported in a user message (text, tool_result)", bw,
                             t.substr(0, 64)),
                 "messages", "unsupported_content");
    }
  }
  if (has_text || content.empty()) messages.push_back({{"role", "user"}, {"content", text}});
  return std::nullopt;
}

std::optional<ApiError> assistant_message(const ojson& content, const std::string& where, std::set<std::string>& uses,
                                          ojson& messages) {
  if (content.is_string()) {
    messages.push_back({{"role", "assistant"}, {"content", content}});
    return std::nullopt;
  }
  ojson msg = {{"role", "assistant"}};
  std::string text, thinking;
  ojson calls = ojson::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& b = content[k];
    const std::string bw = fmt::format("{}.content[{}]", where, k);
    const std::string t = type_of(b);
    if (t == "text") {
      const ojson* tx = member(b, "text");
      if (!tx || !tx->is_string()) return bad(bw + ".text must be a string", "messages", "invalid_type");
      text += tx->get<std::string>();
    } else if (t == "thinking") {
      const ojson* th = member(b, "thinking");
      if (!th || !th->is_string()) return bad(bw + ".thinking must be a string", "messages", "invalid_type");
      thinking += th->get<std::string>();
    } else if (t == "redacted_thinking") {
      continue;  // opaque: nothing a template can render
    } else if (t == "tool_use") {
      const ojson* id = member(b, "id");
      const ojson* name = member(b, "name");
      const ojson* input = member(b, "input");
      if (!id || !id->is_string()) return bad(bw + ".id must be a string", "messages", "invalid_type");
      if (!name || !name->is_string()) return bad(bw + ".name must be a string", "messages", "invalid_type");
      if (input && !input->is_object()) return bad(bw + ".input must be an object", "messages", "invalid_type");
      uses.insert(id->get<std::string>());
      calls.push_back({{"id", *id},
                       {"type", "function"},
                       {"function", {{"name", *name}, {"arguments", input ? *input : ojson::object()}}}});
    } else {
      return bad(fmt::format("{}: block type '{}' is not supported in an assistant message (text, thinking, "
                             "tool_use)",
                             bw, t.substr(0, 64)),
                 "messages", "unsupported_content");
    }
  }
  msg["content"] = text;
  if (!thinking.empty()) msg["reasoning_content"] = thinking;
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  messages.push_back(std::move(msg));
  return std::nullopt;
}

std::optional<ApiError> tools_of(const ojson& tools, ojson& out) {
  if (!tools.is_array()) return bad("'tools' must be an array of {name, description, input_schema}", "tools",
                                    "invalid_type");
  out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!t.is_object()) return bad(where + " must be an object", "tools", "invalid_type");
    const ojson* type = member(t, "type");
    if (type && (!type->is_string() || type->get<std::string>() != "custom"))
      return bad(fmt::format("{}.type '{}' is not supported: only client tools {{\"name\", \"input_schema\"}}", where,
                             type->is_string() ? type->get<std::string>().substr(0, 64) : type->dump()),
                 "tools", "unsupported_tool");
    const ojson* schema = member(t, "input_schema");
    if (!schema || !schema->is_object())
      return bad(where + ".input_schema must be a JSON Schema object", "tools", "invalid_type");
    ojson fn = ojson::object();
    if (const ojson* n = member(t, "name")) fn["name"] = *n;  // checked by the chat path
    if (const ojson* d = member(t, "description")) fn["description"] = *d;
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return std::nullopt;
}

std::optional<ApiError> tool_choice_of(const ojson& choice, ojson& chat) {
  const ojson* type = choice.is_object() ? member(choice, "type") : nullptr;
  const std::string t = type && type->is_string() ? type->get<std::string>() : "";
  if (t == "auto") {
    chat["tool_choice"] = "auto";
  } else if (t == "any") {
    chat["tool_choice"] = "required";
  } else if (t == "none") {
    chat["tool_choice"] = "none";
  } else if (t == "tool") {
    const ojson* name = member(choice, "name");
    if (!name || !name->is_string())
      return bad("'tool_choice' {\"type\": \"tool\"} needs a \"name\"", "tool_choice", "invalid_type");
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    return bad("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}", "tool_choice");
  }
  if (const ojson* d = member(choice, "disable_parallel_tool_use")) {
    if (!d->is_boolean())
      return bad("'tool_choice.disable_parallel_tool_use' must be a boolean", "tool_choice", "invalid_type");
    chat["parallel_tool_calls"] = !d->get<bool>();
  }
  return std::nullopt;
}

std::optional<ApiError> thinking_of(const ojson& thinking, const std::optional<int64_t>& max_tokens, ojson& chat) {
  const ojson* type = thinking.is_object() ? member(thinking, "type") : nullptr;
  const std::string t = type && type->is_string() ? type->get<std::string>() : "";
  if (t == "disabled") {
    chat["chat_template_kwargs"] = {{"enable_thinking", false}};
    return std::nullopt;
  }
  if (t != "enabled")
    return bad("'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": n} or {\"type\": \"disabled\"}",
               "thinking");
  const ojson* b = member(thinking, "budget_tokens");
  if (!b || !b->is_number_integer())
    return bad("'thinking.budget_tokens' must be an integer", "thinking", "invalid_type");
  // Beyond int64 (a huge unsigned) reads as negative here: refused the same.
  const int64_t budget = b->is_number_unsigned() && b->get<uint64_t>() > static_cast<uint64_t>(kMaxMessagesTokens)
                             ? kMaxMessagesTokens + 1
                             : b->get<int64_t>();
  if (budget < 1 || budget > kMaxMessagesTokens)
    return bad(fmt::format("'thinking.budget_tokens' must be at least 1 and below max_tokens, got {}", b->dump()),
               "thinking");
  if (max_tokens && budget >= *max_tokens)
    return bad(fmt::format("'thinking.budget_tokens' ({}) must be below 'max_tokens' ({}): the answer follows the "
                           "thinking",
                           budget, *max_tokens),
               "thinking");
  chat["reasoning_budget_tokens"] = budget;
  chat["chat_template_kwargs"] = {{"enable_thinking", true}};
  return std::nullopt;
}

}  // namespace messages_wire

std::optional<ApiError> messages_to_chat(const nlohmann::ordered_json& body, bool count_only,
                                         nlohmann::ordered_json& chat) {
  using namespace messages_wire;
  chat = ojson::object();
  if (!body.is_object()) return bad("the request body must be a JSON object", "", "invalid_json");
  if (const ojson* model = member(body, "model")) chat["model"] = *model;
  std::optional<int64_t> max_tokens;
  if (const ojson* mt = member(body, "max_tokens")) {
    if (!mt->is_number_integer() || (mt->is_number_unsigned() && mt->get<uint64_t>() > uint64_t{1} << 40) ||
        mt->get<int64_t>() < 1)
      return bad(fmt::format("'max_tokens' must be an integer >= 1, got {}", mt->dump().substr(0, 64)), "max_tokens");
    max_tokens = mt->get<int64_t>();
    chat["max_tokens"] = *max_tokens;
  } else if (!count_only) {
    return bad("'max_tokens' is required", "max_tokens", "missing_required_parameter");
  }
  ojson messages = ojson::array();
  if (const ojson* sys = member(body, "system")) {
    std::string text;
    if (auto e = text_of(*sys, "system", "system", text)) return e;
    messages.push_back({{"role", "system"}, {"content", text}});
  }
  const ojson* msgs = member(body, "messages");
  if (!msgs) return bad("'messages' is required", "messages", "missing_required_parameter");
  if (!msgs->is_array()) return bad("'messages' must be an array of {role, content}", "messages", "invalid_type");
  if (msgs->empty()) return bad("'messages' is empty", "messages", "empty_prompt");
  std::set<std::string> uses;  // tool_use ids so far
  for (size_t i = 0; i < msgs->size(); ++i) {
    const ojson& m = (*msgs)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return bad(where + " must be an object", "messages", "invalid_type");
    const ojson* role = member(m, "role");
    const std::string r = role && role->is_string() ? role->get<std::string>() : "";
    const ojson* content = member(m, "content");
    if (!content || (!content->is_string() && !content->is_array()))
      return bad(where + ".content must be a string or an array of content blocks", "messages", "invalid_type");
    if (r == "user") {
      if (auto e = user_message(*content, where, uses, messages)) return e;
    } else if (r == "assistant") {
      if (auto e = assistant_message(*content, where, uses, messages)) return e;
    } else {
      return bad(where + ".role must be \"user\" or \"assistant\" (the system prompt goes in 'system')", "messages");
    }
  }
  chat["messages"] = std::move(messages);
  if (const ojson* tools = member(body, "tools")) {
    ojson t;
    if (auto e = tools_of(*tools, t)) return e;
    if (!t.empty()) chat["tools"] = std::move(t);
  }
  if (const ojson* choice = member(body, "tool_choice"))
    if (auto e = tool_choice_of(*choice, chat)) return e;
  if (const ojson* stops = member(body, "stop_sequences")) {
    if (!stops->is_array()) return bad("'stop_sequences' must be an array of strings", "stop_sequences", "invalid_type");
    for (const ojson& s : *stops)
      if (!s.is_string()) return bad("'stop_sequences' must be an array of strings", "stop_sequences", "invalid_type");
    chat["stop"] = *stops;
  }
  for (const char* key : {"temperature", "top_p", "top_k"})
    if (const ojson* v = member(body, key)) chat[key] = *v;
  if (const ojson* th = member(body, "thinking"))
    if (auto e = thinking_of(*th, max_tokens, chat)) return e;
  if (!count_only)
    if (const ojson* s = member(body, "stream")) {
      if (!s->is_boolean()) return bad("'stream' must be a boolean", "stream", "invalid_type");
      chat["stream"] = *s;
    }
  return std::nullopt;
}

}  // namespace ubatch::server
