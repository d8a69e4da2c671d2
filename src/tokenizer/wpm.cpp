#include "tokenizer/wpm.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/utf16.h>

#include "tokenizer/utf8.h"

namespace ubatch::tokenizer {

namespace {

// BERT's word length limit (max_input_chars_per_word): longer words are the unknown token.
constexpr size_t kMaxWordChars = 100;

bool is_whitespace(uint32_t cp) {
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' ||
         u_charType(static_cast<UChar32>(cp)) == U_SPACE_SEPARATOR;
}

// General category C* (Cc, Cf, Cs, Co, Cn), except the whitespace controls.
bool is_control(uint32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_CONTROL_CHAR: case U_FORMAT_CHAR: case U_SURROGATE: case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
      return true;
    default:
      return false;
  }
}

bool is_punctuation(uint32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126)) {
    return true;  // all ASCII non-letters-or-digits, symbols too
  }
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_DASH_PUNCTUATION: case U_START_PUNCTUATION: case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION: case U_OTHER_PUNCTUATION: case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

// The CJK Unified Ideographs blocks BERT splits into single characters (not Hangul, kana).
bool is_cjk_ideograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Lower-cases cp, decomposes it (NFD) and appends what is left without non-spacing marks.
// Returns the number of code points appended.
size_t append_folded(uint32_t cp, std::string& out) {
  const UChar32 lower = u_tolower(static_cast<UChar32>(cp));
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfd = unorm2_getNFDInstance(&err);
  UChar buf[32];
  int32_t len = U_SUCCESS(err) ? unorm2_getDecomposition(nfd, lower, buf, 32, &err) : -1;
  size_t n = 0;
  auto emit = [&](UChar32 c) {
    if (u_charType(c) == U_NON_SPACING_MARK) return;
    utf8_append(out, static_cast<uint32_t>(c));
    ++n;
  };
  if (len < 0 || U_FAILURE(err)) {
    emit(lower);
    return n;
  }
  for (int32_t i = 0; i < len;) {
    UChar32 c;
    U16_NEXT(buf, i, len, c);
    emit(c);
  }
  return n;
}

struct Word {
  std::string text;
  size_t chars = 0;
};

void basic_split(std::string_view text, std::vector<Word>& words) {
  Word cur;
  auto finish = [&] {
    if (!cur.text.empty()) words.push_back(std::move(cur));
    cur = Word{};
  };
  for (size_t i = 0; i < text.size();) {
    const Utf8Scan scan = utf8_scan(text.substr(i));
    const bool valid = scan.kind == Utf8Scan::COMPLETE;
    const size_t len = valid ? scan.len : 1;
    const uint32_t cp = valid ? utf8_decode(text.substr(i), len) : 0xFFFD;
    i += len;
    if (cp == 0 || cp == 0xFFFD || is_control(cp)) continue;
    if (is_whitespace(cp)) {
      finish();
      continue;
    }
    if (is_punctuation(cp) || is_cjk_ideograph(cp)) {
      finish();
      cur.chars = append_folded(cp, cur.text);
      finish();
      continue;
    }
    cur.chars += append_folded(cp, cur.text);
  }
  finish();
}

// Greedy longest-match-first over `word`; false when some position has no piece.
bool split_word(const Vocab& vocab, std::string_view word, std::vector<int32_t>& out) {
  std::string key;
  key.reserve(word.size() + kSpmSpace.size());
  std::vector<size_t> ends;  // character boundaries after position 0
  for (size_t i = 0; i < word.size();) {
    i += utf8_char_len(word.substr(i));
    ends.push_back(i);
  }
  const size_t first = out.size();
  size_t start = 0;
  while (start < word.size()) {
    bool found = false;
    for (size_t k = ends.size(); k-- > 0 && ends[k] > start;) {
      key.clear();
      if (start == 0) key.append(kSpmSpace);
      key.append(word.substr(start, ends[k] - start));
      const int32_t id = vocab.find(key);
      if (id >= 0 && vocab.from_text(id)) {
        out.push_back(id);
        start = ends[k];
        found = true;
        break;
      }
    }
    if (!found) {
      out.resize(first);
      return false;
    }
  }
  return true;
}

}  // namespace

std::vector<std::string> wpm_words(std::string_view text) {
  std::vector<Word> words;
  basic_split(text, words);
  std::vector<std::string> out;
  out.reserve(words.size());
  for (Word& w : words) out.push_back(std::move(w.text));
  return out;
}

void wpm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
  std::vector<Word> words;
  basic_split(text, words);
  for (const Word& w : words) {
    if (w.chars <= kMaxWordChars && split_word(vocab, w.text, out)) continue;
    if (vocab.unk >= 0) out.push_back(vocab.unk);
  }
}

}  // namespace ubatch::tokenizer
