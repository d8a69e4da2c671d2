// ChatRenderer (chat_renderer.h) over the hand-written families.
#include "chat/chat_renderer.h"

#include "chat/generic_tools.h"
#include "tokenizer/chat_template.h"

namespace ubatch::chat {

using ojson = nlohmann::ordered_json;

Result<std::shared_ptr<const ChatRenderer>> ChatRenderer::create(const std::string& source,
                                                                 const std::string& tool_use_source,
                                                                 const std::string& bos_text,
                                                                 const std::string& eos_text) {
  (void)tool_use_source;
  std::shared_ptr<ChatRenderer> r(new ChatRenderer());
  r->family_ = source;
  r->bos_ = bos_text;
  r->eos_ = eos_text;
  r->format_ = &generic_tool_format();
  Result<std::string> probe = apply_chat_template(source, {{"user", "hi"}}, true);
  if (!probe) return probe.status();
  r->describe_ = "hand-written chat family (no Jinja template rendering); tool calls in the generic format";
  return std::shared_ptr<const ChatRenderer>(r);
}

Result<SegmentedText> ChatRenderer::render(const ChatRenderInput& in) const {
  // The families render no tools: calls and results in the history are written as text (and
  // the tools, when given, described in the system turn) whatever tool_choice says.
  const ojson messages = generic_tools_messages(in.messages, in.tools);
  std::vector<ChatMessage> flat;
  for (const ojson& m : messages) {
    ChatMessage cm;
    cm.role = m.value("role", "");
    if (auto c = m.find("content"); c != m.end() && c->is_string()) cm.content = c->get<std::string>();
    flat.push_back(std::move(cm));
  }
  return render_chat(family_, flat, in.add_generation_prompt);
}

}  // namespace ubatch::chat
