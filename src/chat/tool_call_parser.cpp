// scan_tool_calls / parse_tool_calls (tool_call_parser.h): a cursor over the reply with one
// reader per call syntax. Every reader returns Ok, Incomplete (the text ended first) or Bad.
#include "chat/tool_call_parser.h"

#include <cctype>
#include <random>

namespace ubatch::chat {

namespace {

using ojson = nlohmann::ordered_json;

enum class Step { Ok, Incomplete, Bad };

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

const ToolDef* find_tool(const std::vector<ToolDef>& tools, std::string_view name) {
  for (const ToolDef& t : tools)
    if (t.name == name) return &t;
  return nullptr;
}

// The declared JSON type of a parameter ("" when the schema does not say, or lists several).
std::string param_type(const ToolDef* tool, const std::string& key) {
  if (!tool) return "";
  auto props = tool->parameters.find("properties");
  if (props == tool->parameters.end() || !props->is_object()) return "";
  auto p = props->find(key);
  if (p == props->end() || !p->is_object()) return "";
  auto t = p->find("type");
  if (t == p->end() || !t->is_string()) return "";
  return t->get<std::string>();
}

class Cursor {
 public:
  Cursor(std::string_view text, size_t pos, bool final) : s_(text), pos_(pos), final_(final) {}

  size_t pos() const { return pos_; }
  bool at_end() const { return pos_ >= s_.size(); }
  void skip_ws() {
    while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
  }
  bool rest_is_ws() const {
    for (size_t i = pos_; i < s_.size(); ++i)
      if (!is_ws(s_[i])) return false;
    return true;
  }
  // True when the (whitespace-trimmed) marker starts here, after whitespace. Incomplete when
  // the text so far is a prefix of it.
  Step peek_marker(std::string_view marker) const {
    size_t p = pos_;
    while (p < s_.size() && is_ws(s_[p])) ++p;
    const std::string_view m = trim(marker);
    if (m.empty()) return Step::Ok;
    const std::string_view rest = s_.substr(p);
    if (rest.size() < m.size()) return m.substr(0, rest.size()) == rest ? Step::Incomplete : Step::Bad;
    return rest.substr(0, m.size()) == m ? Step::Ok : Step::Bad;
  }
  // Consumes a marker after any whitespace: its whitespace runs match any whitespace (or
  // none), other bytes exactly.
  Step marker(std::string_view m) {
    size_t p = pos_;
    while (p < s_.size() && is_ws(s_[p])) ++p;
    size_t i = 0;
    while (i < m.size()) {
      if (is_ws(m[i])) {
        while (i < m.size() && is_ws(m[i])) ++i;
        while (p < s_.size() && is_ws(s_[p])) ++p;
        continue;
      }
      if (p >= s_.size()) return Step::Incomplete;
      if (s_[p] != m[i]) return Step::Bad;
      ++p;
      ++i;
    }
    pos_ = p;
    return Step::Ok;
  }
  // A closing marker: at the very end of a final text it may be missing.
  Step closer(std::string_view m) {
    if (trim(m).empty()) return marker(m);
    const Step st = marker(m);
    if (st == Step::Incomplete && final_ && rest_is_ws()) {
      pos_ = s_.size();
      return Step::Ok;
    }
    if (st == Step::Bad && final_ && rest_is_ws()) return Step::Ok;
    return st;
  }
  // Text up to (not including) `end` — found by its first word (the bytes before its first
  // inner whitespace, which marker() then matches loosely); the cursor stays before `end`.
  Step until(std::string_view end, std::string& out) {
    std::string_view e = trim(end).empty() ? end : trim(end);
    for (size_t k = 0; k < e.size(); ++k)
      if (is_ws(e[k])) {
        e = e.substr(0, k);
        break;
      }
    size_t found = std::string_view::npos;
    if (trim(end).empty()) {  // a whitespace terminator: any whitespace or '<'
      for (size_t p = pos_; p < s_.size(); ++p)
        if (is_ws(s_[p]) || s_[p] == '<') {
          found = p;
          break;
        }
    } else {
      found = s_.find(e, pos_);
    }
    if (found == std::string_view::npos) return Step::Incomplete;
    out = std::string(s_.substr(pos_, found - pos_));
    pos_ = found;
    return Step::Ok;
  }
  // Raw text up to the first occurrence of `end` (untrimmed search string).
  Step raw_until(std::string_view end, std::string& out) {
    const size_t found = s_.find(end, pos_);
    if (found == std::string_view::npos) return Step::Incomplete;
    out = std::string(s_.substr(pos_, found - pos_));
    pos_ = found;
    return Step::Ok;
  }
  // The end of the JSON value starting here (strings and nesting tracked; scalars end at a
  // delimiter). Incomplete when the text ends inside it.
  Step json_value(size_t& end) const {
    size_t p = pos_;
    if (p >= s_.size()) return Step::Incomplete;
    const char c0 = s_[p];
    if (c0 == '"') {
      for (++p; p < s_.size(); ++p) {
        if (s_[p] == '\\') {
          ++p;
        } else if (s_[p] == '"') {
          end = p + 1;
          return Step::Ok;
        }
      }
      return Step::Incomplete;
    }
    if (c0 == '{' || c0 == '[') {
      int depth = 0;
      bool in_str = false;
      for (; p < s_.size(); ++p) {
        const char c = s_[p];
        if (in_str) {
          if (c == '\\')
            ++p;
          else if (c == '"')
            in_str = false;
        } else if (c == '"') {
          in_str = true;
        } else if (c == '{' || c == '[') {
          if (++depth > 128) return Step::Bad;
        } else if (c == '}' || c == ']') {
          if (--depth == 0) {
            end = p + 1;
            return Step::Ok;
          }
        }
      }
      return Step::Incomplete;
    }
    // number, true, false, null
    for (; p < s_.size(); ++p) {
      const char c = s_[p];
      if (is_ws(c) || c == ',' || c == '}' || c == ']') break;
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.')) return Step::Bad;
    }
    if (p == pos_) return Step::Bad;
    if (p >= s_.size() && !final_) return Step::Incomplete;
    end = p;
    return Step::Ok;
  }
  std::string_view slice(size_t a, size_t b) const { return s_.substr(a, b - a); }
  std::string_view rest() const { return s_.substr(std::min(pos_, s_.size())); }
  void set(size_t p) { pos_ = p; }
  bool final() const { return final_; }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }

