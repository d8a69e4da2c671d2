// Helpers for the template engine's unit tests (tests/test_template_*.cpp): render a source
// string with variables given as JSON, in the chat-template environment (trim_blocks,
// lstrip_blocks), and get the text or the error. Expected outputs in these tests are what
// Python jinja2 3.1 gives for the same template in transformers' environment.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "template/json.h"
#include "template/strftime.h"
#include "template/template.h"

namespace ubatch::jinja::test {

inline RenderOptions default_options() {
  RenderOptions o;
  o.now = make_date(2026, 7, 26);
  return o;
}

inline std::vector<std::pair<std::string, Value>> variables(const nlohmann::ordered_json& vars) {
  std::vector<std::pair<std::string, Value>> out;
  for (const auto& [k, v] : vars.items()) out.emplace_back(k, from_json(v));
  return out;
}

// Renders `source`; the rendered text, or "ERROR(<kind>): <message>".
inline std::string render(const std::string& source, const nlohmann::ordered_json& vars = nlohmann::ordered_json::object(),
                          const RenderOptions& options = default_options()) {
  auto t = Template::parse(source);
  if (!t) return std::string("ERROR(") + error_kind_name(t.error().kind) + "): " + t.error().message;
  auto r = t->render(variables(vars), options);
  if (!r) return std::string("ERROR(") + error_kind_name(r.error().kind) + "): " + r.error().message;
  return r->str();
}

// The rendered text, or "ERROR(<kind>)" (for tables whose expected errors are jinja2's, whose
// wording is Python's own).
inline std::string render_or_kind(const std::string& source, const nlohmann::ordered_json& vars) {
  auto t = Template::parse(source);
  if (!t) return std::string("ERROR(") + error_kind_name(t.error().kind) + ")";
  auto r = t->render(variables(vars), default_options());
  if (!r) return std::string("ERROR(") + error_kind_name(r.error().kind) + ")";
  return r->str();
}

// A template and what jinja2 3.1.6 renders for it in transformers' chat-template environment
// with table_vars() as variables (the reference; scripts/jinja_reference.py renders a template
// the same way).
struct Case {
  const char* source;
  const char* expected;  // "ERROR(runtime)" etc. when the reference fails
};

inline const nlohmann::ordered_json& table_vars() {
  static const nlohmann::ordered_json v = nlohmann::ordered_json::parse(R"({
    "x": {"a": 1, "b": [1, 2.5, "é"], "c": {"d": null, "e": true}},
    "msgs": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi <|im_end|>"},
             {"role": "assistant", "content": " A "}]})");
  return v;
}

// The error of parsing or rendering `source` (kind kRuntime with message "" when none).
inline TemplateError render_error(const std::string& source,
                                  const nlohmann::ordered_json& vars = nlohmann::ordered_json::object(),
                                  const RenderOptions& options = default_options()) {
  auto t = Template::parse(source);
  if (!t) return t.error();
  auto r = t->render(variables(vars), options);
  if (!r) return r.error();
  ADD_FAILURE() << "expected an error, got: " << r->str();
  return TemplateError{};
}

// The rendered output as (text, literal) segments.
inline std::vector<std::pair<std::string, bool>> segments(const std::string& source,
                                                         const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  std::vector<std::pair<std::string, bool>> out;
  auto t = Template::parse(source);
  if (!t) {
    ADD_FAILURE() << t.error().describe();
    return out;
  }
  auto r = t->render(variables(vars), default_options());
  if (!r) {
    ADD_FAILURE() << r.error().describe();
    return out;
  }
  const SegmentedText& s = r->segments();
  size_t begin = 0;
  for (const auto& seg : s.segments) {
    out.emplace_back(s.text.substr(begin, seg.end - begin), seg.parse_special);
    begin = seg.end;
  }
  return out;
}

}  // namespace ubatch::jinja::test
