// Chat formatting for `ubatch run --chat` and /v1/chat/completions: messages → the model's
// turn format, as SegmentedText so that only the format's own markup can become special
// tokens (message content is always tokenized as plain text: a user who types
// "<end_of_turn>\n<start_of_turn>model\n" gets those characters, not a forged turn).
//
// The family is recognised from markers in the GGUF Jinja template (no Jinja is evaluated):
// Gemma `<start_of_turn>`, LLaMA 3 `<|start_header_id|>`, ChatML `<|im_start|>`, Phi-3
// `<|user|>` + `<|end|>`, LLaMA 2 `[INST]`. chat_template may also be a family name: "gemma"
// (also "gemma2", "gemma3"), "llama3", "chatml", "llama2", "phi3" — for models whose GGUF
// carries no template (the Gemma 3 270M default model has none: pass "gemma" there).
//
// Rendering rules (the same for every family unless noted; docs/API.md "Chat rendering"):
//  1. Roles: "developer" is read as "system". gemma, llama2 and phi3 know system, user and
//     assistant; llama3 and chatml also take any other role name of 1–64 ASCII letters,
//     digits, '_', '-' or '.' (e.g. "tool", "ipython"), written into the turn header as text.
//     Any other role is an error naming the message and the role.
//  2. Content is inserted as text. gemma, llama3 and llama2 strip leading and trailing
//     whitespace from each message (as their reference templates do); chatml and phi3 keep
//     it verbatim.
//  3. Families without a system turn (gemma always; llama2 after the first position) read
//     system messages as user text: gemma has no system role, so system text is placed in a
//     user turn — leading system messages thereby open the first user turn, followed by the
//     user's own text.
//  4. Consecutive messages with the same role (after rules 1 and 3) form one turn: their
//     non-empty contents joined in order by "\n\n". So several system messages are joined
//     in order, and [system A, system B, user C] renders like [system "A\n\nB", user C].
//  5. Empty content (empty string, null, no text parts) adds no text; a turn with no text
//     is rendered with its markup around nothing.
//  6. With add_generation_prompt, a conversation that ends with an assistant turn is
//     continued: that turn is left open (no end-of-turn marker) and no new turn is started,
//     so the reply continues its text; trailing whitespace of that last message is kept.
//     Otherwise the assistant's turn is opened. Without add_generation_prompt every turn is
//     closed.
//  7. llama2: leading system messages fill the `<<SYS>>` block of the first `[INST]`; the
//     conversation must start with a user or system message (an assistant turn first is an
//     error).
// Formats ({text} is the turn's text; markup parsed for special tokens):
//   gemma   "<start_of_turn>{user|model}\n{text}<end_of_turn>\n"; prompt "<start_of_turn>model\n"
//   llama3  "<|start_header_id|>{role}<|end_header_id|>\n\n{text}<|eot_id|>"; prompt
//           "<|start_header_id|>assistant<|end_header_id|>\n\n"
//   chatml  "<|im_start|>{role}\n{text}<|im_end|>\n"; prompt "<|im_start|>assistant\n"
//   llama2  "[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] …"
//           (the prompt is the trailing " [/INST]" itself)
//   phi3    "<|{role}|>\n{text}<|end|>\n"; prompt "<|assistant|>\n"
// The output has no BOS: tokenize it with Tokenizer::tokenize(text, add_bos_default()).
// Errors (Result): an empty template, a template of no known family (the message quotes
// its start), a role the family does not know (rule 1), llama2 starting with an assistant.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "tokenizer/segmented_text.h"

namespace ubatch {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", … (rule 1)
  std::string content;  // UTF-8 text ("" for none)
};

// Messages → the prompt in the model's turn format, markup and content as segments.
Result<SegmentedText> render_chat(const std::string& chat_template, const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt);

// render_chat's text alone (for display and logs; tokenize render_chat's result instead:
// this string loses which parts are markup).
Result<std::string> apply_chat_template(const std::string& chat_template, const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt);

}  // namespace ubatch
