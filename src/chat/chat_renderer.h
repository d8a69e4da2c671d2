// A chat request → the prompt text the model sees, as SegmentedText (only the chat format's
// own markup may become special tokens; message content, tool definitions, tool arguments
// and results are plain text). This is where the server and `ubatch run --chat` meet the
// chat format; it also says which tool-call format replies are parsed with.
//
// Rendering: the hand-written families of tokenizer/chat_template.h (gemma, llama3, chatml,
// llama2, phi3), chosen from the template's markers or by name. They render no tools, so tool
// requests use the generic tool format (generic_tools.h): the tools go into the system turn,
// past calls and results are written as text. The log line at load says which rendering is
// used (describe()).
//
// Input messages are the OpenAI shape after the server's checks (chat_messages.h): string
// contents, assistant tool_calls with arguments as JSON values, `tool` messages.
// Thread-safe (const use).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_format.h"
#include "chat/tool_types.h"
#include "common/status.h"
#include "tokenizer/segmented_text.h"

namespace ubatch::chat {

struct ChatRenderInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::vector<ToolDef> tools;                                        // passed to the template only when non-empty
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs (template variables)
  bool add_generation_prompt = true;  // a conversation ending with an assistant message is continued instead
};

class ChatRenderer {
 public:
  // source: a family name or a template's text (from the GGUF or --chat-template FILE).
  // tool_use_source: the GGUF's `tokenizer.chat_template.tool_use` ("" none). bos/eos: the
  // token texts passed as bos_token/eos_token. Errors: an empty source, a template of no
  // known family.
  static Result<std::shared_ptr<const ChatRenderer>> create(const std::string& source,
                                                            const std::string& tool_use_source,
                                                            const std::string& bos_text, const std::string& eos_text);

  // The prompt. Errors (a 400 for the server): a role the format does not know, a template
  // error (its raise_exception message).
  Result<SegmentedText> render(const ChatRenderInput& in) const;

  // Whether to prepend BOS when tokenizing `prompt`: the tokenizer's default, unless the
  // template already wrote the BOS text at the start (no double BOS).
  bool add_bos(const SegmentedText& prompt, bool tokenizer_default) const {
    return tokenizer_default && !(!bos_.empty() && prompt.text.compare(0, bos_.size(), bos_) == 0);
  }

  // The format replies with tool calls are parsed in (generic when the template renders no tools).
  const ToolFormat& tool_format() const { return *format_; }
  // One line for the log: how prompts are rendered.
  const std::string& describe() const { return describe_; }

 private:
  ChatRenderer() = default;
  std::string family_;  // the hand-written family's name or marker source
  std::string bos_, eos_;
  const ToolFormat* format_ = nullptr;
  std::string describe_;
};

}  // namespace ubatch::chat
