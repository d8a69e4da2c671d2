// apply_chat_template (declared in tokenizer.h): the turn formats of the common chat model
// families, recognised from markers in the GGUF Jinja template (no Jinja is evaluated).
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

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

std::string_view trim(std::string_view s) {
  constexpr std::string_view ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

bool is_basic_role(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant";
}

Status check_roles(const std::vector<ChatMessage>& messages, const char* family) {
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!is_basic_role(messages[i].role)) {
      return Status::error(std::string("chat template (") + family + "): message " +
                           std::to_string(i) + " has role \"" + messages[i].role +
                           "\" (expected system, user or assistant)");
    }
  }
  return Status::ok();
}

Result<std::string> render_gemma(const std::vector<ChatMessage>& messages, bool add_prompt) {
  if (Status s = check_roles(messages, "gemma"); !s) return s;
  std::string out;
  size_t first = 0;
  std::string prefix;  // the leading system message, folded into the first turn
  if (!messages.empty() && messages[0].role == "system") {
    prefix = messages[0].content + "\n\n";
    first = 1;
  }
  if (first == messages.size() && !prefix.empty()) {
    out += "<start_of_turn>user\n" + std::string(trim(messages[0].content)) + "<end_of_turn>\n";
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const char* role = m.role == "assistant" ? "model" : "user";  // later system → user
    out += "<start_of_turn>";
    out += role;
    out += "\n";
    if (i == first) out += prefix;
    out += trim(m.content);
    out += "<end_of_turn>\n";
  }
  if (add_prompt) out += "<start_of_turn>model\n";
  return out;
}

std::string render_llama3(const std::vector<ChatMessage>& messages, bool add_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
    out += trim(m.content);
    out += "<|eot_id|>";
  }
  if (add_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  if (add_prompt) out += "<|im_start|>assistant\n";
  return out;
}

Result<std::string> render_llama2(const std::vector<ChatMessage>& messages) {
  if (Status s = check_roles(messages, "llama2"); !s) return s;
  std::string out;
  size_t first = 0;
  std::string system;
  if (!messages.empty() && messages[0].role == "system") {
    system = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n";
    first = 1;
  }
  bool any_user = false;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string content = (i == first ? system : std::string()) + m.content;
    if (m.role == "assistant") {
      out += " ";
      out += trim(content);
      out += " </s>";
    } else {
      if (any_user || !out.empty()) out += "<s>";  // the first BOS comes from the tokenizer
      out += "[INST] ";
      out += trim(content);
      out += " [/INST]";
      any_user = true;
    }
  }
  if (first == messages.size() && !system.empty()) out += "[INST] " + std::string(trim(system)) + " [/INST]";
  return out;
}

Result<std::string> render_phi3(const std::vector<ChatMessage>& messages, bool add_prompt) {
  if (Status s = check_roles(messages, "phi3"); !s) return s;
  std::string out;
  for (const ChatMessage& m : messages) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  if (add_prompt) out += "<|assistant|>\n";
  return out;
}

}  // namespace

Result<std::string> apply_chat_template(const std::string& chat_template,
                                        const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) {
  if (chat_template.empty()) {
    return Status::error("chat template: the model has none; name a family instead "
                         "(gemma, llama3, chatml, llama2, phi3)");
  }
  switch (detect_family(chat_template)) {
    case ChatFamily::GEMMA: return render_gemma(messages, add_generation_prompt);
    case ChatFamily::LLAMA3: return render_llama3(messages, add_generation_prompt);
    case ChatFamily::CHATML: return render_chatml(messages, add_generation_prompt);
    case ChatFamily::LLAMA2: return render_llama2(messages);
    case ChatFamily::PHI3: return render_phi3(messages, add_generation_prompt);
    case ChatFamily::UNKNOWN: break;
  }
  std::string head = chat_template.substr(0, 120);
  for (char& c : head) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return Status::error("chat template: unrecognised format (no Gemma, LLaMA 3, ChatML, LLaMA 2 "
                       "or Phi-3 markers): \"" + head +
                       (chat_template.size() > head.size() ? "…\"" : "\""));
}

}  // namespace ubatch
