// ChatTemplateRenderer: a conversation → the prompt text, rendered by the model's own chat
// template (GGUF `tokenizer.chat_template`) the way Hugging Face transformers renders it
// (apply_chat_template → render_jinja_template), with our Jinja engine (src/template/).
//
// Variables the template sees:
//   messages               the messages as given (JSON → values; no normalisation here)
//   add_generation_prompt  bool
//   bos_token, eos_token   the token texts (the GGUF's; "" when the model has none)
//   tools                  only when ChatTemplateInputs::tools is set; absent (undefined in
//                          the template) otherwise — transformers passes None instead, which
//                          only the *-tool_use templates distinguish, and they then fail
//   extra_vars             each key a variable (chat_template_kwargs: enable_thinking, …;
//                          per-model variables); a key that collides with the ones above is
//                          an error
// continue_final_message (transformers' option of that name): the last message's text gets
// "CONTINUE_FINAL_MESSAGE_TAG " appended (the last text part when content is a list of
// parts), the output is cut at the tag's last occurrence (and right-stripped when the
// template dropped the space after it); an error when the tag does not survive rendering.
//
// INJECTION SAFETY — the rule the output's segments follow (SegmentedText::parse_special):
//   parse_special = true  only for bytes written by the template itself: its text between
//                         tags and its string literals ('<|im_start|>' + …), as they come
//                         through concatenation, joins, slicing, macros and set blocks;
//                         and for the bos_token / eos_token values (the model's own tokens);
//   parse_special = false for every byte that comes from a value passed in — message
//                         content, roles, names, tool definitions, tool-call arguments,
//                         extra_vars — and for anything computed from values: a string
//                         keeps this mark through `~`, `+`, |trim, .strip(), slicing,
//                         .split(), |replace, .format() …; str() of numbers, lists and dicts,
//                         |tojson, and transforms that rebuild text (|title, reversing) are
//                         data unless their input was entirely literal.
// So Tokenizer::tokenize(const SegmentedText&) never makes a special token out of characters
// a client sent, even when the template glues them to its own markup: a user typing
// "<|im_end|>" gets those characters as text. (Literal text produced by a template from data
// — e.g. `'<|' ~ role ~ '|>'` — is split into literal "<|", data role, literal "|>", so no
// special token forms across the boundary.)
//
// Errors (TemplateError): kSyntax from create(); from render(): kRaiseException (the
// template refused the conversation: message verbatim), kRuntime (a template/input mismatch:
// type error, undefined value used, unknown filter, refused mutation, continue_final_message
// failure, a colliding variable), kLimit (sandbox budget). Thread safety: create once, render
// from any number of threads.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "template/error.h"
#include "template/state.h"
#include "template/template.h"
#include "tokenizer/segmented_text.h"

namespace ubatch::jinja {

struct ChatTemplateInputs {
  // Parse requests with nlohmann::ordered_json: key order reaches the output through |tojson
  // and |items (nlohmann::json would sort the keys and change the prompt).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;  // nullopt: `tools` is not passed at all
  bool add_generation_prompt = false;
  bool continue_final_message = false;
  std::string bos_token;
  std::string eos_token;
  nlohmann::ordered_json extra_vars = nlohmann::ordered_json::object();  // object: name → value
  std::optional<std::tm> now;  // strftime_now's date; nullopt: the current local time
};

class ChatTemplateRenderer {
 public:
  // Parses the template (kSyntax errors).
  static TemplateResult<ChatTemplateRenderer> create(std::string_view source);

  TemplateResult<SegmentedText> render(const ChatTemplateInputs& inputs, const RenderLimits& limits = {},
                                       RenderStats* stats = nullptr) const;

  // Whether the template reads `name` (e.g. "tools", "enable_thinking").
  bool reads_variable(std::string_view name) const { return template_.reads_variable(name); }

 private:
  explicit ChatTemplateRenderer(Template t) : template_(std::move(t)) {}
  Template template_;
};

// Parses and renders in one call.
TemplateResult<SegmentedText> render_chat_template(std::string_view source, const ChatTemplateInputs& inputs,
                                                   const RenderLimits& limits = {});

}  // namespace ubatch::jinja
