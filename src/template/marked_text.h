// MarkedText: a string and, for every byte range, where it came from — the template's own
// literal text (trusted: may hold special tokens) or data (message content, tool definitions,
// any value passed in, and anything computed from them: plain text for the tokenizer).
//
// The engine keeps the marks through every operation that moves bytes without inventing
// them: concatenation (`~`, `+`, join, format), slicing and stripping, macro output, `{% set %}`
// blocks. Operations that compute new text from a string (case mapping per code point, HTML
// escaping) are applied per range and keep the marks; anything else that produces text from
// values (str() of a number or list, tojson, reversing, title-casing, …) marks the result
// literal only when every input was entirely literal, and data otherwise. So data bytes never
// become literal, and the rendered prompt's literal ranges are exactly template text.
//
// The storage is SegmentedText (tokenizer/segmented_text.h), parse_special = literal, so
// a render's output goes to Tokenizer::tokenize(const SegmentedText&) unchanged.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "tokenizer/segmented_text.h"

namespace ubatch::jinja {

class MarkedText {
 public:
  MarkedText() = default;
  MarkedText(std::string_view s, bool literal) { text_.append(s, literal); }
  static MarkedText literal(std::string_view s) { return MarkedText(s, true); }
  static MarkedText data(std::string_view s) { return MarkedText(s, false); }

  const std::string& str() const { return text_.text; }
  size_t size() const { return text_.text.size(); }
  bool empty() const { return text_.text.empty(); }
  const SegmentedText& segments() const { return text_; }
  SegmentedText release() && { return std::move(text_); }

  // True when no byte is data (an empty text is literal).
  bool all_literal() const {
    for (const auto& seg : text_.segments)
      if (!seg.parse_special) return false;
    return true;
  }

  void append(std::string_view s, bool literal) { text_.append(s, literal); }
  void append(const MarkedText& o) { append_range(o, 0, o.size()); }
  // Appends o's bytes [begin, end) with their marks.
  void append_range(const MarkedText& o, size_t begin, size_t end);
  MarkedText substr(size_t begin, size_t end) const {
    MarkedText r;
    r.append_range(*this, begin, end);
    return r;
  }
  // Applies fn (string_view → std::string) to each marked range separately and joins the
  // results with the range's mark: for per-code-point transforms (case mapping, escaping).
  template <typename Fn>
  MarkedText map_ranges(Fn&& fn) const {
    MarkedText r;
    size_t begin = 0;
    for (const auto& seg : text_.segments) {
      r.append(fn(std::string_view(text_.text).substr(begin, seg.end - begin)), seg.parse_special);
      begin = seg.end;
    }
    return r;
  }
  void clear() { text_ = SegmentedText(); }

 private:
  SegmentedText text_;
};

inline void MarkedText::append_range(const MarkedText& o, size_t begin, size_t end) {
  if (end > o.size()) end = o.size();
  if (begin >= end) return;
  size_t seg_begin = 0;
  for (const auto& seg : o.text_.segments) {
    const size_t b = begin > seg_begin ? begin : seg_begin;
    const size_t e = end < seg.end ? end : seg.end;
    if (b < e) text_.append(std::string_view(o.text_.text).substr(b, e - b), seg.parse_special);
    seg_begin = seg.end;
    if (seg_begin >= end) break;
  }
}

}  // namespace ubatch::jinja
