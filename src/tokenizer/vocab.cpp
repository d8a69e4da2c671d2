#include "tokenizer/vocab.h"

#include <cstdio>
#include <limits>

#include "tokenizer/byte_level.h"

namespace ubatch::tokenizer {

void SpecialTokenTrie::insert(std::string_view text, int32_t id) {
  int32_t node = 0;
  for (char c : text) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      nodes_.push_back(Node{});
      it = edges_.emplace(key, static_cast<int32_t>(nodes_.size() - 1)).first;
    }
    node = it->second;
  }
  // Two tokens with the same text: keep the first (lowest id).
  if (node != 0 && nodes_[static_cast<size_t>(node)].id < 0) nodes_[static_cast<size_t>(node)].id = id;
}

SpecialTokenTrie::Match SpecialTokenTrie::longest_prefix(std::string_view text) const {
  Match best;
  int32_t node = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[i]);
    auto it = edges_.find(key);
    if (it == edges_.end()) break;
    node = it->second;
    const int32_t id = nodes_[static_cast<size_t>(node)].id;
    if (id >= 0) best = {id, i + 1};
  }
  return best;
}

void PieceIndex::build(const std::vector<std::string>& text) {
  size_t cap = 16;
  while (cap < 2 * text.size()) cap *= 2;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  for (size_t id = 0; id < text.size(); ++id) {
    const std::string_view piece = text[id];
    const uint64_t h = hash(piece);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = Slot{tag, static_cast<int32_t>(id)};
        break;
      }
      if (s.tag == tag && text[static_cast<size_t>(s.id)] == piece) break;  // a duplicate: the lower id stays
    }
  }
}

namespace {

constexpr std::string_view kPrefix = "tokenizer.ggml.";

// Bounds on what a vocabulary may hold, so that the memory a load takes stays a small multiple
// of the file whatever its bytes (a special token's text costs its length in trie nodes, tens
// of bytes each). The longest piece of any vocabulary we know is 512 bytes (StarCoder); the
// largest vocabularies (Gemma 3, 262,144 tokens) spell about 3 MiB in all; the longest chat
// templates are tens of KiB.
constexpr size_t kMaxTokenBytes = 4096;
constexpr size_t kMaxVocabBytes = size_t{64} << 20;  // loads in about twice this
// Control, user-defined and unknown tokens are matched in text through byte tries (about 100
// bytes of memory per byte of their text): Gemma 3's 6,414 of them spell 74 KiB.
constexpr size_t kMaxSpecialBytes = size_t{1} << 20;
constexpr size_t kMaxChatTemplateBytes = size_t{1} << 20;

// Reads an optional token id key; -1 when absent. Errors when present but out of range.
Status read_token_id(const gguf::File& file, const std::string& key, int32_t n_vocab,
                     int32_t* out) {
  *out = -1;
  if (!file.find(key)) return Status::ok();
  std::optional<int64_t> v = file.get_int(key);
  if (!v) return Status::error("tokenizer: " + key + " is not an integer");
  if (*v < 0 || *v >= n_vocab) {
    return Status::error("tokenizer: " + key + " = " + std::to_string(*v) +
                         " is out of range [0, " + std::to_string(n_vocab) + ")");
  }
  *out = static_cast<int32_t>(*v);
  return Status::ok();
}

Status read_bool(const gguf::File& file, const std::string& key, bool* out) {
  if (!file.find(key)) return Status::ok();  // keep the default
  std::optional<bool> v = file.get_bool(key);
  if (!v) return Status::error("tokenizer: " + key + " is not a bool");
  *out = *v;
  return Status::ok();
}

// A token whose text marks an end of turn only counts as one when the vocabulary marks it
// special (CONTROL, or USER_DEFINED as older converters wrote added tokens): an ordinary token
// that happens to spell "<|end|>" (say) is text. Qwen's vocabulary holds `</s>` as the NORMAL
// token 128247; it is never promoted.
bool special_text_token(const Vocab& v, int32_t id) {
  return id >= 0 && (v.type_of(id) == TokenType::CONTROL || v.type_of(id) == TokenType::USER_DEFINED);
}

int32_t find_first_special(const Vocab& v, std::initializer_list<std::string_view> texts) {
  for (std::string_view t : texts) {
    const int32_t id = v.find(t);
    if (special_text_token(v, id)) return id;
  }
  return -1;
}

}  // namespace

