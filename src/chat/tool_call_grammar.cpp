// tool_call_grammar (tool_call_grammar.h): GBNF for calls in each syntax, the free-text
// rules for tool_choice auto, and the rule renaming that lets one file hold every tool's
// argument grammar.
#include "chat/tool_call_grammar.h"

#include <algorithm>

#include <fmt/format.h>

#include "grammar/gbnf_text.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace ubatch::chat {

namespace {

using ojson = nlohmann::ordered_json;
using grammar::gbnf_literal;

// Calls in one reply under parallel_tool_calls. A bound, not a target: a small model under a
// forced choice may repeat its call until the grammar stops it (the repeats are dropped from
// the answer, tool_call_parser.h), so every call allowed costs its tokens.
constexpr int kMaxParallelCalls = 8;

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp = c;
    size_t len = 1;
    if (c >= 0xF0)
      cp = c & 0x07, len = 4;
    else if (c >= 0xE0)
      cp = c & 0x0F, len = 3;
    else if (c >= 0xC0)
      cp = c & 0x1F, len = 2;
    for (size_t k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string cp_literal(uint32_t cp) {
  std::string s;
  grammar::append_utf8(cp, s);
  return gbnf_literal(s);
}

// Rules `<name>-0 … <name>-(m-1)` whose language is every string (any length, empty
// included) that does not contain `word`: the states of the word's prefix automaton (state
// i: the text ends with the word's first i characters and not more). Right-recursive, so
// the parse stack stays flat however long the text runs.
std::string not_containing_rules(const std::string& name, std::string_view word) {
  const std::vector<uint32_t> w = code_points(word);
  const size_t m = w.size();
  std::vector<uint32_t> distinct;
  for (uint32_t c : w)
    if (std::find(distinct.begin(), distinct.end(), c) == distinct.end()) distinct.push_back(c);
  // δ(i, c): the longest prefix of w that ends the text w[0..i) + c.
  auto delta = [&](size_t i, uint32_t c) -> size_t {
    std::vector<uint32_t> t(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(i));
    t.push_back(c);
    for (size_t k = std::min(t.size(), m); k > 0; --k)
      if (std::equal(t.end() - static_cast<std::ptrdiff_t>(k), t.end(), w.begin())) return k;
    return 0;
  };
  std::vector<grammar::CharRange> others;
  for (uint32_t c : distinct) others.push_back({c, c});
  const std::string other_class = grammar::gbnf_class(grammar::complement_ranges(grammar::normalize_ranges(others)));
  std::string out;
  for (size_t i = 0; i < m; ++i) {
    out += fmt::format("{}-{} ::= \"\" | {} {}-0", name, i, other_class, name);
    for (uint32_t c : distinct) {
      const size_t next = delta(i, c);
      if (next >= m) continue;  // would complete the word
      out += fmt::format(" | {} {}-{}", cp_literal(c), name, next);
    }
    out += "\n";
  }
  return out;
}

bool all_spellable(const std::function<bool(std::string_view)>& spellable, std::initializer_list<std::string_view> s) {
  for (std::string_view x : s)
    if (!x.empty() && !spellable(x)) return false;
  return true;
}

struct Builder {
  const ToolFormat& f;
  const ToolRequest& req;
  std::string rules;                 // rules after root
  std::vector<size_t> tool_indices;  // the tools a call may name

  // The arguments grammar of tool i: rule t<i>-root.
  Status add_args(size_t i) {
    const ToolDef& t = req.tools[i];
    Result<std::string> g = grammar::json_schema_to_gbnf(t.parameters);
    if (!g) return Status::error(fmt::format("tools[{}] ('{}'): parameters: {}", i, t.name, g.message()));
    rules += prefix_gbnf_rules(*g, fmt::format("t{}-", i));
    return Status::ok();
  }

  // One property's value grammar (XmlParams): rule name returned.
  Result<std::string> add_value(size_t i, size_t k, const ojson& schema, std::string_view value_end) {
    const std::string name = fmt::format("t{}-p{}", i, k);
    const bool is_string = schema.is_object() && schema.contains("type") && schema["type"] == "string" &&
                           !schema.contains("enum") && !schema.contains("const") && !schema.contains("pattern") &&
                           !schema.contains("format");
    if (is_string) {  // raw text up to the closing marker
      rules += not_containing_rules(name + "-s", std::string(value_end));
      rules += fmt::format("{} ::= {}-s-0\n", name, name);
      return name;
    }
    Result<std::string> g = grammar::json_schema_to_gbnf(schema);
    if (!g) return Status::error(fmt::format("tools[{}] ('{}'): parameters: {}", i, req.tools[i].name, g.message()));
    rules += prefix_gbnf_rules(*g, name + "-");
    return name + "-root";
  }

  // {"name": "N", "arguments": ARGS}
  std::string json_call(size_t i, std::string_view name_key, std::string_view args_key) const {
    return gbnf_literal(fmt::format("{{\"{}\": \"{}\", \"{}\": ", name_key, req.tools[i].name, args_key)) +
           fmt::format(" t{}-root ", i) + gbnf_literal("}");
  }

  // The body of one call (without per-call open/close markers for JSON syntaxes).
  Result<std::string> call_body(size_t i, bool array_form) {
    if (array_form || f.syntax != CallSyntax::XmlParams)
      if (Status st = add_args(i); !st) return st;
    const ToolDef& t = req.tools[i];
    if (array_form) return json_call(i, "name", "arguments");
    switch (f.syntax) {
      case CallSyntax::GenericObject:
        return json_call(i, "name", "arguments");
      case CallSyntax::JsonObject:
      case CallSyntax::JsonArray:
        return json_call(i, f.name_key, f.args_key);
      case CallSyntax::JsonNameMap:
        return gbnf_literal(fmt::format("{{\"{}\": ", t.name)) + fmt::format(" t{}-root ", i) + gbnf_literal("}");
      case CallSyntax::NameThenJson: {
        std::string s;
        if (!f.id_before_name.empty()) s += fmt::format("[a-zA-Z0-9]{{9}} {} ", gbnf_literal(f.id_before_name));
        s += gbnf_literal(std::string(f.name_prefix) + t.name);
        if (f.name_index_suffix) s += " \":\" [0-9]{1,2}";
        s += fmt::format(" {} t{}-root", gbnf_literal(f.name_end), i);
        if (!f.call_close.empty()) s += fmt::format(" {}", gbnf_literal(f.call_close));
        return s;
      }
      case CallSyntax::XmlParams: {
        std::string s = gbnf_literal(t.name) + " " + gbnf_literal(f.name_end);
        const ojson* props = nullptr;
        if (auto it = t.parameters.find("properties"); it != t.parameters.end() && it->is_object()) props = &*it;
        std::vector<std::string> required;
        if (auto it = t.parameters.find("required"); it != t.parameters.end() && it->is_array())
          for (const auto& r : *it)
            if (r.is_string()) required.push_back(r.get<std::string>());
        size_t k = 0;
        if (props) {
          for (auto it = props->begin(); it != props->end(); ++it, ++k) {
            Result<std::string> v =
                add_value(i, k, it.value(), std::string(f.value_end).substr(0, f.value_end.find_last_not_of("\n") + 1));
            if (!v) return v.status();
            const std::string param = gbnf_literal(std::string(f.param_open) + it.key() + std::string(f.key_end)) +
                                      " " + *v + " " + gbnf_literal(f.value_end);
            const bool req_param = std::find(required.begin(), required.end(), it.key()) != required.end();
            s += req_param ? fmt::format(" {}", param) : fmt::format(" ({})?", param);
          }
        }
        s += fmt::format(" {}", gbnf_literal(f.call_close));
        return s;
      }
    }
    return Status::error("internal: unknown call syntax");
  }
};

}  // namespace

std::string prefix_gbnf_rules(std::string_view text, std::string_view prefix) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  size_t i = 0;
  auto ident = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"' || c == '[') {  // literal or class: copied to its unescaped end
      const char close = c == '"' ? '"' : ']';
      out += c;
      for (++i; i < text.size(); ++i) {
        out += text[i];
        if (text[i] == '\\' && i + 1 < text.size()) {
          out += text[++i];
        } else if (text[i] == close) {
          ++i;
          break;
        }
      }
    } else if (c == '{') {  // repetition counts
      while (i < text.size() && text[i] != '}') out += text[i++];
    } else if (c == '#') {
      while (i < text.size() && text[i] != '\n') out += text[i++];
    } else if (ident(c)) {
      out += prefix;
      while (i < text.size() && ident(text[i])) out += text[i++];
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

Result<ToolGrammar> tool_call_grammar(const ToolFormat& f, const ToolRequest& req,
                                      const std::function<bool(std::string_view)>& spellable,
                                      std::string_view reasoning_close) {
  Builder b{f, req, "", {}};
  if (req.choice.mode == ToolChoice::Mode::Named) {
    for (size_t i = 0; i < req.tools.size(); ++i)
      if (req.tools[i].name == req.choice.name) b.tool_indices.push_back(i);
    if (b.tool_indices.empty())
      return Status::error(
          fmt::format("tool_choice names the function '{}', which is not among the tools", req.choice.name));
  } else {
    for (size_t i = 0; i < req.tools.size(); ++i) b.tool_indices.push_back(i);
  }
  const bool forced = req.choice.mode != ToolChoice::Mode::Auto;
  ToolGrammar out;

  // Markers the model cannot write as text.
  const bool generic = f.syntax == CallSyntax::GenericObject;
  const std::string_view opener = !f.section_open.empty() ? f.section_open : f.call_open;
  const bool opener_ok = generic || opener.empty() || spellable(opener);
  const bool inner_ok = generic || all_spellable(spellable, {f.name_end, f.id_open, f.id_end, f.id_before_name,
                                                             f.param_open, f.key_end, f.value_end});
  const bool call_open_ok = f.call_open.empty() || spellable(f.call_open);
  if (!opener_ok && !forced) return out;  // auto: free generation, parsed afterwards
  // Markers inside a call that cannot be written: the calls as a JSON array after the opener.
  const bool array_form = !generic && f.syntax != CallSyntax::JsonArray && f.syntax != CallSyntax::JsonNameMap &&
                          (!inner_ok || (!call_open_ok && f.section_open.empty() && !f.single_call && req.parallel &&
                                         f.syntax != CallSyntax::JsonObject));
  std::string lead;  // grammar text before the calls
  if (!opener_ok) {
    out.prefill = std::string(opener);
  } else if (!f.section_open.empty()) {
    lead = gbnf_literal(f.section_open);
  }

  // call ::= alternatives over the allowed tools.
  std::string call_alts;
  for (size_t k = 0; k < b.tool_indices.size(); ++k) {
    Result<std::string> body = b.call_body(b.tool_indices[k], array_form);
    if (!body) return body.status();
    call_alts += (k ? " | " : "") + std::string("(") + *body + ")";
  }
  const bool many = req.parallel && !f.single_call;
  const std::string more = many ? fmt::format("{{0,{}}}", kMaxParallelCalls - 1) : "{0,0}";
  std::string calls;
  if (generic) {
    calls = gbnf_literal("{\"tool_calls\": [") + " call (" + gbnf_literal(", ") + " call)" + more + " " +
            gbnf_literal("]}");
  } else if (array_form || f.syntax == CallSyntax::JsonArray || f.syntax == CallSyntax::JsonNameMap) {
    calls = lead + " " + gbnf_literal("[") + " call (" + gbnf_literal(", ") + " call)" + more + " " + gbnf_literal("]");
    if (!f.section_close.empty() && !array_form && spellable(f.section_close))
      calls += fmt::format(" {}", gbnf_literal(f.section_close));
  } else {
    // Per-call markers: the first call's opener may be the prefill.
    const bool per_call_open = !f.call_open.empty();
    const bool first_open_in_grammar = per_call_open && (opener_ok || !f.section_open.empty());
    const bool close_ok = f.call_close.empty() || spellable(f.call_close);
    const std::string open = per_call_open ? gbnf_literal(f.call_open) + " " : "";
    const std::string close = (f.syntax == CallSyntax::JsonObject && !f.call_close.empty() && close_ok)
                                  ? fmt::format(" {}", gbnf_literal(f.call_close))
                                  : "";
    const std::string first = (first_open_in_grammar ? open : "") + "call" + close;
    const bool repeat_ok = many && (!per_call_open || call_open_ok) && close_ok;
    const std::string sep = f.call_sep.empty() ? "" : gbnf_literal(f.call_sep) + " ";
    calls = lead + " " + first;
    if (repeat_ok) calls += " (" + sep + open + "call" + close + ")" + more;
    if (!f.section_close.empty() && spellable(f.section_close)) calls += fmt::format(" {}", gbnf_literal(f.section_close));
  }

  std::string root;
  std::string reasoning_rules;
  if (forced && out.prefill.empty() && !reasoning_close.empty() && spellable(reasoning_close)) {
    // Finish the open reasoning block, close it, then the calls.
    root = "root ::= reasoning-0 " + gbnf_literal(reasoning_close) + " [ \\t\\n]{0,20} " + calls + "\n";
    reasoning_rules = not_containing_rules("reasoning", reasoning_close);
  } else if (forced || !out.prefill.empty()) {
    root = "root ::= " + calls + "\n";
  } else if (f.trigger_at_start) {
    // Either the calls (opening the reply) or text whose first non-blank character is not '{'.
    root = "root ::= [ \\t\\n]{0,20} (calls | [^{ \\t\\n] .*)?\ncalls ::= " + calls + "\n";
  } else {
    root = "root ::= free-0 calls?\ncalls ::= " + calls + "\n" + not_containing_rules("free", f.trigger);
  }
  out.gbnf = root + reasoning_rules + "call ::= " + call_alts + "\n" + b.rules;
  return out;
}

}  // namespace ubatch::chat
