// render_chat (declared in chat_template.h): the turn formats of the common chat model
// families, recognised from markers in the GGUF Jinja template (no Jinja is evaluated).
// Messages are first normalised into turns (roles checked, system text placed, same-role
// runs joined) by the rules listed in the header, then written in the family's format with
// markup and content as separate segments.
#include "tokenizer/chat_template.h"

#include <string>
#include <string_view>

namespace ubatch {

namespace {

enum class ChatFamily { GEMMA, LLAMA3, CHATML, LLAMA2, PHI3, UNKNOWN };

ChatFamily family_by_name(std::string_view name) {
  if (name == "gemma" || name == "gemma2" || name == "gemma3") return ChatFamily::GEMMA;
  if (name == "llama3") return ChatFamily::LLAMA3;
  if (name == "chatml") return ChatFamily::CHATML;
  if (name == "llama2") return ChatFamily::LLAMA2;
  if (name == "phi3") return ChatFamily::PHI3;
  return ChatFamily::UNKNOWN;
}

ChatFamily detect_family(std::string_view tmpl) {
  const ChatFamily by_name = family_by_name(tmpl);
  if (by_name != ChatFamily::UNKNOWN) return by_name;
  auto has = [&](std::string_view marker) { return tmpl.find(marker) != std::string_view::npos; };
  if (has("<start_of_turn>")) return ChatFamily::GEMMA;
  if (has("<|start_header_id|>")) return ChatFamily::LLAMA3;
  if (has("<|im_start|>")) return ChatFamily::CHATML;
  if (has("<|user|>") && has("<|end|>")) return ChatFamily::PHI3;
  if (has("[INST]")) return ChatFamily::LLAMA2;
  return ChatFamily::UNKNOWN;
}

const char* family_name(ChatFamily f) {
  switch (f) {
    case ChatFamily::GEMMA: return "gemma";
    case ChatFamily::LLAMA3: return "llama3";
    case ChatFamily::CHATML: return "chatml";
    case ChatFamily::LLAMA2: return "llama2";
    case ChatFamily::PHI3: return "phi3";
    case ChatFamily::UNKNOWN: break;
  }
  return "unknown";
}

constexpr std::string_view kSpace = " \t\n\r\f\v";

std::string_view trim_left(std::string_view s) {
  const size_t b = s.find_first_not_of(kSpace);
  return b == std::string_view::npos ? std::string_view() : s.substr(b);
}

std::string_view trim(std::string_view s) {
  s = trim_left(s);
  const size_t e = s.find_last_not_of(kSpace);
  return e == std::string_view::npos ? std::string_view() : s.substr(0, e + 1);
}

bool is_basic_role(std::string_view role) { return role == "system" || role == "user" || role == "assistant"; }

// A role name the open formats (llama3, chatml) write into their turn header.
bool is_role_name(std::string_view role) {
  if (role.empty() || role.size() > 64) return false;
  for (char c : role) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// Printable form of a role for an error message (bounded, control characters escaped).
std::string quote_role(std::string_view role) {
  std::string out = "\"";
  for (size_t i = 0; i < role.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(role[i]);
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (role.size() > 64) out += "…";
  return out + "\"";
}

// One turn of the rendered conversation: consecutive messages of one role (rule 4).
struct Turn {
  std::string role;
  std::vector<std::string_view> parts;  // non-empty message texts, in order (views into the messages)
};

bool trims_content(ChatFamily f) {
  return f == ChatFamily::GEMMA || f == ChatFamily::LLAMA3 || f == ChatFamily::LLAMA2;
}

// Rules 1–5 of the header: messages → turns. *continued: the last turn is an assistant
// turn to continue (rule 6).
Result<std::vector<Turn>> to_turns(ChatFamily family, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt, bool* continued) {
  std::vector<std::string> roles(messages.size());
  const bool open_roles = family == ChatFamily::LLAMA3 || family == ChatFamily::CHATML;
  bool seen_non_system = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    std::string role = messages[i].role == "developer" ? "system" : messages[i].role;
    if (!is_basic_role(role) && !(open_roles && is_role_name(role))) {
      return Status::error("messages[" + std::to_string(i) + "] has role " + quote_role(messages[i].role) +
                           ": the " + family_name(family) + " chat format takes " +
                           (open_roles ? "system, user, assistant, or a name of 1-64 letters, digits, '_', '-', '.'"
                                       : "system, user or assistant (or developer, read as system)"));
    }
    if (role == "system" && (family == ChatFamily::GEMMA || (family == ChatFamily::LLAMA2 && seen_non_system)))
      role = "user";  // rule 3
    if (role != "system") seen_non_system = true;
    roles[i] = std::move(role);
  }
  *continued = add_generation_prompt && !roles.empty() && roles.back() == "assistant";
  std::vector<Turn> turns;
  for (size_t i = 0; i < messages.size(); ++i) {
    std::string_view text = messages[i].content;
    if (trims_content(family)) {
      const bool keep_trailing = *continued && i + 1 == messages.size();
      text = keep_trailing ? trim_left(text) : trim(text);
    }
    if (turns.empty() || turns.back().role != roles[i]) turns.push_back(Turn{roles[i], {}});
    if (!text.empty()) turns.back().parts.push_back(text);
  }
  return turns;
}

// The turn's text: its parts joined by "\n\n" (rule 4), all content.
void append_text(SegmentedText& out, const Turn& t) {
  for (size_t k = 0; k < t.parts.size(); ++k) {
    if (k > 0) out.content("\n\n");
    out.content(t.parts[k]);
  }
}

SegmentedText render_gemma(const std::vector<Turn>& turns, bool add_prompt, bool continued) {
  SegmentedText out;
  for (size_t i = 0; i < turns.size(); ++i) {
    out.markup(turns[i].role == "assistant" ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
    append_text(out, turns[i]);
    if (!(continued && i + 1 == turns.size())) out.markup("<end_of_turn>\n");
  }
  if (add_prompt && !continued) out.markup("<start_of_turn>model\n");
  return out;
}

SegmentedText render_llama3(const std::vector<Turn>& turns, bool add_prompt, bool continued) {
  SegmentedText out;
  for (size_t i = 0; i < turns.size(); ++i) {
    out.markup("<|start_header_id|>");
    out.content(turns[i].role);  // validated name; plain text
    out.markup("<|end_header_id|>\n\n");
    append_text(out, turns[i]);
    if (!(continued && i + 1 == turns.size())) out.markup("<|eot_id|>");
  }
  if (add_prompt && !continued) out.markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out;
}

SegmentedText render_chatml(const std::vector<Turn>& turns, bool add_prompt, bool continued) {
  SegmentedText out;
  for (size_t i = 0; i < turns.size(); ++i) {
    out.markup("<|im_start|>");
    out.content(turns[i].role);
    out.markup("\n");
    append_text(out, turns[i]);
    if (!(continued && i + 1 == turns.size())) out.markup("<|im_end|>\n");
  }
  if (add_prompt && !continued) out.markup("<|im_start|>assistant\n");
  return out;
}

SegmentedText render_phi3(const std::vector<Turn>& turns, bool add_prompt, bool continued) {
  SegmentedText out;
  for (size_t i = 0; i < turns.size(); ++i) {
    out.markup("<|" + turns[i].role + "|>\n");  // system, user or assistant
    append_text(out, turns[i]);
    if (!(continued && i + 1 == turns.size())) out.markup("<|end|>\n");
  }
  if (add_prompt && !continued) out.markup("<|assistant|>\n");
  return out;
}

Result<SegmentedText> render_llama2(const std::vector<Turn>& turns, bool continued) {
  SegmentedText out;
  size_t i = 0;
  const Turn* system = nullptr;
  if (!turns.empty() && turns[0].role == "system") system = &turns[i++];
  if (i < turns.size() && turns[i].role == "assistant")
    return Status::error("the llama2 chat format needs a user message before the first assistant message");
  auto open_inst = [&](bool first) {
    if (!first) out.markup("<s>");  // the first BOS comes from the tokenizer
    out.markup("[INST] ");
    if (first && system) {
      out.markup("<<SYS>>\n");
      append_text(out, *system);
      out.markup("\n<</SYS>>\n\n");
    }
  };
  if (i == turns.size() && system) {  // only a system message: it is the whole instruction
    open_inst(true);
    out.markup(" [/INST]");
  }
  bool first = true;
  for (; i < turns.size(); ++i) {
    if (turns[i].role == "user") {
      open_inst(first);
      first = false;
      append_text(out, turns[i]);
      out.markup(" [/INST]");
    } else {  // assistant (turns alternate: same roles were joined)
      const bool open = continued && i + 1 == turns.size();
      if (open && turns[i].parts.empty()) break;  // nothing to continue: the reply starts after " [/INST]"
      out.markup(" ");
      append_text(out, turns[i]);
      if (!open) out.markup(" </s>");
    }
  }
  return out;
}

}  // namespace

Result<SegmentedText> render_chat(const std::string& chat_template, const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt) {
  if (chat_template.empty()) {
    return Status::error("chat template: the model has none; name a family instead "
                         "(gemma, llama3, chatml, llama2, phi3)");
  }
  const ChatFamily family = detect_family(chat_template);
  if (family == ChatFamily::UNKNOWN) {
    std::string head = chat_template.substr(0, 120);
    for (char& c : head) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    return Status::error("chat template: unrecognised format (no Gemma, LLaMA 3, ChatML, LLaMA 2 "
                         "or Phi-3 markers): \"" + head +
                         (chat_template.size() > head.size() ? "…\"" : "\""));
  }
  bool continued = false;
  Result<std::vector<Turn>> turns = to_turns(family, messages, add_generation_prompt, &continued);
  if (!turns) return turns.status();
  switch (family) {
    case ChatFamily::GEMMA: return render_gemma(*turns, add_generation_prompt, continued);
    case ChatFamily::LLAMA3: return render_llama3(*turns, add_generation_prompt, continued);
    case ChatFamily::CHATML: return render_chatml(*turns, add_generation_prompt, continued);
    case ChatFamily::LLAMA2: return render_llama2(*turns, continued);
    case ChatFamily::PHI3: return render_phi3(*turns, add_generation_prompt, continued);
    case ChatFamily::UNKNOWN: break;
  }
  return Status::error("chat template: internal: no renderer");
}

Result<std::string> apply_chat_template(const std::string& chat_template, const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) {
  Result<SegmentedText> r = render_chat(chat_template, messages, add_generation_prompt);
  if (!r) return r.status();
  return std::move(r.value().text);
}

}  // namespace ubatch