Result<std::unique_ptr<Vocab>> load_vocab(const gguf::File& file) {
  auto vocab = std::make_unique<Vocab>();
  Vocab& v = *vocab;

  const std::string model_key = std::string(kPrefix) + "model";
  std::optional<std::string_view> model = file.get_string(model_key);
  if (!model) return Status::error("tokenizer: " + file.path() + " has no " + model_key);
  v.model_name = std::string(*model);
  if (v.model_name == "llama") {
    v.kind = VocabKind::SPM;
  } else if (v.model_name == "gpt2") {
    v.kind = VocabKind::BPE;
  } else if (v.model_name == "bert") {
    v.kind = VocabKind::WPM;
  } else {
    return Status::error("tokenizer: unsupported tokenizer.ggml.model \"" + v.model_name +
                         "\" (supported: \"llama\" (SPM), \"gpt2\" (BPE), \"bert\" (WordPiece))");
  }
  if (std::optional<std::string_view> pre = file.get_string(std::string(kPrefix) + "pre")) {
    v.pre = std::string(*pre);
  }

  const std::string tokens_key = std::string(kPrefix) + "tokens";
  std::optional<std::vector<std::string_view>> tokens = file.get_string_array(tokens_key);
  if (!tokens) return Status::error("tokenizer: " + file.path() + " has no string array " + tokens_key);
  if (tokens->empty()) return Status::error("tokenizer: " + tokens_key + " is empty");
  if (tokens->size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Status::error("tokenizer: " + tokens_key + " has too many entries");
  }
  const size_t n = tokens->size();
  const int32_t n_vocab = static_cast<int32_t>(n);
  size_t total_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t len = (*tokens)[i].size();
    if (len > kMaxTokenBytes)
      return Status::error("tokenizer: " + tokens_key + "[" + std::to_string(i) + "] is " + std::to_string(len) +
                           " bytes long; a token may have at most " + std::to_string(kMaxTokenBytes) +
                           " (a broken or hostile file)");
    total_bytes += len;
  }
  if (total_bytes > kMaxVocabBytes)
    return Status::error("tokenizer: " + tokens_key + " spells " + std::to_string(total_bytes) +
                         " bytes in all; a vocabulary may spell at most " + std::to_string(kMaxVocabBytes) +
                         " (a broken or hostile file)");
  v.text.reserve(n);
  for (std::string_view t : *tokens) v.text.emplace_back(t);

  v.score.assign(n, 0.0f);
  const std::string scores_key = std::string(kPrefix) + "scores";
  if (file.find(scores_key)) {
    std::optional<std::vector<float>> scores = file.get_f32_array(scores_key);
    if (!scores) return Status::error("tokenizer: " + scores_key + " is not a numeric array");
    if (scores->size() != n) {
      return Status::error("tokenizer: " + scores_key + " has " + std::to_string(scores->size()) +
                           " entries, " + tokens_key + " has " + std::to_string(n));
    }
    v.score = std::move(*scores);
  } else if (v.kind == VocabKind::SPM) {
    return Status::error("tokenizer: SPM vocabulary without " + scores_key);
  }

  v.type.assign(n, TokenType::NORMAL);
  const std::string type_key = std::string(kPrefix) + "token_type";
  if (file.find(type_key)) {
    std::optional<std::vector<int64_t>> types = file.get_int_array(type_key);
    if (!types) return Status::error("tokenizer: " + type_key + " is not an integer array");
    if (types->size() != n) {
      return Status::error("tokenizer: " + type_key + " has " + std::to_string(types->size()) +
                           " entries, " + tokens_key + " has " + std::to_string(n));
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = (*types)[i];
      if (t < 0 || t > static_cast<int64_t>(TokenType::BYTE)) {
        return Status::error("tokenizer: " + type_key + "[" + std::to_string(i) + "] = " +
                             std::to_string(t) + " is not a token type (0..6)");
      }
      v.type[i] = static_cast<TokenType>(t);
    }
  }

  // Lookup table. Duplicate pieces keep the lowest id.
  v.piece_index.build(v.text);

  struct IdKey {
    const char* name;
    int32_t* out;
  };
  for (IdKey k : {IdKey{"bos_token_id", &v.bos}, IdKey{"eos_token_id", &v.eos},
                  IdKey{"eot_token_id", &v.eot}, IdKey{"eom_token_id", &v.eom},
                  IdKey{"unknown_token_id", &v.unk}, IdKey{"padding_token_id", &v.pad}}) {
    Status s = read_token_id(file, std::string(kPrefix) + k.name, n_vocab, k.out);
    if (!s) return s;
  }
  if (v.kind == VocabKind::WPM) {
    // BERT input is [CLS] text [SEP]: the classifier token stands first, the separator last.
    for (IdKey k : {IdKey{"cls_token_id", &v.bos}, IdKey{"seperator_token_id", &v.eos},
                    IdKey{"separator_token_id", &v.eos}}) {
      if (*k.out >= 0) continue;
      Status s = read_token_id(file, std::string(kPrefix) + k.name, n_vocab, k.out);
      if (!s) return s;
    }
  }
  if (v.kind == VocabKind::SPM) {
    // SentencePiece's conventional ids when the metadata leaves them out.
    if (v.bos < 0 && !file.find("tokenizer.ggml.bos_token_id")) v.bos = v.find("<s>");
    if (v.eos < 0 && !file.find("tokenizer.ggml.eos_token_id")) v.eos = v.find("</s>");
    if (v.unk < 0) v.unk = v.find("<unk>");
  }
  // End of turn / end of message when the file names none: the chat formats' markers.
  if (v.eot < 0) {
    v.eot = find_first_special(v, {"<|eot_id|>", "<end_of_turn>", "<|im_end|>", "<|end|>",
                                   "<|EOT|>", "<EOT>", "<|end_of_turn|>"});
  }
  if (v.eom < 0) v.eom = find_first_special(v, {"<|eom_id|>"});

  v.add_bos = v.kind != VocabKind::BPE;
  v.add_eos = v.kind == VocabKind::WPM;
  v.add_space_prefix = v.kind == VocabKind::SPM;
  for (auto [key, out] : {std::pair{"add_bos_token", &v.add_bos}, std::pair{"add_eos_token", &v.add_eos},
                          std::pair{"add_space_prefix", &v.add_space_prefix}}) {
    Status s = read_bool(file, std::string(kPrefix) + key, out);
    if (!s) return s;
  }
  if (v.kind != VocabKind::SPM) v.add_space_prefix = false;
  if (v.bos < 0) v.add_bos = false;
  if (v.eos < 0) v.add_eos = false;

  // End of generation: eos, eot, eom (whatever their type: the file names them) and the
  // special tokens that end a turn or a text in the chat formats (ChatML <|im_end|>, Llama 3
  // <|eot_id|> / <|eom_id|> / <|end_of_text|>, Phi-3 <|end|>, Gemma <end_of_turn>, GPT-style
  // <|endoftext|>, …), so a model stops at the end of its turn even where the file's eos is
  // another token (Qwen2.5: eos <|endoftext|>, turns end with <|im_end|>).
  v.eog.assign(n, 0);
  for (int32_t id : {v.eos, v.eot, v.eom}) {
    if (id >= 0) v.eog[static_cast<size_t>(id)] = 1;
  }
  for (std::string_view t : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>",
                             "<|endoftext|>", "<|end_of_text|>", "<|EOT|>", "<EOT>",
                             "<|end_of_turn|>", "<|return|>", "<|call|>"}) {
    const int32_t id = v.find(t);
    if (special_text_token(v, id)) v.eog[static_cast<size_t>(id)] = 1;
  }
  // Harmony (gpt-oss) ends a reply with <|return|> or <|call|>; its <|end|> closes one message of
  // several (the reasoning before the answer), so it must not end generation there.
  {
    const int32_t ret = v.find("<|return|>"), call = v.find("<|call|>"), end = v.find("<|end|>");
    if (special_text_token(v, ret) && special_text_token(v, call) && end >= 0 && end != v.eos)
      v.eog[static_cast<size_t>(end)] = 0;
  }

  // Byte tokens.
  for (int b = 0; b < 256; ++b) {
    int32_t id = -1;
    if (v.kind == VocabKind::SPM) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      id = v.find(name);
      if (id < 0) id = v.find(std::string(1, static_cast<char>(b)));
    } else if (v.kind == VocabKind::BPE) {
      id = v.find(byte_to_unicode(static_cast<uint8_t>(b)));
    }  // WordPiece has no byte tokens
    v.byte_token[b] = id;
  }

  // Texts recognised as whole tokens in the input (control, user-defined and unknown).
  size_t special_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = v.type[i];
    if (t == TokenType::CONTROL || t == TokenType::USER_DEFINED || t == TokenType::UNKNOWN)
      special_bytes += v.text[i].size();
  }
  if (special_bytes > kMaxSpecialBytes)
    return Status::error("tokenizer: the control, user-defined and unknown tokens of " + tokens_key + " spell " +
                         std::to_string(special_bytes) + " bytes in all; at most " +
                         std::to_string(kMaxSpecialBytes) + " are allowed (a broken or hostile file)");
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = v.type[i];
    if (v.text[i].empty()) continue;
    if (t == TokenType::CONTROL || t == TokenType::USER_DEFINED || t == TokenType::UNKNOWN) {
      v.special.insert(v.text[i], static_cast<int32_t>(i));
    }
    if (t == TokenType::USER_DEFINED) v.user_defined.insert(v.text[i], static_cast<int32_t>(i));
  }

  for (auto [key, out] : {std::pair{"tokenizer.chat_template", &v.chat_template},
                          std::pair{"tokenizer.chat_template.tool_use", &v.chat_template_tool_use}}) {
    std::optional<std::string_view> tmpl = file.get_string(key);
    if (!tmpl) continue;
    if (tmpl->size() > kMaxChatTemplateBytes)
      return Status::error(std::string("tokenizer: ") + key + " is " + std::to_string(tmpl->size()) +
                           " bytes long; a chat template may have at most " + std::to_string(kMaxChatTemplateBytes));
    *out = std::string(*tmpl);
  }
  return vocab;
}

}  // namespace ubatch::tokenizer
