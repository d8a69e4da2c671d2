// Reasoning ("thinking") in replies: the text a thinking model writes inside a
// `<think>…</think>` block before its answer, returned apart from the answer as
// `reasoning_content` (docs/API.md, "Reasoning").
//
// A reply holds reasoning when the prompt leaves a block open (the generation prompt ends with
// `<think>`, as Qwen 3 and DeepSeek-R1 templates write it: `open`) or when the reply itself
// starts with `<think>` (after whitespace). The reasoning is the text up to `</think>` (or to
// the end of a reply cut before it), without its leading and trailing whitespace; the content
// is the text after `</think>`, without its leading whitespace. A reply without a block is all
// content.
//
// split_reasoning works on a whole reply; ReasoningStream on its pieces as they come, holding
// back only what may still be part of a marker (or whitespace that may be trimmed), so that
// the pieces it returns add up to split_reasoning's result.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ubatch::chat {

inline constexpr std::string_view kReasoningOpen = "<think>";
inline constexpr std::string_view kReasoningClose = "</think>";

// reasoning_format: none (the block stays in content), auto (separated when the template
// thinks, or the prompt leaves a block open), deepseek (always separated).
enum class ReasoningFormat { None, Auto, Deepseek };
std::optional<ReasoningFormat> parse_reasoning_format(std::string_view s);  // "none", "auto", "deepseek"
const char* reasoning_format_name(ReasoningFormat f);

// A template that thinks writes both markers (Qwen 3, DeepSeek-R1, SmolLM3, QwQ …).
bool template_thinks(std::string_view source);

// The prompt ends inside an open reasoning block (ignoring trailing whitespace).
bool prompt_opens_reasoning(std::string_view prompt);

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
  bool has_reasoning = false;  // a block was opened (its text may be empty)
};
ReasoningSplit split_reasoning(std::string_view reply, bool open);

class ReasoningStream {
 public:
  explicit ReasoningStream(bool open) : open_(open) {}
  struct Piece {
    std::string reasoning;
    std::string content;
  };
  Piece push(std::string_view text);
  Piece finish();  // the reply has ended: whatever was held back

 private:
  Piece process(bool final);
  bool open_;
  std::string all_;  // the reply so far
  size_t sent_reasoning_ = 0, sent_content_ = 0;
};

}  // namespace ubatch::chat
