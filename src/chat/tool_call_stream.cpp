// ToolCallStream (tool_call_stream.h): re-scans the reply after every piece (replies are
// short; the scan is linear) and sends what the scan shows beyond what was sent.
#include "chat/tool_call_stream.h"

#include <algorithm>

namespace ubatch::chat {

namespace {

bool is_json_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

ToolCallStream::ToolCallStream(const ToolFormat& format, const std::vector<ToolDef>& tools, std::string prefill,
                               bool constrained)
    : format_(format),
      tools_(tools),
      all_(std::move(prefill)),
      prefill_len_(all_.size()),
      content_from_(all_.size()),
      constrained_(constrained) {}

ToolStreamDelta ToolCallStream::push(std::string_view text) {
  all_.append(text);
  return process(false);
}

ToolStreamDelta ToolCallStream::finish() { return process(true); }

void ToolCallStream::emit_content(ToolStreamDelta& d, size_t upto) {
  if (upto > content_from_) {
    d.content += all_.substr(content_from_, upto - content_from_);
    content_from_ = upto;
  }
}

ToolStreamDelta ToolCallStream::process(bool final) {
  ToolStreamDelta d;
  if (mode_ == Mode::PlainOnly) {
    emit_content(d, all_.size());
    return d;
  }
  const CallScan scan = scan_tool_calls(format_, all_, tools_, final);
  if (mode_ == Mode::Text) {
    if (scan.state == CallScan::State::NoCalls) {
      if (final) {
        emit_content(d, all_.size());
        return d;
      }
      // Hold back what may still become the trigger, and trailing whitespace.
      size_t safe = all_.size();
      if (format_.trigger_at_start) {
        size_t p = 0;
        while (p < all_.size() && is_json_ws(all_[p])) ++p;
        const std::string_view rest = std::string_view(all_).substr(p);
        if (rest.empty() || (rest.size() < format_.trigger.size() && format_.trigger.substr(0, rest.size()) == rest))
          return d;               // undecided
        mode_ = Mode::PlainOnly;  // the reply does not start with the calls: all text
        emit_content(d, all_.size());
        return d;
      }
      for (size_t n = std::min(format_.trigger.size() - 1, all_.size()); n > 0; --n)
        if (std::string_view(all_).substr(all_.size() - n) == format_.trigger.substr(0, n)) {
          safe = all_.size() - n;
          break;
        }
      while (safe > content_from_ && is_json_ws(all_[safe - 1])) --safe;
      emit_content(d, safe);
      return d;
    }
    // The calls begin: the content before them, without its trailing whitespace.
    calls_begin_ = scan.calls_begin;
    size_t end = std::max(calls_begin_, content_from_);
    while (end > content_from_ && is_json_ws(all_[end - 1])) --end;
    emit_content(d, end);
    held_from_ = end;
    content_from_ = std::max(calls_begin_, content_from_);
    mode_ = Mode::Calls;
  }
  // Calls mode.
  const bool ended = final && (scan.state == CallScan::State::Done || scan.cut);
  std::vector<size_t> keep;
  if (scan.state != CallScan::State::Malformed || scan.cut) keep = complete_calls(scan, tools_);
  if ((scan.state == CallScan::State::Malformed && !scan.cut) || (ended && keep.empty())) {
    // Not calls after all (or cut before one was complete): the rest is content.
    mode_ = Mode::PlainOnly;
    content_from_ = std::max(held_from_, prefill_len_);
    emit_content(d, all_.size());
    return d;
  }
  content_from_ = all_.size();                    // text inside the calls is never content
  if (!constrained_ && !ended) return d;          // held until valid
  for (size_t j = sent_; j < keep.size(); ++j) {
    const PartialCall& c = scan.calls[keep[j]];
    d.calls.push_back(ToolCallDelta{static_cast<int>(j), new_tool_call_id(), c.name, c.arguments});
  }
  sent_ = std::max(sent_, keep.size());
  if (ended) calls_complete_ = true;
  return d;
}

}  // namespace ubatch::chat
