#include "loadgen/sse.h"

namespace ubatch::loadgen {

void SseParser::feed(std::string_view bytes, std::vector<SseEvent>& out) {
  for (char c : bytes) {
    if (!bom_checked_) {
      // The BOM (EF BB BF) may itself arrive split: hold its bytes in buf_ until decided.
      static constexpr char kBom[] = "\xEF\xBB\xBF";
      buf_ += c;
      if (buf_.size() <= 3 && buf_ == std::string_view(kBom, buf_.size())) {
        if (buf_.size() == 3) buf_.clear(), bom_checked_ = true;
        continue;
      }
      bom_checked_ = true;
      std::string pending;
      pending.swap(buf_);
      feed(pending, out);  // replay: cannot recurse again (bom_checked_ is set)
      continue;
    }
    if (c == '\n') {
      if (after_cr_) {
        after_cr_ = false;  // second half of CRLF
        continue;
      }
      line(buf_, out);
      buf_.clear();
    } else if (c == '\r') {
      after_cr_ = true;
      line(buf_, out);
      buf_.clear();
    } else {
      after_cr_ = false;
      buf_ += c;
    }
  }
}

bool SseParser::has_partial() const { return !buf_.empty() || have_data_ || !type_.empty(); }

void SseParser::line(std::string_view l, std::vector<SseEvent>& out) {
  if (l.empty()) {  // dispatch
    if (have_data_) {
      SseEvent ev;
      if (!type_.empty()) ev.type = type_;
      ev.data = std::move(data_);
      if (!ev.data.empty() && ev.data.back() == '\n') ev.data.pop_back();
      ev.id = id_;
      out.push_back(std::move(ev));
      ++n_events_;
    }
    data_.clear();
    type_.clear();
    have_data_ = false;
    return;
  }
  if (l[0] == ':') return;  // comment
  std::string_view field = l, value;
  const size_t colon = l.find(':');
  if (colon != std::string_view::npos) {
    field = l.substr(0, colon);
    value = l.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    data_.append(value);
    data_ += '\n';
    have_data_ = true;
  } else if (field == "event") {
    type_ = std::string(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) id_ = std::string(value);
  }
  // "retry" and unknown fields are ignored.
}

}  // namespace ubatch::loadgen
