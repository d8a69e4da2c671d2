// Tokenizers built from a GGUF vocabulary (`tokenizer.ggml.*` metadata).
//
// - SPM (`tokenizer.ggml.model` = "llama"): SentencePiece-style merging of pieces by score
//   (Kudo & Richardson 2018), byte fallback <0xNN> for bytes not in the vocabulary, a space
//   prefix per `tokenizer.ggml.add_space_prefix`, spaces as U+2581.
// - BPE (`tokenizer.ggml.model` = "gpt2"): GPT-2 byte-level BPE (Radford et al. 2019) over
//   pre-tokenized chunks; the pre-tokenizer regex is chosen by `tokenizer.ggml.pre`
//   (gpt-2, falcon, deepseek-coder, starcoder, llama3, …) and run with PCRE2; merges from
//   `tokenizer.ggml.merges` ranked by order.
// - WordPiece (`tokenizer.ggml.model` = "bert"): BERT's basic tokenization (lower case, accents
//   stripped, punctuation and CJK ideographs split off) and greedy longest-match pieces
//   (wpm.h); BOS is [CLS], EOS [SEP].
// Special tokens in text: control (and unknown) tokens are recognised only when
// parse_special; user-defined tokens (token_type 4, e.g. Gemma's "\n\n", runs of spaces,
// "<h1>") are always recognised, as SentencePiece and the reference implementation do —
// they are atomic pieces of the vocabulary, not markup. Matching is leftmost-longest.
// Thread-safe for concurrent const use after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "tokenizer/segmented_text.h"

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
  // End of turn: `tokenizer.ggml.eot_token_id`, else the first special (CONTROL or
  // USER_DEFINED) token of <|eot_id|>, <end_of_turn>, <|im_end|>, <|end|>, <|EOT|>, <EOT>,
  // <|end_of_turn|>.
  virtual int32_t eot() const = 0;
  // End of message (Llama 3.1 tool calls): `tokenizer.ggml.eom_token_id`, else a special
  // <|eom_id|>.
  virtual int32_t eom() const = 0;
  // True for tokens that end generation: eos, eot, eom, and every special (CONTROL or
  // USER_DEFINED) token spelled <|eot_id|>, <|eom_id|>, <|im_end|>, <end_of_turn>, <|end|>,
  // <|endoftext|>, <|end_of_text|>, <|EOT|>, <EOT>, <|end_of_turn|>, <|return|> or <|call|>.
  // An ordinary (NORMAL) token with such a text is not one (Qwen's `</s>`, 128247, is text).
  // The scheduler stops a request at the first of these it samples (unless ignore_eos).
  virtual bool is_eog(int32_t id) const = 0;
  // All ids for which is_eog holds, ascending.
  virtual std::vector<int32_t> eog_ids() const = 0;
  // `tokenizer.ggml.model`: "llama" (SPM), "gpt2" (byte-level BPE) or "bert" (WordPiece).
  virtual const std::string& model_name() const = 0;
  // The BPE pre-tokenizer in use (`tokenizer.ggml.pre`, "default" when absent); "" otherwise.
  virtual const std::string& pre_tokenizer() const = 0;
  // Whether a BOS is prepended by default (`tokenizer.ggml.add_bos_token`).
  virtual bool add_bos_default() const = 0;
  // Whether an EOS should follow a prompt (`tokenizer.ggml.add_eos_token`); tokenize() never
  // appends it, callers that want it push eos().
  virtual bool add_eos_default() const { return false; }
  // Padding token (`tokenizer.ggml.padding_token_id`), -1 where none.
  virtual int32_t pad() const { return -1; }
  // Id of the token whose piece is exactly `text` (as stored in the vocabulary: SPM pieces
  // spell spaces as U+2581, BPE pieces are in the GPT-2 byte alphabet), -1 if none.
  virtual int32_t token_id(std::string_view text) const { (void)text; return -1; }

  // Text → ids. add_bos prepends BOS (when the vocabulary has one). Invalid UTF-8 is
  // tokenized byte by byte (it never fails). SPM adds the space prefix (when
  // `add_space_prefix`) to the text at the start and after each special token.
  virtual std::vector<int32_t> tokenize(std::string_view text, bool add_bos,
                                        bool parse_special) const = 0;

  // Text in segments → ids: control tokens are recognised only inside segments with
  // parse_special, and special-token text (control or user-defined) is matched only when it
  // lies inside one segment (so a segment's text can never complete or cut a token of its
  // neighbour). Plain text between matched tokens is tokenized as one run across segment
  // boundaries (its segmentation never yields control tokens), so the ids equal
  // tokenize(text.text, add_bos, true) whenever the plain-text segments hold no
  // special-token text and no special-token text straddles a boundary.
  virtual std::vector<int32_t> tokenize(const SegmentedText& text, bool add_bos) const = 0;

  // Bytes one token stands for (may be part of a UTF-8 character). Control tokens render as
  // their text only when `special`; otherwise as "". Unknown-type tokens render as U+FFFD
  // unless `special`. Out-of-range ids give "".
  virtual std::string token_to_piece(int32_t id, bool special = false) const = 0;

  // The most bytes of text one token stands for: the longest token_to_piece(id, true) (at
  // least 4 where the unknown token stands in for a character). Every byte of a text is
  // covered by one token, so a text of B bytes tokenizes to at least ceil(B / max_piece_bytes())
  // tokens (BOS and space prefixes only add). 0 where no bound holds: a vocabulary with neither
  // a token for every byte nor an unknown token drops the bytes it cannot spell.
  virtual size_t max_piece_bytes() const { return 0; }

  // Ids → text; removes the SPM leading space that tokenization added when
  // remove_space_prefix. Output may end in an incomplete UTF-8 sequence only if the ids do.
  virtual std::string detokenize(const std::vector<int32_t>& ids, bool special = false,
                                 bool remove_space_prefix = true) const = 0;

  // `tokenizer.chat_template` metadata or "" when absent.
  virtual const std::string& chat_template() const = 0;
  // `tokenizer.chat_template.tool_use` (the template for requests with tools, where a model
  // ships one) or "" when absent.
  virtual const std::string& chat_template_tool_use() const {
    static const std::string none;
    return none;
  }
};

// Holds back bytes of an incomplete UTF-8 character so a token stream never emits half of
// one: push() returns the longest complete prefix of everything pushed so far; flush() returns
// what is left (invalid or truncated sequences become U+FFFD). Output is always valid UTF-8:
// bytes that can never start or continue a character become U+FFFD as soon as push() sees
// them (one per maximal ill-formed subpart, Unicode §3.9, "U+FFFD Substitution of Maximal
// Subparts"); only a valid but incomplete prefix is held back.
class Utf8StreamDecoder {
 public:
  std::string push(std::string_view bytes);
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace ubatch

// Chat formatting (ChatMessage, render_chat, apply_chat_template).
#include "tokenizer/chat_template.h"  // IWYU pragma: export
