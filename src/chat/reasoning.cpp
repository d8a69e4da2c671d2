// split_reasoning and ReasoningStream (reasoning.h). The stream re-splits the reply so far
// after every piece, holding back what is undecided, and sends what lies beyond what it sent.
#include "chat/reasoning.h"

#include <algorithm>

namespace ubatch::chat {

namespace {

bool is_blank_char(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim_left(std::string_view s) {
  while (!s.empty() && is_blank_char(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && is_blank_char(s.back())) s.remove_suffix(1);
  return s;
}

// The length of the longest suffix of s that is a proper prefix of marker.
size_t partial_marker_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(marker.size() - 1, s.size()); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// The split of `reply` as far as it is decided: with final false, text that may still turn
// out to be (part of) a marker, or trailing blanks of the reasoning, is left out.
ReasoningSplit split_so_far(std::string_view reply, bool open, bool final) {
  ReasoningSplit out;
  std::string_view inside;
  if (open) {
    inside = reply;
  } else {
    const std::string_view rest = trim_left(reply);
    if (!final && rest.size() < kReasoningOpen.size() && kReasoningOpen.substr(0, rest.size()) == rest)
      return out;  // may still open a block
    if (rest.substr(0, kReasoningOpen.size()) != kReasoningOpen) {
      out.content = std::string(rest);
      return out;
    }
    inside = rest.substr(kReasoningOpen.size());
  }
  out.has_reasoning = true;
  const size_t close = inside.find(kReasoningClose);
  if (close != std::string_view::npos) {
    out.reasoning = std::string(trim_right(trim_left(inside.substr(0, close))));
    out.content = std::string(trim_left(inside.substr(close + kReasoningClose.size())));
    return out;
  }
  if (!final) inside.remove_suffix(partial_marker_suffix(inside, kReasoningClose));
  out.reasoning = std::string(trim_right(trim_left(inside)));
  return out;
}

}  // namespace

std::optional<ReasoningFormat> parse_reasoning_format(std::string_view s) {
  if (s == "none") return ReasoningFormat::None;
  if (s == "auto") return ReasoningFormat::Auto;
  if (s == "deepseek") return ReasoningFormat::Deepseek;
  return std::nullopt;
}

const char* reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::None: return "none";
    case ReasoningFormat::Auto: return "auto";
    case ReasoningFormat::Deepseek: return "deepseek";
  }
  return "auto";
}

bool template_thinks(std::string_view source) {
  return source.find(kReasoningOpen) != std::string_view::npos &&
         source.find(kReasoningClose) != std::string_view::npos;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  prompt = trim_right(prompt);
  return prompt.size() >= kReasoningOpen.size() &&
         prompt.substr(prompt.size() - kReasoningOpen.size()) == kReasoningOpen;
}

ReasoningSplit split_reasoning(std::string_view reply, bool open) { return split_so_far(reply, open, true); }

ReasoningStream::Piece ReasoningStream::push(std::string_view text) {
  all_.append(text);
  return process(false);
}

ReasoningStream::Piece ReasoningStream::finish() { return process(true); }

ReasoningStream::Piece ReasoningStream::process(bool final) {
  const ReasoningSplit s = split_so_far(all_, open_, final);
  Piece p;
  if (s.reasoning.size() > sent_reasoning_) {
    p.reasoning = s.reasoning.substr(sent_reasoning_);
    sent_reasoning_ = s.reasoning.size();
  }
  if (s.content.size() > sent_content_) {
    p.content = s.content.substr(sent_content_);
    sent_content_ = s.content.size();
  }
  return p;
}

}  // namespace ubatch::chat
