// libFuzzer target: chat rendering (render_chat) and the tokenization of its segments, with
// the default model's vocabulary (fuzz_tokenizer.h). Build and run: docs/FUZZING.md.
//
// Input: byte 0 = family (low 3 bits: gemma, llama3, chatml, llama2, phi3, a Gemma-like
// template, an unknown template, "") and bit 3 add_generation_prompt; then messages
// separated by 0x1E, each = one role byte (0 system, 1 user, 2 assistant, 3 developer,
// 4 tool, 5 "", 6.. the bytes up to 0x1F as the role name) + content.
// Checks, for every input:
//  - an error has a message, never a crash or an exception;
//  - the segments cover the text exactly, in order, none empty, kinds alternating;
//  - every message's text appears in the content segments, in order (nothing is lost, and
//    no content lands in markup);
//  - tokenized, the control tokens are exactly those of the markup segments alone: message
//    content never yields a control token (issue 17, item 5);
//  - apply_chat_template gives the same text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_tokenizer.h"

namespace {

using ubatch::ChatMessage;
using ubatch::SegmentedText;
using ubatch::Tokenizer;

#define FUZZ_CHECK(cond)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      __builtin_trap();                                                            \
    }                                                                              \
  } while (0)

const char* kTemplates[] = {
    "gemma", "llama3", "chatml", "llama2", "phi3",
    "{{ bos_token }}{% for m in messages %}{{ '<start_of_turn>' + m['role'] + '\\n' }}{% endfor %}",
    "{% for m in messages %}{{ m.content }}{% endfor %}", ""};
const char* kRoles[] = {"system", "user", "assistant", "developer", "tool", ""};

int64_t count_control(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  int64_t n = 0;
  for (int32_t id : ids) n += ubatch::fuzz::is_control(tok, id) ? 1 : 0;
  return n;
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)ubatch::fuzz::tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tok = ubatch::fuzz::tokenizer();
  const std::string tmpl = kTemplates[data[0] & 7];
  const bool add_prompt = data[0] & 8;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);

  std::vector<ChatMessage> messages;
  size_t pos = 0;
  while (pos < rest.size() && messages.size() < 64) {
    size_t end = rest.find('\x1E', pos);
    if (end == std::string_view::npos) end = rest.size();
    std::string_view rec = rest.substr(pos, end - pos);
    pos = end + 1;
    ChatMessage m;
    if (!rec.empty()) {
      const auto r = static_cast<uint8_t>(rec[0]);
      rec.remove_prefix(1);
      if (r < 6) {
        m.role = kRoles[r];
      } else {
        const size_t cut = rec.find('\x1F');
        m.role = std::string(rec.substr(0, cut));
        rec = cut == std::string_view::npos ? std::string_view() : rec.substr(cut + 1);
      }
    }
    m.content = std::string(rec);
    messages.push_back(std::move(m));
  }

  ubatch::Result<SegmentedText> r = ubatch::render_chat(tmpl, messages, add_prompt);
  ubatch::Result<std::string> text = ubatch::apply_chat_template(tmpl, messages, add_prompt);
  FUZZ_CHECK(r.is_ok() == text.is_ok());
  if (!r) {
    FUZZ_CHECK(!r.message().empty());
    return 0;
  }
  const SegmentedText& seg = *r;
  FUZZ_CHECK(*text == seg.text);
  size_t begin = 0;
  std::string content;
  std::vector<std::string_view> markup;
  for (size_t k = 0; k < seg.segments.size(); ++k) {
    const SegmentedText::Segment& s = seg.segments[k];
    FUZZ_CHECK(s.end > begin && s.end <= seg.text.size());
    if (k > 0) FUZZ_CHECK(s.parse_special != seg.segments[k - 1].parse_special);
    const std::string_view piece = std::string_view(seg.text).substr(begin, s.end - begin);
    if (s.parse_special) markup.push_back(piece);
    else content.append(piece);
    begin = s.end;
  }
  FUZZ_CHECK(begin == seg.text.size());
  // Each message's text (trimmed, as some families trim) is in the content, in order.
  size_t at = 0;
  for (const ChatMessage& m : messages) {
    const std::string_view t = trim(m.content);
    if (t.empty()) continue;
    const size_t found = content.find(t, at);
    FUZZ_CHECK(found != std::string::npos);
    at = found + t.size();
  }
  const std::vector<int32_t> ids = tok.tokenize(seg, tok.add_bos_default());
  int64_t markup_control = tok.add_bos_default() && tok.bos() >= 0 && ubatch::fuzz::is_control(tok, tok.bos()) ? 1 : 0;
  for (std::string_view m : markup) markup_control += count_control(tok, tok.tokenize(m, false, true));
  FUZZ_CHECK(count_control(tok, ids) == markup_control);
  return 0;
}