 private:
  std::string_view s_;
  size_t pos_;
  bool final_;
};

bool parse_json(std::string_view text, ojson& out) {
  try {
    out = ojson::parse(text);
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

#define UBATCH_STEP(expr)                \
  do {                                   \
    const Step step_ = (expr);           \
    if (step_ != Step::Ok) return step_; \
  } while (0)

// Arguments as a JSON value: an object (or, for llama3-style "parameters", a string holding one).
Step read_args_value(Cursor& c, PartialCall& call) {
  c.skip_ws();
  size_t end = 0;
  const size_t start = c.pos();
  const Step st = c.json_value(end);
  if (st == Step::Incomplete) {
    if (c.peek() == '{') call.arguments = std::string(c.rest());
    return st;
  }
  if (st == Step::Bad) return st;
  ojson v;
  if (!parse_json(c.slice(start, end), v)) return Step::Bad;
  if (v.is_string()) {  // arguments given as a JSON string holding the object
    ojson inner;
    if (!parse_json(v.get<std::string>(), inner) || !inner.is_object()) return Step::Bad;
    call.arguments = v.get<std::string>();
  } else if (v.is_object()) {
    call.arguments = std::string(c.slice(start, end));
  } else {
    return Step::Bad;
  }
  call.args_done = true;
  c.set(end);
  return Step::Ok;
}

// {name_key: "…", args_key: {…}} in any member order.
Step read_call_object(Cursor& c, const ToolFormat& f, PartialCall& call) {
  c.skip_ws();
  if (c.at_end()) return Step::Incomplete;
  if (c.peek() != '{') return Step::Bad;
  c.set(c.pos() + 1);
  bool first = true;
  for (;;) {
    c.skip_ws();
    if (c.at_end()) return Step::Incomplete;
    if (c.peek() == '}') {
      c.set(c.pos() + 1);
      break;
    }
    if (!first) {
      if (c.peek() != ',') return Step::Bad;
      c.set(c.pos() + 1);
      c.skip_ws();
    }
    first = false;
    size_t kend = 0;
    const size_t kstart = c.pos();
    if (c.peek() != '"') return c.at_end() ? Step::Incomplete : Step::Bad;
    UBATCH_STEP(c.json_value(kend));
    ojson key;
    if (!parse_json(c.slice(kstart, kend), key) || !key.is_string()) return Step::Bad;
    c.set(kend);
    c.skip_ws();
    if (c.at_end()) return Step::Incomplete;
    if (c.peek() != ':') return Step::Bad;
    c.set(c.pos() + 1);
    c.skip_ws();
    const std::string k = key.get<std::string>();
    bool is_args = k == f.args_key;
    for (std::string_view alias : f.args_key_aliases) is_args = is_args || k == alias;
    if (k == f.name_key) {
      size_t vend = 0;
      const size_t vstart = c.pos();
      UBATCH_STEP(c.json_value(vend));
      ojson name;
      if (!parse_json(c.slice(vstart, vend), name) || !name.is_string()) return Step::Bad;
      call.name = name.get<std::string>();
      call.name_done = true;
      c.set(vend);
    } else if (is_args) {
      UBATCH_STEP(read_args_value(c, call));
    } else {  // another member (an id, a type): skipped
      size_t vend = 0;
      UBATCH_STEP(c.json_value(vend));
      c.set(vend);
    }
  }
  if (!call.name_done || !call.args_done) {
    if (call.name_done && !call.args_done) {  // a call without arguments: an empty object
      call.arguments = "{}";
      call.args_done = true;
    } else {
      return Step::Bad;
    }
  }
  return Step::Ok;
}

// [call, call, …]
Step read_call_array(Cursor& c, const ToolFormat& f, std::vector<PartialCall>& calls, bool name_map) {
  c.skip_ws();
  if (c.at_end()) return Step::Incomplete;
  if (c.peek() != '[') return Step::Bad;
  c.set(c.pos() + 1);
  for (bool first = true;; first = false) {
    c.skip_ws();
    if (c.at_end()) return Step::Incomplete;
    if (c.peek() == ']') {
      c.set(c.pos() + 1);
      return Step::Ok;
    }
    if (!first) {
      if (c.peek() != ',') return Step::Bad;
      c.set(c.pos() + 1);
      c.skip_ws();
    }
    calls.emplace_back();
    PartialCall& call = calls.back();
    if (!name_map) {
      UBATCH_STEP(read_call_object(c, f, call));
      continue;
    }
    // {"NAME": {args}}
    if (c.at_end()) return Step::Incomplete;
    if (c.peek() != '{') return Step::Bad;
    c.set(c.pos() + 1);
    c.skip_ws();
    size_t kend = 0;
    const size_t kstart = c.pos();
    if (c.at_end()) return Step::Incomplete;
    if (c.peek() != '"') return Step::Bad;
    UBATCH_STEP(c.json_value(kend));
    ojson key;
    if (!parse_json(c.slice(kstart, kend), key) || !key.is_string()) return Step::Bad;
    call.name = key.get<std::string>();
    call.name_done = true;
    c.set(kend);
    UBATCH_STEP(c.marker(":"));
    UBATCH_STEP(read_args_value(c, call));
    UBATCH_STEP(c.marker("}"));
  }
}

// call_open [ID id_before_name] NAME name_end|id_open… {args} call_close
Step read_name_then_json(Cursor& c, const ToolFormat& f, PartialCall& call) {
  if (!f.id_before_name.empty()) {
    std::string id;
    UBATCH_STEP(c.until(f.id_before_name, id));
    UBATCH_STEP(c.marker(f.id_before_name));
  }
  // The name ends at name_end or at id_open, whichever comes first.
  std::string name;
  std::string_view rest = c.rest();
  size_t a = rest.find(trim(f.name_end));
  size_t b = f.id_open.empty() ? std::string_view::npos : rest.find(f.id_open);
  if (a == std::string_view::npos && b == std::string_view::npos) {
    if (rest.find_first_of("{[") != std::string_view::npos && c.final()) return Step::Bad;
    return c.final() ? Step::Bad : Step::Incomplete;
  }
  const size_t n = std::min(a, b);
  name = std::string(trim(rest.substr(0, n)));
  c.set(c.pos() + n);
  if (!f.name_prefix.empty() && name.rfind(f.name_prefix, 0) == 0) name = name.substr(f.name_prefix.size());
  if (f.name_index_suffix) {
    const size_t colon = name.rfind(':');
    if (colon != std::string::npos) name = name.substr(0, colon);
  }
  call.name = name;
  call.name_done = true;
  if (n == b) {
    UBATCH_STEP(c.marker(f.id_open));
    std::string id;
    UBATCH_STEP(c.until(f.id_end, id));
    UBATCH_STEP(c.marker(f.id_end));
  } else {
    UBATCH_STEP(c.marker(f.name_end));
  }
  UBATCH_STEP(read_args_value(c, call));
  return c.closer(f.call_close);
}

// call_open NAME name_end (param_open KEY key_end VALUE value_end)* call_close
Step read_xml_call(Cursor& c, const ToolFormat& f, const std::vector<ToolDef>& tools, PartialCall& call) {
  std::string name;
  UBATCH_STEP(c.until(f.name_end, name));
  call.name = std::string(trim(name));
  call.name_done = true;
  UBATCH_STEP(c.marker(f.name_end));
  const ToolDef* tool = find_tool(tools, call.name);
  ojson args = ojson::object();
  for (;;) {
    const Step at_param = c.peek_marker(f.param_open);
    if (at_param == Step::Incomplete) return Step::Incomplete;
    if (at_param == Step::Bad) break;
    UBATCH_STEP(c.marker(f.param_open));
    std::string key;
    UBATCH_STEP(c.until(f.key_end, key));
    key = std::string(trim(key));
    UBATCH_STEP(c.marker(f.key_end));
    std::string value;
    UBATCH_STEP(c.raw_until(trim(f.value_end), value));
    UBATCH_STEP(c.marker(f.value_end));
    // The format writes one newline around a value; everything else is the value.
    std::string_view v = value;
    if (!v.empty() && v.front() == '\n') v.remove_prefix(1);
    if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
    const std::string type = param_type(tool, key);
    ojson parsed;
    if (type != "string" && parse_json(v, parsed))
      args[key] = parsed;
    else
      args[key] = std::string(v);
  }
  UBATCH_STEP(c.closer(f.call_close));
  // The values are raw model output and may hold invalid UTF-8 (found by tool_call_fuzz: dump()
  // would throw): such bytes become U+FFFD rather than an exception.
  call.arguments = args.dump(-1, ' ', false, ojson::error_handler_t::replace);
  call.args_done = true;
  return Step::Ok;
}

// The calls after the trigger, per syntax.
Step read_calls(Cursor& c, const ToolFormat& f, const std::vector<ToolDef>& tools, std::vector<PartialCall>& calls) {
  switch (f.syntax) {
    case CallSyntax::GenericObject: {
      UBATCH_STEP(c.marker("{"));
      UBATCH_STEP(c.marker(" \"tool_calls\" : "));
      UBATCH_STEP(read_call_array(c, f, calls, false));
      return c.closer("}");
    }
    case CallSyntax::JsonArray:
    case CallSyntax::JsonNameMap: {
      UBATCH_STEP(c.marker(f.section_open));
      UBATCH_STEP(read_call_array(c, f, calls, f.syntax == CallSyntax::JsonNameMap));
      return c.closer(f.section_close);
    }
    case CallSyntax::JsonObject:
    case CallSyntax::NameThenJson:
    case CallSyntax::XmlParams: {
      if (!f.section_open.empty()) UBATCH_STEP(c.marker(f.section_open));
      for (size_t k = 0;; ++k) {
        if (k > 0) {
          if (f.single_call) break;
          const Step more = c.peek_marker(f.call_open.empty() ? std::string_view("{") : f.call_open);
          if (more == Step::Incomplete && !c.rest_is_ws()) return Step::Incomplete;
          if (more != Step::Ok) break;
        }
        c.skip_ws();  // the separator between calls
        if (!f.call_open.empty()) UBATCH_STEP(c.marker(f.call_open));
        // Mistral v3: [TOOL_CALLS][{"name", "arguments"}, …]
        if (f.syntax == CallSyntax::NameThenJson && k == 0) {
          c.skip_ws();
          if (c.at_end()) return Step::Incomplete;
          if (c.peek() == '[') {
            ToolFormat array = f;
            array.name_key = "name";
            array.args_key = "arguments";
            return read_call_array(c, array, calls, false);
          }
        }
        calls.emplace_back();
        if (f.syntax == CallSyntax::JsonObject) {
          UBATCH_STEP(read_call_object(c, f, calls.back()));
          UBATCH_STEP(c.closer(f.call_close));
        } else if (f.syntax == CallSyntax::NameThenJson) {
          UBATCH_STEP(read_name_then_json(c, f, calls.back()));
        } else {
          UBATCH_STEP(read_xml_call(c, f, tools, calls.back()));
        }
      }
      if (!f.section_close.empty()) return c.closer(f.section_close);
      return Step::Ok;
    }
  }
  return Step::Bad;
}

#undef UBATCH_STEP

// Where the calls start: the trigger's offset, npos when absent; *maybe: the text ends with
// a prefix of the trigger (or, for start-only triggers, nothing but whitespace so far).
size_t find_trigger(const ToolFormat& f, std::string_view text, bool* maybe) {
  *maybe = false;
  if (f.trigger_at_start) {
    size_t p = 0;
    while (p < text.size() && is_ws(text[p])) ++p;
    if (p == text.size()) {
      *maybe = true;
      return std::string_view::npos;
    }
    const std::string_view rest = text.substr(p);
    if (rest.size() < f.trigger.size() && f.trigger.substr(0, rest.size()) == rest) *maybe = true;
    return rest.substr(0, f.trigger.size()) == f.trigger ? p : std::string_view::npos;
  }
  const size_t at = text.find(f.trigger);
  if (at != std::string_view::npos) return at;
  for (size_t n = std::min(f.trigger.size() - 1, text.size()); n > 0; --n)
    if (text.substr(text.size() - n) == f.trigger.substr(0, n)) {
      *maybe = true;
      break;
    }
  return std::string_view::npos;
}

}  // namespace

CallScan scan_tool_calls(const ToolFormat& f, std::string_view text, const std::vector<ToolDef>& tools, bool final) {
  CallScan out;
  bool maybe = false;
  const size_t at = find_trigger(f, text, &maybe);
  if (at == std::string_view::npos) {
    out.state = CallScan::State::NoCalls;
    return out;
  }
  out.calls_begin = at;
  Cursor c(text, at, final);
  const Step st = read_calls(c, f, tools, out.calls);
  if (st == Step::Incomplete) {
    out.state = final ? CallScan::State::Malformed : CallScan::State::Incomplete;
    // A call whose name is complete and unknown makes the calls malformed whatever follows;
    // a reply cut after one is not "cut inside valid calls" (a stream that saw the same text
    // end at that call's close decided so already: streamed and whole replies agree).
    bool bad_name = false;
    for (const PartialCall& call : out.calls) bad_name = bad_name || (call.name_done && !find_tool(tools, call.name));
    out.cut = final && !bad_name;
    return out;
  }
  if (st == Step::Ok) out.calls_end = c.pos();
  if (st == Step::Bad || !c.rest_is_ws() || out.calls.empty()) {
    out.text_after = st == Step::Ok && !out.calls.empty();
    out.state = CallScan::State::Malformed;
    return out;
  }
  for (const PartialCall& call : out.calls)
    if (!call.name_done || !call.args_done || !find_tool(tools, call.name)) {
      out.state = CallScan::State::Malformed;
      return out;
    }
  out.state = CallScan::State::Done;
  return out;
}

std::vector<size_t> complete_calls(const CallScan& scan, const std::vector<ToolDef>& tools) {
  std::vector<size_t> out;
  std::vector<nlohmann::json> seen_args;  // the arguments of the calls kept, as JSON values
  for (size_t k = 0; k < scan.calls.size(); ++k) {
    const PartialCall& c = scan.calls[k];
    if (!c.name_done || !c.args_done || !find_tool(tools, c.name)) break;
    nlohmann::json args = nlohmann::json::parse(c.arguments, nullptr, false);
    bool repeated = false;
    for (size_t j = 0; j < out.size() && !repeated; ++j)
      repeated = scan.calls[out[j]].name == c.name && seen_args[j] == args;
    if (repeated) continue;
    out.push_back(k);
    seen_args.push_back(std::move(args));
  }
  return out;
}

bool repeats_a_call(const ToolFormat& f, std::string_view text, const std::vector<ToolDef>& tools) {
  const CallScan scan = scan_tool_calls(f, text, tools, false);
  if (scan.state != CallScan::State::Incomplete && scan.state != CallScan::State::Done) return false;
  size_t read = 0;  // calls read completely, before the first that is not
  for (const PartialCall& c : scan.calls) {
    if (!c.name_done || !c.args_done || !find_tool(tools, c.name)) break;
    ++read;
  }
  return complete_calls(scan, tools).size() < read;
}

ParsedReply parse_tool_calls(const ToolFormat& f, std::string_view text, const std::vector<ToolDef>& tools) {
  ParsedReply r;
  const CallScan scan = scan_tool_calls(f, text, tools, true);
  const std::vector<size_t> keep =
      scan.state == CallScan::State::Done || scan.cut ? complete_calls(scan, tools) : std::vector<size_t>{};
  if (keep.empty()) {
    r.content = std::string(text);
    return r;
  }
  std::string_view before = text.substr(0, scan.calls_begin);
  while (!before.empty() && is_ws(before.back())) before.remove_suffix(1);
  r.content = std::string(before);
  for (size_t k : keep) r.calls.push_back(ToolCall{"", scan.calls[k].name, scan.calls[k].arguments});
  return r;
}

std::string new_tool_call_id() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

}  // namespace ubatch::chat
