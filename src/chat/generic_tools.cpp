// The generic tool format's prompt text and history rewriting (generic_tools.h).
#include "chat/generic_tools.h"

#include <map>

namespace ubatch::chat {

using ojson = nlohmann::ordered_json;

namespace {

std::string text_of(const ojson& content) { return content.is_string() ? content.get<std::string>() : ""; }

}  // namespace

std::string generic_tools_system_text(const std::vector<ToolDef>& tools) {
  std::string s = "You can call functions. Each function, as JSON with its parameters' JSON Schema:\n";
  for (const ToolDef& t : tools) {
    ojson d = ojson::object();
    d["name"] = t.name;
    if (!t.description.empty()) d["description"] = t.description;
    d["parameters"] = t.parameters;
    s += d.dump() + "\n";
  }
  s += "To call functions, reply with only this JSON object:\n"
       "{\"tool_calls\": [{\"name\": \"<function name>\", \"arguments\": {<arguments>}}]}\n"
       "Otherwise reply with text.";
  return s;
}

ojson generic_tools_messages(const ojson& messages, const std::vector<ToolDef>& tools) {
  ojson out = ojson::array();
  std::map<std::string, std::string> call_names;  // tool_call_id → function name
  bool placed_tools = tools.empty();
  for (const ojson& m : messages) {
    ojson msg = m;
    const std::string role = msg.value("role", "");
    if (!placed_tools) {
      placed_tools = true;
      const std::string block = generic_tools_system_text(tools);
      if (role == "system" || role == "developer") {
        const std::string text = text_of(msg.value("content", ojson()));
        msg["content"] = text.empty() ? block : text + "\n\n" + block;
      } else {
        out.push_back(ojson{{"role", "system"}, {"content", block}});
      }
    }
    if (role == "assistant" && msg.contains("tool_calls") && msg["tool_calls"].is_array() &&
        !msg["tool_calls"].empty()) {
      // Written with the spacing the generic grammar generates (tool_call_grammar.h).
      std::string json_text = "{\"tool_calls\": [";
      bool first = true;
      for (const ojson& c : msg["tool_calls"]) {
        const ojson& fn = c.contains("function") ? c["function"] : c;
        const std::string name = fn.value("name", "");
        if (c.contains("id") && c["id"].is_string()) call_names[c["id"].get<std::string>()] = name;
        json_text += (first ? "" : ", ") + std::string("{\"name\": ") + ojson(name).dump() +
                     ", \"arguments\": " + fn.value("arguments", ojson::object()).dump() + "}";
        first = false;
      }
      json_text += "]}";
      const std::string text = text_of(msg.value("content", ojson()));
      msg["content"] = text.empty() ? json_text : text + "\n" + json_text;
      msg.erase("tool_calls");
    } else if (role == "tool") {
      const std::string id = msg.value("tool_call_id", "");
      std::string name = msg.value("name", "");
      if (name.empty() && call_names.count(id)) name = call_names[id];
      std::string head = "Result of " + (name.empty() ? std::string("a function") : name);
      if (!id.empty()) head += " (" + id + ")";
      msg = ojson{{"role", "user"}, {"content", head + ": " + text_of(msg.value("content", ojson()))}};
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace ubatch::chat
