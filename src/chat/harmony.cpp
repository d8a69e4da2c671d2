// parse_harmony and HarmonyStream (harmony.h). The reply is cut into markers and text runs,
// then read by a small state machine (between messages, in a header, in a body). The stream
// re-reads the reply so far after every piece, less a tail that may still become a marker,
// and sends what lies beyond what it sent; every part of the reading only ever grows as text
// is appended, so the pieces add up to the whole reply's reading.
#include "chat/harmony.h"

#include <algorithm>
#include <array>

#include <nlohmann/json.hpp>

namespace ubatch::chat {

namespace {

enum class Marker { Start, End, Return, Call, Channel, Message, Constrain };

struct MarkerText {
  Marker marker;
  std::string_view text;
};

constexpr std::array<MarkerText, 7> kMarkers = {{{Marker::Start, "<|start|>"},
                                                 {Marker::End, "<|end|>"},
                                                 {Marker::Return, "<|return|>"},
                                                 {Marker::Call, "<|call|>"},
                                                 {Marker::Channel, "<|channel|>"},
                                                 {Marker::Message, "<|message|>"},
                                                 {Marker::Constrain, "<|constrain|>"}}};

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The marker starting at text[i], if any.
const MarkerText* marker_at(std::string_view text, size_t i) {
  for (const MarkerText& m : kMarkers)
    if (text.compare(i, m.text.size(), m.text) == 0) return &m;
  return nullptr;
}

// The length of the longest suffix of `text` that is a proper prefix of some marker.
size_t partial_marker_tail(std::string_view text) {
  size_t best = 0;
  for (const MarkerText& m : kMarkers)
    for (size_t n = std::min(m.text.size() - 1, text.size()); n > best; --n)
      if (text.substr(text.size() - n) == m.text.substr(0, n)) {
        best = n;
        break;
      }
  return best;
}

// The word after `key` in a header ("" when absent): up to a blank or a marker.
std::string header_word(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return {};
  size_t i = at + key.size(), j = i;
  while (j < header.size() && !is_blank(header[j]) && header[j] != '<') ++j;
  return std::string(header.substr(i, j - i));
}

bool starts_header(std::string_view text) {
  return text.substr(0, kMarkers[4].text.size()) == kMarkers[4].text || text.substr(0, 3) == "to=";
}

// The reading of `text` (final: the whole reply; else the reply so far, without its held-back tail).
HarmonyReply read(std::string_view text, const std::vector<ToolDef>& tools, bool final) {
  HarmonyReply out;
  size_t i = 0;
  {  // Does the reply open with a header? Undecided while it may still.
    size_t b = 0;
    while (b < text.size() && is_blank(text[b])) ++b;
    const std::string_view rest = text.substr(b);
    const bool may_open = kMarkers[4].text.substr(0, rest.size()) == rest || std::string_view("to=").substr(0, rest.size()) == rest;
    if (!final && may_open && rest.size() < kMarkers[4].text.size()) return out;
    if (starts_header(rest)) i = b;
  }
  enum class State { Outside, Header, Body } state = starts_header(text.substr(i)) ? State::Header : State::Outside;
  enum class Kind { Reasoning, Content, Call } kind = Kind::Content;
  std::string header, body, call_name;
  size_t n_reasoning = 0, n_content = 0;

  auto open_body = [&] {
    const std::string channel = header_word(header, kMarkers[4].text);
    const std::string recipient = header_word(header, "to=");
    constexpr std::string_view kFunctions = "functions.";
    kind = channel == "analysis" ? Kind::Reasoning : Kind::Content;
    if (!tools.empty() && recipient.compare(0, kFunctions.size(), kFunctions) == 0) {
      kind = Kind::Call;
      call_name = recipient.substr(kFunctions.size());
    }
    if (kind == Kind::Reasoning) {
      if (n_reasoning++) out.reasoning += "\n";
      out.has_reasoning = true;
    } else if (kind == Kind::Content) {
      if (n_content++) out.content += "\n";
    }
    body.clear();
    header.clear();
    state = State::Body;
  };
  auto close_body = [&] {
    if (kind != Kind::Call) return;
    std::string_view args = body;
    while (!args.empty() && is_blank(args.front())) args.remove_prefix(1);
    while (!args.empty() && is_blank(args.back())) args.remove_suffix(1);
    const bool known = std::any_of(tools.begin(), tools.end(), [&](const ToolDef& t) { return t.name == call_name; });
    const nlohmann::json parsed = nlohmann::json::parse(args, nullptr, false);
    if (known && parsed.is_object()) {
      out.calls.push_back({"", call_name, std::string(args)});
    } else {
      if (n_content++) out.content += "\n";
      out.content += body;
    }
  };
  auto text_run = [&](std::string_view t) {
    switch (state) {
      case State::Outside: out.content += t; break;
      case State::Header: header += t; break;
      case State::Body:
        if (kind == Kind::Reasoning)
          out.reasoning += t;
        else if (kind == Kind::Content)
          out.content += t;
        else
          body += t;
        break;
    }
  };

  while (i < text.size()) {
    const size_t next = text.find("<|", i);
    const MarkerText* m = nullptr;
    size_t at = next;
    while (at != std::string_view::npos && !(m = marker_at(text, at))) at = text.find("<|", at + 2);
    if (at == std::string_view::npos) {
      text_run(text.substr(i));
      break;
    }
    if (at > i) text_run(text.substr(i, at - i));
    i = at + m->text.size();
    switch (m->marker) {
      case Marker::Start:  // a new message: its role and header follow
        if (state == State::Body) close_body();
        header.clear();
        state = State::Header;
        break;
      case Marker::Channel:
        if (state == State::Body) close_body();
        if (state != State::Header) header.clear();
        header += m->text;
        state = State::Header;
        break;
      case Marker::Message:
        if (state == State::Header) open_body();
        break;
      case Marker::Constrain:
        if (state == State::Header) header += ' ';
        break;
      case Marker::End:
      case Marker::Return:
      case Marker::Call:
        if (state == State::Body) close_body();
        header.clear();
        state = State::Outside;
        break;
    }
  }
  if (final && state == State::Body) close_body();  // <|return|> and <|call|> end generation unwritten
  return out;
}

}  // namespace

bool is_harmony_marker(std::string_view text) {
  return std::any_of(kMarkers.begin(), kMarkers.end(), [&](const MarkerText& m) { return m.text == text; });
}

bool template_is_harmony(std::string_view source) {
  return source.find("<|channel|>") != std::string_view::npos && source.find("<|message|>") != std::string_view::npos &&
         source.find("<|start|>") != std::string_view::npos;
}

std::string harmony_reply_start(std::string_view prompt) {
  constexpr std::string_view kOpen = "<|start|>assistant";
  const size_t at = prompt.rfind(kOpen);
  if (at == std::string_view::npos) return {};
  const std::string_view tail = prompt.substr(at + kOpen.size());
  for (std::string_view closer : {"<|end|>", "<|return|>", "<|call|>", "<|start|>"})
    if (tail.find(closer) != std::string_view::npos) return {};
  const size_t message = tail.find("<|message|>");
  if (message != std::string_view::npos && message + std::string_view("<|message|>").size() != tail.size()) return {};
  std::string_view header = tail;
  while (!header.empty() && is_blank(header.front())) header.remove_prefix(1);
  if (!header.empty() && !starts_header(header)) return {};
  return std::string(tail);
}

HarmonyReply parse_harmony(std::string_view reply, const std::vector<ToolDef>& tools) {
  return read(reply, tools, true);
}

HarmonyStream::Piece HarmonyStream::push(std::string_view text) {
  all_.append(text);
  return process(false);
}

HarmonyStream::Piece HarmonyStream::finish() { return process(true); }

HarmonyStream::Piece HarmonyStream::process(bool final) {
  std::string_view text = all_;
  if (!final) text.remove_suffix(partial_marker_tail(text));
  const HarmonyReply r = read(text, tools_, final);
  Piece p;
  if (r.reasoning.size() > sent_reasoning_) {
    p.reasoning = r.reasoning.substr(sent_reasoning_);
    sent_reasoning_ = r.reasoning.size();
  }
  if (r.content.size() > sent_content_) {
    p.content = r.content.substr(sent_content_);
    sent_content_ = r.content.size();
  }
  for (; sent_calls_ < r.calls.size(); ++sent_calls_) p.calls.push_back(r.calls[sent_calls_]);
  return p;
}

}  // namespace ubatch::chat
