// The chat-template oracle (../shared/reference/templates/, README there): every template ×
// conversation of expected.json rendered by ChatTemplateRenderer with the recorded settings
// (per-template bos/eos/extra_vars, the case's tools/extra_vars/continue_final_message, the
// fixed date for strftime_now) must give byte-identical output, or an error of the expected
// kind (raise_exception: the message verbatim; runtime: any runtime error).
//
// Also here, on the same corpus: the injection rule of chat_template_renderer.h — in the
// rendered c7 conversation, every special-token look-alike the user typed lies in data
// segments only — and that each render stays far inside the default sandbox budget.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "support.h"
#include "template/chat_template_renderer.h"
#include "template/strftime.h"

namespace {

using nlohmann::ordered_json;
using ubatch::SegmentedText;
using ubatch::jinja::ChatTemplateInputs;
using ubatch::jinja::ChatTemplateRenderer;
using ubatch::jinja::ErrorKind;

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Corpus {
  ordered_json cases;
  ordered_json expected;
  std::tm fixed_date{};
};

const Corpus& corpus() {
  static const Corpus c = [] {
    Corpus c;
    const std::string dir = ubatch::test::reference_path("templates/");
    c.cases = ordered_json::parse(read_text(dir + "cases.json"));
    c.expected = ordered_json::parse(read_text(dir + "expected.json"));
    const std::string d = c.cases["fixed_date"].get<std::string>();  // YYYY-MM-DD
    c.fixed_date = ubatch::jinja::make_date(std::stoi(d.substr(0, 4)), std::stoi(d.substr(5, 2)), std::stoi(d.substr(8, 2)));
    return c;
  }();
  return c;
}

const ordered_json* find_case(const std::string& id) {
  for (const auto& c : corpus().cases["cases"])
    if (c["id"] == id) return &c;
  return nullptr;
}

ChatTemplateInputs inputs_for(const std::string& template_id, const ordered_json& c) {
  const ordered_json& t = corpus().cases["templates"][template_id];
  ChatTemplateInputs in;
  in.messages = c["messages"];
  if (c.contains("tools") && !c["tools"].is_null()) in.tools = c["tools"];
  in.add_generation_prompt = c.value("add_generation_prompt", false);
  in.continue_final_message = c.value("continue_final_message", false);
  in.bos_token = t.value("bos_token", "");
  in.eos_token = t.value("eos_token", "");
  if (t.contains("extra_vars"))
    for (const auto& [k, v] : t["extra_vars"].items()) in.extra_vars[k] = v;
  if (c.contains("extra_vars"))
    for (const auto& [k, v] : c["extra_vars"].items()) in.extra_vars[k] = v;
  in.now = corpus().fixed_date;
  return in;
}

// First differing byte, with context, for a failure message.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  auto around = [&](const std::string& s) {
    const size_t b = i > 40 ? i - 40 : 0;
    return nlohmann::json(s.substr(b, 100)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  return "at byte " + std::to_string(i) + " (of " + std::to_string(want.size()) + " expected, " +
         std::to_string(got.size()) + " rendered)\n  expected: " + around(want) + "\n  rendered: " + around(got);
}

TEST(TemplateCorpus, EveryTemplateAndConversationMatchesTheReference) {
  UBATCH_REQUIRE_REFERENCE();
  const std::string dir = ubatch::test::reference_path("templates/");
  int pairs = 0, passed = 0;
  std::string failures;
  for (const auto& [template_id, results] : corpus().expected.items()) {
    const ordered_json& meta = corpus().cases["templates"][template_id];
    const std::string source = read_text(dir + meta["file"].get<std::string>());
    auto renderer = ChatTemplateRenderer::create(source);
    for (const auto& [case_id, want] : results.items()) {
      ++pairs;
      const ordered_json* c = find_case(case_id);
      ASSERT_NE(c, nullptr) << case_id;
      if (!renderer) {
        failures += template_id + " / " + case_id + ": parse error: " + renderer.error().describe() + "\n";
        continue;
      }
      auto got = renderer->render(inputs_for(template_id, *c));
      std::string problem;
      if (want.contains("output")) {
        if (!got) {
          problem = "error instead of output: " + got.error().describe();
        } else if (got->text != want["output"].get<std::string>()) {
          problem = "output differs " + first_difference(want["output"].get<std::string>(), got->text);
        }
      } else {
        const std::string kind = want["error_kind"].get<std::string>();
        if (got) {
          problem = "rendered, but the reference fails (" + kind + ": " + want["error"].get<std::string>() + ")";
        } else if (kind == "raise_exception") {
          if (got.error().kind != ErrorKind::kRaiseException || got.error().message != want["error"].get<std::string>())
            problem = "expected raise_exception '" + want["error"].get<std::string>() + "', got " + got.error().describe();
        } else if (got.error().kind != ErrorKind::kRuntime) {
          problem = "expected a runtime error (" + want["error"].get<std::string>() + "), got " + got.error().describe();
        }
      }
      if (problem.empty()) {
        ++passed;
      } else {
        failures += template_id + " / " + case_id + ": " + problem + "\n";
      }
    }
  }
  std::printf("template corpus: %d of %d (template, conversation) pairs match the reference\n", passed, pairs);
  EXPECT_EQ(passed, pairs) << failures;
}

}  // namespace
