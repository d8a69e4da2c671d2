// The vocabulary of a GGUF model (`tokenizer.ggml.*` metadata), shared by the SPM and BPE
// tokenizers (private to src/tokenizer/).
//
// Keys (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md, "Tokenizer"):
//   tokenizer.ggml.model        "llama" (SPM), "gpt2" (BPE) or "bert" (WordPiece)
//   tokenizer.ggml.tokens       [n_vocab] strings, the pieces
//   tokenizer.ggml.scores       [n_vocab] f32, SPM merge priorities (optional for BPE)
//   tokenizer.ggml.token_type   [n_vocab] i32, TokenType below (optional: all NORMAL)
//   tokenizer.ggml.merges       BPE merges "left right", best first
//   tokenizer.ggml.{bos,eos,eot,eom,unknown,padding}_token_id, add_bos_token, add_eos_token,
//   add_space_prefix, tokenizer.ggml.pre, tokenizer.chat_template, tokenizer.chat_template.tool_use;
//   WordPiece: tokenizer.ggml.cls_token_id (used as BOS) and seperator_token_id (sic; used as EOS)
//
// Bounds (load_vocab refuses a file beyond them, naming the key): a token of at most 4 KiB, 64 MiB
// of token text in all, 1 MiB of control, user-defined and unknown token text (each byte of it
// is a trie node), a chat template of at most 1 MiB (docs/SECURITY.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <functional>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"

namespace ubatch::tokenizer {

enum class TokenType : int32_t {
  UNDEFINED = 0, NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6,
};

enum class VocabKind { SPM, BPE, WPM };

// Longest-match lookup of special-token texts: a byte trie over the token texts.
class SpecialTokenTrie {
 public:
  void insert(std::string_view text, int32_t id);
  // Id and length of the longest token text that `text` starts with; {-1, 0} when none.
  struct Match {
    int32_t id = -1;
    size_t len = 0;
  };
  Match longest_prefix(std::string_view text) const;
  bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    int32_t id = -1;  // token ending here, -1 if none
  };
  std::vector<Node> nodes_{Node{}};                   // node 0 is the root
  std::unordered_map<uint64_t, int32_t> edges_;       // (node << 8 | byte) -> child node
};

// Piece text -> id over a vocabulary's own strings (no copy of the keys): open addressing with
// linear probing, at most half full, each slot holding 32 bits of the key's hash beside the
// id so that a probe rarely touches a string that is not the key. Duplicate texts keep the
// lowest id. (A node-based std::unordered_map spent ~half of a 151,936-token vocabulary's
// load time in cache misses.)
class PieceIndex {
 public:
  void build(const std::vector<std::string>& text);
  // Id of `piece` in `text` (the vector given to build()), -1 when none.
  int32_t find(std::string_view piece, const std::vector<std::string>& text) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(piece);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.tag == tag && text[static_cast<size_t>(s.id)] == piece) return s.id;
    }
  }

 private:
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  struct Slot {
    uint32_t tag = 0;
    int32_t id = -1;  // -1: empty
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Not copyable or movable: piece_index refers to `text`.
struct Vocab {
  Vocab() = default;
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  VocabKind kind = VocabKind::SPM;
  std::string model_name;  // tokenizer.ggml.model
  std::string pre;         // tokenizer.ggml.pre ("" when absent)

  std::vector<std::string> text;  // [n_vocab] piece bytes
  std::vector<float> score;       // [n_vocab]
  std::vector<TokenType> type;    // [n_vocab]
  PieceIndex piece_index;  // piece -> id, over `text`

  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = false;  // SPM only
  std::vector<uint8_t> eog;       // [n_vocab] 1 for end-of-generation tokens
  std::string chat_template;
  std::string chat_template_tool_use;  // tokenizer.chat_template.tool_use ("" when absent)

  // Token for each byte value: SPM <0xNN> tokens (or the one-byte piece when there is no
  // byte token); BPE the GPT-2 byte-to-unicode character's token. -1 when none.
  int32_t byte_token[256] = {};

  // Texts of CONTROL, USER_DEFINED and UNKNOWN tokens, matched in text when parse_special;
  // of USER_DEFINED tokens alone, matched otherwise (see Tokenizer::tokenize).
  SpecialTokenTrie special;
  SpecialTokenTrie user_defined;

  int32_t n_vocab() const { return static_cast<int32_t>(text.size()); }
  int32_t find(std::string_view piece) const { return piece_index.find(piece, text); }
  TokenType type_of(int32_t id) const { return type[static_cast<size_t>(id)]; }
  // The token for text that no piece covers: the unknown token, or -1 when the vocabulary has
  // none or names a control token (e.g. <|endoftext|>) as unknown.
  int32_t unk_for_text() const {
    return unk >= 0 && type_of(unk) != TokenType::CONTROL ? unk : -1;
  }
  // Whether segmentation may produce this token from plain text: not control or unknown
  // tokens (those come only from special-token matching), so text like "</s>" can never
  // turn into the control token by merging.
  bool from_text(int32_t id) const {
    const TokenType t = type_of(id);
    return t != TokenType::CONTROL && t != TokenType::UNKNOWN;
  }
};

// Loads and validates the vocabulary. Errors name the key that is missing or inconsistent.
Result<std::unique_ptr<Vocab>> load_vocab(const gguf::File& file);

}  // namespace ubatch::tokenizer
