// ChatRenderer (chat_renderer.h): the model's Jinja template through the engine of
// src/template/ (ChatTemplateRenderer), or a hand-written family when the source is a family
// name or does not parse as a template.
#include "chat/chat_renderer.h"
#include "chat/reasoning.h"

#include <optional>

#include <fmt/format.h>

#include "chat/generic_tools.h"
#include "chat/harmony.h"
#include "template/chat_template_renderer.h"
#include "tokenizer/chat_template.h"

namespace ubatch::chat {

using ojson = nlohmann::ordered_json;

namespace {

bool is_family_name(const std::string& s) {
  for (const char* f : {"gemma", "gemma2", "gemma3", "llama3", "chatml", "llama2", "phi3"})
    if (s == f) return true;
  return false;
}

std::string one_line(std::string s, size_t n = 200) {
  if (s.size() > n) s = s.substr(0, n) + "…";
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// Whether the template's output changes when a tool is passed: templates that never render
// `tools` (SmolLM2's, Gemma 3's) get the generic format.
bool renders_tools(const jinja::ChatTemplateRenderer& t, const std::string& bos, const std::string& eos) {
  if (!t.reads_variable("tools")) return false;
  jinja::ChatTemplateInputs in;
  in.messages = ojson::parse(R"([{"role": "user", "content": "What is the weather?"}])");
  in.add_generation_prompt = true;
  in.bos_token = bos;
  in.eos_token = eos;
  auto without = t.render(in);
  in.tools = ojson::parse(R"([{"type": "function", "function": {"name": "probe_tool_x7",
    "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}])");
  auto with = t.render(in);
  if (!with) return false;
  return !without || with->text != without->text;
}

}  // namespace

struct ChatRenderer::Jinja {
  jinja::ChatTemplateRenderer main;
  std::optional<jinja::ChatTemplateRenderer> tool_use;  // tokenizer.chat_template.tool_use
};

ChatRenderer::~ChatRenderer() = default;

Result<std::shared_ptr<const ChatRenderer>> ChatRenderer::create(const std::string& source,
                                                                 const std::string& tool_use_source,
                                                                 const std::string& bos_text,
                                                                 const std::string& eos_text) {
  std::shared_ptr<ChatRenderer> r(new ChatRenderer());
  r->family_ = source;
  r->bos_ = bos_text;
  r->eos_ = eos_text;
  r->format_ = &generic_tool_format();
  if (source.empty()) return Status::error("chat template: the model has none; name a family with --chat-template");
  std::string why_family;
  if (!is_family_name(source)) {
    auto t = jinja::ChatTemplateRenderer::create(source);
    if (t) {
      auto j = std::make_unique<Jinja>(Jinja{std::move(t.value()), std::nullopt});
      if (!tool_use_source.empty()) {
        auto tu = jinja::ChatTemplateRenderer::create(tool_use_source);
        if (tu) j->tool_use = std::move(tu.value());
      }
      const jinja::ChatTemplateRenderer& for_tools = j->tool_use ? *j->tool_use : j->main;
      r->native_tools_ = renders_tools(for_tools, bos_text, eos_text);
      if (r->native_tools_) r->format_ = &detect_tool_format(j->tool_use ? tool_use_source : source);
      r->describe_ = fmt::format("the model's Jinja template{}; tool calls in the {} format{}",
                                 j->tool_use ? " (and its tool_use template for requests with tools)" : "",
                                 r->format_->id,
                                 r->native_tools_ ? "" : " (the template renders no tools: they are described in "
                                                          "the system turn)");
      r->thinks_ = template_thinks(source) || template_thinks(tool_use_source);
      if (r->thinks_) r->describe_ += "; it thinks (<think> blocks)";
      r->harmony_ = template_is_harmony(source) || template_is_harmony(tool_use_source);
      if (r->harmony_) r->describe_ += "; harmony channels (analysis: reasoning, final: content, calls to functions.*)";
      r->jinja_ = std::move(j);
      return std::shared_ptr<const ChatRenderer>(r);
    }
    why_family = "the template does not parse (" + one_line(t.error().describe()) + "); ";
  }
  Result<std::string> probe = apply_chat_template(source, {{"user", "hi"}}, true);
  if (!probe) return Status::error(why_family + probe.message());
  r->describe_ = why_family + "hand-written chat family (fallback); tool calls in the generic format";
  return std::shared_ptr<const ChatRenderer>(r);
}

Result<SegmentedText> ChatRenderer::render(const ChatRenderInput& in) const {
  const bool native = jinja_ && native_tools_;
  // Formats that render no tools: calls and results in the history are written as text (and
  // the tools, when given, described in the system turn) whatever tool_choice says.
  ojson messages = native ? in.messages : generic_tools_messages(in.messages, in.tools);
  // Harmony templates (gpt-oss) read an assistant's earlier reasoning as `thinking` (rendered
  // on the analysis channel, e.g. before its tool calls): reasoning_content is passed so.
  if (harmony_)
    for (ojson& m : messages)
      if (m.is_object() && m.value("role", "") == "assistant" && !m.contains("thinking"))
        if (auto rc = m.find("reasoning_content"); rc != m.end() && rc->is_string()) m["thinking"] = *rc;
  // An empty trailing assistant message is the same as none; another one is continued.
  if (messages.size() > 1 && messages.back().value("role", "") == "assistant" &&
      messages.back().value("content", ojson("")) == ojson("") && !messages.back().contains("tool_calls"))
    messages.erase(messages.size() - 1);
  const bool continue_last = !messages.empty() && messages.back().value("role", "") == "assistant";
  if (!jinja_) {
    std::vector<ChatMessage> flat;
    for (const ojson& m : messages) {
      ChatMessage cm;
      cm.role = m.value("role", "");
      if (auto c = m.find("content"); c != m.end() && c->is_string()) cm.content = c->get<std::string>();
      flat.push_back(std::move(cm));
    }
    return render_chat(family_, flat, in.add_generation_prompt);
  }
  jinja::ChatTemplateInputs ji;
  ji.messages = messages;
  if (native && !in.tools.empty()) {
    ojson tools = ojson::array();
    for (const ToolDef& t : in.tools) tools.push_back(t.raw);
    ji.tools = std::move(tools);
  }
  ji.add_generation_prompt = in.add_generation_prompt && !continue_last;
  ji.continue_final_message = continue_last;
  ji.bos_token = bos_;
  ji.eos_token = eos_;
  ji.extra_vars = in.kwargs;
  const jinja::ChatTemplateRenderer& t = (!in.tools.empty() && jinja_->tool_use) ? *jinja_->tool_use : jinja_->main;
  auto out = t.render(ji);
  if (!out) return Status::error(out.error().describe());
  return std::move(out.value());
}

}  // namespace ubatch::chat
