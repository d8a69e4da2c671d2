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

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

// The injection rule on real templates: in every template's rendering of c7, the user text
// full of special-token look-alikes is present verbatim and every one of its bytes is in a data
// segment — so no special token can be made from it. The template's own markup is literal.
TEST(TemplateCorpus, SpecialTokenLookalikesInContentAreAlwaysData) {
  UBATCH_REQUIRE_REFERENCE();
  const std::string dir = ubatch::test::reference_path("templates/");
  const ordered_json* c7 = find_case("c7_special_token_lookalikes");
  ASSERT_NE(c7, nullptr);
  const std::string verbatim = (*c7)["must_appear_verbatim"].get<std::string>();
  int checked = 0;
  for (const auto& [template_id, results] : corpus().expected.items()) {
    if (!results.contains("c7_special_token_lookalikes") || !results["c7_special_token_lookalikes"].contains("output"))
      continue;
    const std::string source = read_text(dir + corpus().cases["templates"][template_id]["file"].get<std::string>());
    auto r = ChatTemplateRenderer::create(source)->render(inputs_for(template_id, *c7));
    ASSERT_TRUE(r) << template_id << ": " << r.error().describe();
    const SegmentedText& out = r.value();
    // Mark of every byte.
    std::vector<bool> literal(out.text.size());
    size_t begin = 0;
    for (const auto& seg : out.segments) {
      for (size_t i = begin; i < seg.end; ++i) literal[i] = seg.parse_special;
      begin = seg.end;
    }
    size_t found = 0;
    for (size_t p = out.text.find(verbatim); p != std::string::npos; p = out.text.find(verbatim, p + 1)) {
      ++found;
      for (size_t i = p; i < p + verbatim.size(); ++i)
        ASSERT_FALSE(literal[i]) << template_id << ": byte " << i << " of the user text is marked literal";
    }
    EXPECT_GE(found, 1u) << template_id << ": the user text does not appear verbatim";
    // And the template's markup is there as literal text.
    bool any_literal = false;
    for (const auto& seg : out.segments) any_literal = any_literal || seg.parse_special;
    EXPECT_TRUE(any_literal) << template_id;
    ++checked;
  }
  std::printf("c7 look-alikes stay data in all %d templates that render the case\n", checked);
  EXPECT_EQ(checked, 47);
}

// Each render of the corpus stays far inside the default sandbox budget (so the limits never
// refuse a real template) and within its fuel, which bounds time and memory.
TEST(TemplateCorpus, RendersUseAFractionOfTheDefaultBudget) {
  UBATCH_REQUIRE_REFERENCE();
  const std::string dir = ubatch::test::reference_path("templates/");
  const ubatch::jinja::RenderLimits defaults;
  uint64_t max_fuel = 0;
  std::string max_at;
  for (const auto& [template_id, results] : corpus().expected.items()) {
    const std::string source = read_text(dir + corpus().cases["templates"][template_id]["file"].get<std::string>());
    auto renderer = ChatTemplateRenderer::create(source);
    ASSERT_TRUE(renderer);
    for (const auto& [case_id, want] : results.items()) {
      ubatch::jinja::RenderStats stats;
      renderer->render(inputs_for(template_id, *find_case(case_id)), defaults, &stats);
      if (stats.fuel_used > max_fuel) {
        max_fuel = stats.fuel_used;
        max_at = template_id + " / " + case_id;
      }
    }
  }
  std::printf("most fuel used by one corpus render: %llu steps (%s); default budget %llu\n",
              static_cast<unsigned long long>(max_fuel), max_at.c_str(), static_cast<unsigned long long>(defaults.fuel));
  EXPECT_GT(max_fuel, 0u);
  EXPECT_LT(max_fuel * 100, defaults.fuel);
}

}  // namespace
