// SegmentedText: text whose parts differ in whether special-token text in them becomes
// special tokens. A rendered chat prompt is one: the chat format's own markup
// (`<start_of_turn>user\n`, `<|eot_id|>`, …) is tokenized with special tokens recognised,
// the messages' content as plain text, so content can never forge a turn
// (Tokenizer::tokenize(const SegmentedText&, bool)).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ubatch {

struct SegmentedText {
  struct Segment {
    size_t end = 0;              // byte offset in `text` one past the segment (segments are consecutive)
    bool parse_special = false;  // control tokens in this segment's text are recognised
  };
  std::string text;               // all segments, in order
  std::vector<Segment> segments;  // covers text exactly: back().end == text.size(); no empty segment

  // Appends `s` as a segment; joins it to the last segment when that has the same
  // parse_special (so adjacent text stays one segment). Empty `s` adds nothing.
  void append(std::string_view s, bool parse_special) {
    if (s.empty()) return;
    text.append(s);
    if (!segments.empty() && segments.back().parse_special == parse_special) {
      segments.back().end = text.size();
    } else {
      segments.push_back({text.size(), parse_special});
    }
  }
  // Markup of the format (special tokens recognised) and content (plain text).
  void markup(std::string_view s) { append(s, true); }
  void content(std::string_view s) { append(s, false); }
};

}  // namespace ubatch
