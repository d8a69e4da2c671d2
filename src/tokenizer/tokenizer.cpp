// Tokenizer::from_gguf and the vocabulary-backed tokenizer: special-token partitioning, the
// SPM / BPE dispatch, and decoding of pieces.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <optional>
#include <span>

#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/spm.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"
#include "tokenizer/wpm.h"

namespace ubatch {

namespace {

using tokenizer::BpeMerges;
using tokenizer::PreTokenizer;
using tokenizer::TokenType;
using tokenizer::Vocab;
using tokenizer::VocabKind;

class VocabTokenizer final : public Tokenizer {
 public:
  VocabTokenizer(std::unique_ptr<Vocab> vocab, std::optional<BpeMerges> merges,
                 std::optional<PreTokenizer> pre)
      : vocab_(std::move(vocab)), merges_(std::move(merges)), pre_(std::move(pre)) {
    for (int32_t id = 0; id < vocab_->n_vocab(); ++id) {
      const TokenType t = vocab_->type_of(id);
      const std::string& text = vocab_->text[static_cast<size_t>(id)];
      if (text.empty()) continue;
      const auto first = static_cast<uint8_t>(text[0]);
      if (t == TokenType::CONTROL || t == TokenType::USER_DEFINED || t == TokenType::UNKNOWN) {
        special_first_[first] = true;
      }
      if (t == TokenType::USER_DEFINED) user_defined_first_[first] = true;
    }
    // Text loses no bytes when every byte has a token or the unknown token stands in (for one
    // character, at most 4 bytes); otherwise a byte can vanish and no bound holds (0).
    // WordPiece drops whitespace and control characters and spells a whole word of any length
    // as one unknown token: no bound.
    bool every_byte = true;
    for (int b = 0; b < 256; ++b) every_byte = every_byte && vocab_->byte_token[b] >= 0;
    if (vocab_->kind != VocabKind::WPM && (every_byte || vocab_->unk_for_text() >= 0)) {
      max_piece_bytes_ = every_byte ? 1 : 4;
      for (int32_t id = 0; id < vocab_->n_vocab(); ++id)
        max_piece_bytes_ = std::max(max_piece_bytes_, token_to_piece(id, true).size());
    }
  }

  int32_t n_vocab() const override { return vocab_->n_vocab(); }
  int32_t bos() const override { return vocab_->bos; }
  int32_t eos() const override { return vocab_->eos; }
  int32_t eot() const override { return vocab_->eot; }
  int32_t eom() const override { return vocab_->eom; }
  std::vector<int32_t> eog_ids() const override {
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < n_vocab(); ++id)
      if (vocab_->eog[static_cast<size_t>(id)] != 0) ids.push_back(id);
    return ids;
  }
  const std::string& model_name() const override { return vocab_->model_name; }
  const std::string& pre_tokenizer() const override {
    static const std::string none;
    return pre_ ? pre_->name() : none;
  }
  int32_t pad() const override { return vocab_->pad; }
  bool is_eog(int32_t id) const override {
    return id >= 0 && id < n_vocab() && vocab_->eog[static_cast<size_t>(id)] != 0;
  }
  bool add_bos_default() const override { return vocab_->add_bos; }
  bool add_eos_default() const override { return vocab_->add_eos; }
  const std::string& chat_template() const override { return vocab_->chat_template; }
  const std::string& chat_template_tool_use() const override { return vocab_->chat_template_tool_use; }

  int32_t token_id(std::string_view text) const override { return vocab_->find(text); }

  std::vector<int32_t> tokenize(std::string_view text, bool add_bos,
                                bool parse_special) const override {
    const SegmentedText::Segment whole{text.size(), parse_special};
    return tokenize_segments(text, std::span(&whole, 1), add_bos);
  }

  std::vector<int32_t> tokenize(const SegmentedText& text, bool add_bos) const override {
    return tokenize_segments(text.text, text.segments, add_bos);
  }

  std::string token_to_piece(int32_t id, bool special) const override {
    std::string out;
    append_piece(id, special, out);
    return out;
  }

  size_t max_piece_bytes() const override { return max_piece_bytes_; }

  std::string detokenize(const std::vector<int32_t>& ids, bool special,
                         bool remove_space_prefix) const override {
    std::string out;
    // WordPiece spells every word start with U+2581: the first word's space is never text.
    bool strip = remove_space_prefix && (vocab_->add_space_prefix || vocab_->kind == VocabKind::WPM);
    for (int32_t id : ids) {
      if (id < 0 || id >= n_vocab()) continue;
      const size_t before = out.size();
      append_piece(id, special, out);
      // The prefix space that tokenization added sits on the first piece of text, after any
      // leading control tokens (BOS).
      if (strip && vocab_->type_of(id) != TokenType::CONTROL) {
        if (out.size() > before && out[before] == ' ') out.erase(before, 1);
        strip = false;
      }
    }
    return out;
  }

