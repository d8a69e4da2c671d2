// Tokenizers built from a GGUF vocabulary (`tokenizer.ggml.*` metadata).
//
// - SPM (`tokenizer.ggml.model` = "llama"): SentencePiece-style merging of pieces by score
//   (Kudo & Richardson 2018), byte fallback <0xNN> for bytes not in the vocabulary, a space
//   prefix per `tokenizer.ggml.add_space_prefix`, spaces as U+2581.
// - BPE (`tokenizer.ggml.model` = "gpt2"): GPT-2 byte-level BPE (Radford et al. 2019) over
//   pre-tokenized chunks; the pre-tokenizer regex is chosen by `tokenizer.ggml.pre`
//   (gpt-2, falcon, deepseek-coder, starcoder, llama3, …) and run with PCRE2; merges from
//   `tokenizer.ggml.merges` ranked by order.
// Special (control / user-defined) tokens are recognised in text only when parse_special.
// Thread-safe for concurrent const use after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"

namespace ubatch {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Errors: missing or inconsistent tokenizer metadata, unknown model or pre-tokenizer.
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);

  virtual int32_t n_vocab() const = 0;
  // Ids of special tokens, -1 where the vocabulary has none.
  virtual int32_t bos() const = 0;
  virtual int32_t eos() const = 0;
  virtual int32_t eot() const = 0;  // end of turn (Gemma <end_of_turn>, LLaMA 3 <|eot_id|>)
  // True for tokens that end generation (eos, eot and other end-of-generation tokens).
  virtual bool is_eog(int32_t id) const = 0;
  // Whether a BOS is prepended by default (`tokenizer.ggml.add_bos_token`).
  virtual bool add_bos_default() const = 0;

  // Text → ids. add_bos prepends BOS (when the vocabulary has one). Invalid UTF-8 is
  // tokenized byte by byte (it never fails).
  virtual std::vector<int32_t> tokenize(std::string_view text, bool add_bos,
                                        bool parse_special) const = 0;

  // Bytes one token stands for (may be part of a UTF-8 character). Control tokens render as
  // their text only when `special`; otherwise as "". Out-of-range ids give "".
  virtual std::string token_to_piece(int32_t id, bool special = false) const = 0;

  // Ids → text; removes the SPM leading space that tokenization added when
  // remove_space_prefix. Output may end in an incomplete UTF-8 sequence only if the ids do.
  virtual std::string detokenize(const std::vector<int32_t>& ids, bool special = false,
                                 bool remove_space_prefix = true) const = 0;

  // `tokenizer.chat_template` metadata or "" when absent.
  virtual const std::string& chat_template() const = 0;
};

// Holds back bytes of an incomplete UTF-8 character so a token stream never emits half of
// one: push() returns the longest complete prefix of everything pushed so far; flush() returns
// what is left (invalid or truncated sequences become U+FFFD).
class Utf8StreamDecoder {
 public:
  std::string push(std::string_view bytes);
  std::string flush();

 private:
  std::string pending_;
};

// Chat formatting for `--chat` and /v1/chat/completions.
struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

// Renders messages in the model's turn format, chosen by recognising the family of the
// GGUF chat template (Gemma `<start_of_turn>`, LLaMA 3 `<|start_header_id|>`, ChatML
// `<|im_start|>`, LLaMA 2 `[INST]`, Phi-3 `<|user|>`); add_generation_prompt opens the
// assistant turn. Errors: a template of no known family (the message names it).
Result<std::string> apply_chat_template(const std::string& chat_template,
                                        const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt);

}  // namespace ubatch
