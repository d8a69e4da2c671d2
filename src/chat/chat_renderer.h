// A chat request → the prompt text the model sees, as SegmentedText (only the chat format's
// own markup may become special tokens; message content, tool definitions, tool arguments
// and results are plain text). This is where the server and `ubatch run --chat` meet the
// chat format; it also says which tool-call format replies are parsed with.
//
// Rendering: the model's Jinja template with the engine of src/template/ (as Hugging Face
// transformers renders it: messages, tools, add_generation_prompt, bos_token, eos_token and
// chat_template_kwargs; a conversation that ends with an assistant message is continued,
// transformers' continue_final_message); the GGUF's `tokenizer.chat_template.tool_use`, where
// it has one, for requests with tools. The hand-written families of tokenizer/chat_template.h
// (gemma, llama3, chatml, llama2, phi3) render when the source is a family name, or a template
// that does not parse (recognised by its markers). A format that renders no tools (the
// families; templates whose output does not change with `tools`, e.g. SmolLM2's) uses the
// generic tool format (generic_tools.h): the tools go into the system turn, past calls and
// results are written as text. The log line at load says which rendering is used
// (describe()).
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
  ~ChatRenderer();
  static Result<std::shared_ptr<const ChatRenderer>> create(const std::string& source,
                                                            const std::string& tool_use_source,
                                                            const std::string& bos_text, const std::string& eos_text);

  // The prompt. Errors (a 400 for the server): a role the family does not know, a template
  // error (its raise_exception message verbatim, or the engine's error with its position).
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
  // Prompts are rendered by the model's Jinja template (else by a hand-written family).
  bool uses_template() const { return jinja_ != nullptr; }
  // The template thinks: it writes <think>…</think> blocks (reasoning.h, template_thinks).
  bool thinks() const { return thinks_; }
  // The template writes gpt-oss's harmony channels (harmony.h, template_is_harmony). Its
  // assistant messages' reasoning_content is also passed as `thinking`, the field gpt-oss's
  // template renders on the analysis channel.
  bool harmony() const { return harmony_; }

 private:
  struct Jinja;
  ChatRenderer() = default;
  std::unique_ptr<Jinja> jinja_;  // null: a hand-written family renders
  bool native_tools_ = false;     // the template renders `tools` itself
  bool thinks_ = false;           // the template writes reasoning blocks
  bool harmony_ = false;          // the template writes harmony channels
  std::string family_;  // the hand-written family's name or marker source
  std::string bos_, eos_;
  const ToolFormat* format_ = nullptr;
  std::string describe_;
};

}  // namespace ubatch::chat