 private:
  // Special (or, outside parse_special segments, user-defined) tokens are matched inside one
  // segment; the plain text between matches runs across segment boundaries. Bytes past the
  // last segment (segments not covering `text`) count as plain text without parse_special.
  std::vector<int32_t> tokenize_segments(std::string_view text, std::span<const SegmentedText::Segment> segments,
                                         bool add_bos) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos && vocab_->bos >= 0) out.push_back(vocab_->bos);

    bool after_special = true;  // SPM: the space prefix goes on text at the start or after a special token
    size_t raw_start = 0;
    size_t seg_begin = 0;
    for (size_t k = 0; k <= segments.size() && seg_begin < text.size(); ++k) {
      const size_t seg_end = k < segments.size() ? std::min(segments[k].end, text.size()) : text.size();
      if (seg_end <= seg_begin) continue;
      const bool parse_special = k < segments.size() && segments[k].parse_special;
      const tokenizer::SpecialTokenTrie& trie = parse_special ? vocab_->special : vocab_->user_defined;
      const bool* first = parse_special ? special_first_ : user_defined_first_;
      for (size_t i = seg_begin; i < seg_end;) {
        if (!first[static_cast<uint8_t>(text[i])]) {
          ++i;
          continue;
        }
        const tokenizer::SpecialTokenTrie::Match m = trie.longest_prefix(text.substr(i, seg_end - i));
        if (m.id < 0) {
          ++i;
          continue;
        }
        if (i > raw_start) tokenize_raw(text.substr(raw_start, i - raw_start), after_special, out);
        out.push_back(m.id);
        after_special = true;
        i += m.len;
        raw_start = i;
      }
      seg_begin = seg_end;
    }
    if (raw_start < text.size()) tokenize_raw(text.substr(raw_start), after_special, out);
    return out;
  }

  // Text between special tokens.
  void tokenize_raw(std::string_view raw, bool after_special, std::vector<int32_t>& out) const {
    if (vocab_->kind == VocabKind::SPM) {
      std::string escaped;
      escaped.reserve(raw.size() + 8);
      if (vocab_->add_space_prefix && after_special) escaped.append(tokenizer::kSpmSpace);
      for (char c : raw) {
        if (c == ' ') {
          escaped.append(tokenizer::kSpmSpace);
        } else {
          escaped.push_back(c);
        }
      }
      tokenizer::spm_tokenize(*vocab_, escaped, out);
      return;
    }
    if (vocab_->kind == VocabKind::WPM) {
      tokenizer::wpm_tokenize(*vocab_, raw, out);
      return;
    }
    for (std::string_view word : pre_->split(raw)) {
      merges_->tokenize_word(*vocab_, word, pre_->ignore_merges(), out);
    }
  }

  void append_piece(int32_t id, bool special, std::string& out) const {
    if (id < 0 || id >= n_vocab()) return;
    const std::string& text = vocab_->text[static_cast<size_t>(id)];
    switch (vocab_->type_of(id)) {
      case TokenType::CONTROL:
        if (special) out.append(text);
        return;
      case TokenType::UNKNOWN:
        out.append(special ? std::string_view(text) : tokenizer::kReplacementChar);
        return;
      case TokenType::USER_DEFINED:
        if (vocab_->kind == VocabKind::BPE) {
          out.append(text);  // stored as raw text, not in the byte-level alphabet
          return;
        }
        break;
      default:
        break;
    }
    if (vocab_->kind != VocabKind::BPE) {  // SPM and WordPiece: U+2581 is a space
      tokenizer::spm_append_piece(*vocab_, id, out);
    } else {
      tokenizer::byte_level_decode(text, out);
    }
  }

  std::unique_ptr<Vocab> vocab_;
  std::optional<BpeMerges> merges_;   // BPE only
  std::optional<PreTokenizer> pre_;   // BPE only
  // Bytes that start some special / user-defined token text (skips most trie lookups).
  bool special_first_[256] = {};
  bool user_defined_first_[256] = {};
  size_t max_piece_bytes_ = 0;  // the longest token_to_piece(id, true)
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& file) {
  Result<std::unique_ptr<Vocab>> vocab = tokenizer::load_vocab(file);
  if (!vocab) return vocab.status();
  std::optional<BpeMerges> merges;
  std::optional<PreTokenizer> pre;
  if ((*vocab)->kind == VocabKind::BPE) {
    Result<BpeMerges> m = BpeMerges::load(file, **vocab);
    if (!m) return m.status();
    merges.emplace(std::move(m).value());
    const std::string name = (*vocab)->pre.empty() ? "default" : (*vocab)->pre;
    Result<PreTokenizer> p = PreTokenizer::create(name);
    if (!p) return p.status();
    pre.emplace(std::move(p).value());
  }
  return std::unique_ptr<Tokenizer>(
      std::make_unique<VocabTokenizer>(std::move(*vocab), std::move(merges), std::move(pre)));
}

}  // namespace ubatch
