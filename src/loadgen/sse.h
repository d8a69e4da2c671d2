// An incremental parser for Server-Sent Events (text/event-stream), as the WHATWG HTML
// Living Standard §9.2 "Server-sent events" defines the stream format: lines end in CRLF,
// LF or CR; a blank line dispatches the event; "data:" lines append to the data buffer
// (joined with "\n"); one space after the colon is dropped; lines starting with ':' are
// comments; "event:" sets the type, "id:" the last event id; a leading UTF-8 BOM is
// skipped; an event cut off by the end of the stream is not dispatched.
//
// Bytes may arrive in any split (a CRLF or a UTF-8 sequence split across reads, several
// events in one read): feed() keeps what is incomplete for the next call.
// OpenAI-style streams end with the event whose data is "[DONE]".
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ubatch::loadgen {

struct SseEvent {
  std::string type = "message";  // "event:" field
  std::string data;              // data lines joined with "\n"
  std::string id;                // last event id seen
  bool is_done() const { return data == "[DONE]"; }
};

class SseParser {
 public:
  // Parses the bytes; appends every event completed by them to `out`.
  void feed(std::string_view bytes, std::vector<SseEvent>& out);
  // True when bytes of an unfinished line or event are pending (a stream that ends now was
  // cut off mid-event).
  bool has_partial() const;
  // Total events dispatched so far.
  size_t n_events() const { return n_events_; }

 private:
  void line(std::string_view l, std::vector<SseEvent>& out);

  std::string buf_;         // bytes of the unfinished line
  bool after_cr_ = false;   // the last byte seen was CR (a following LF belongs to it)
  bool bom_checked_ = false;
  bool have_data_ = false;  // a data field was seen in the current event
  std::string data_, type_, id_;
  size_t n_events_ = 0;
};

}  // namespace ubatch::loadgen
