// The sandbox: a hostile or broken template stops with a kLimit error at the node where the
// budget ran out — fuel (evaluation steps), output and value size, macro recursion, value
// nesting, evaluation nesting, wall time — and never crashes, hangs or exhausts memory. The
// reference-cycle cases run under ASan's leak checker in the sanitizer stage (scripts/test.sh).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "template_test_util.h"

namespace {

using ubatch::jinja::ErrorKind;
using ubatch::jinja::RenderOptions;
using ubatch::jinja::TemplateError;
using ubatch::jinja::test::default_options;
using ubatch::jinja::test::render;
using ubatch::jinja::test::render_error;

RenderOptions small_budget() {
  RenderOptions o = default_options();
  o.limits.fuel = 200'000;
  o.limits.max_output_bytes = 1 << 20;
  o.limits.max_time = std::chrono::minutes(5);  // the other limits must stop these, even under ASan
  return o;
}

void expect_limit(const std::string& source, const std::string& message_part, const RenderOptions& o = small_budget()) {
  const TemplateError e = render_error(source, nlohmann::ordered_json::object(), o);
  EXPECT_EQ(e.kind, ErrorKind::kLimit) << source << " -> " << e.describe();
  EXPECT_NE(e.message.find(message_part), std::string::npos) << source << " -> " << e.message;
  EXPECT_GT(e.pos.line, 0u) << source;
}

TEST(TemplateSandbox, EndlessWorkRunsOutOfFuel) {
  expect_limit("{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}", "budget exhausted");
  expect_limit("{% set ns = namespace(n=0) %}{% for i in range(10000) %}{% for j in range(10000) %}{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}",
               "budget exhausted");
}

TEST(TemplateSandbox, OutputAndValueSizesAreBounded) {
  expect_limit("{% for i in range(1000) %}{{ 'x' * 10000 }}{% endfor %}", "output of");
  expect_limit("{{ 'x' * 100000000000 }}", "exceeds the render limit");
  expect_limit("{{ ([0] * 10000000000)|length }}", "exceeds the render limit");
  expect_limit("{{ range(1000000000000)|length }}", "exceeds the render limit");
  expect_limit("{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               "exceeds the render limit");
  expect_limit("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
               "exceeds the render limit");
  expect_limit("{{ '%0999999d' % 1 }}x", "too big", small_budget());
}

TEST(TemplateSandbox, RecursionIsBounded) {
  expect_limit("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "macro calls nested deeper than 64");
  expect_limit("{% macro f(n) %}x{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "macro calls nested deeper");
  // A deep but legitimate recursion (a JSON-schema walker 20 levels down) is fine.
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(20) }}"),
            "2019181716151413121110987654321");
}

TEST(TemplateSandbox, DeepEvaluationStopsBeforeTheStack) {
  // 200 nested nodes per macro call, the call repeated: the evaluation-nesting bound (not the
  // thread's stack) ends it, also under ASan's larger frames.
  std::string nots;
  for (int i = 0; i < 200; ++i) nots += "not ";
  expect_limit("{% macro f(n) %}{{ " + nots + "f(n + 1) }}{% endmacro %}{{ f(0) }}", "evaluation nested deeper than 1200");
  std::string negs;
  for (int i = 0; i < 200; ++i) negs += "-";
  expect_limit("{% macro f(n) %}{{ " + negs + "(f(n + 1)|length) }}{% endmacro %}{{ f(0) }}", "nested deeper");
}

TEST(TemplateSandbox, ValueNestingIsBounded) {
  expect_limit("{% set ns = namespace(v=[]) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}{% endfor %}",
               "nested deeper than 200");
  expect_limit("{% set ns = namespace(v={}) %}{% for i in range(1000) %}{% set ns.v = {'k': ns.v} %}{% endfor %}",
               "nested deeper than 200");
  expect_limit("{% set ns = namespace(v=none) %}{% for i in range(1000) %}{% set ns.v = namespace(p=ns.v) %}{% endfor %}",
               "nested deeper than 200");
  const nlohmann::ordered_json deep = nlohmann::ordered_json::parse(std::string(500, '[') + std::string(500, ']'));
  auto t = ubatch::jinja::Template::parse("{{ v|length }}");
  ASSERT_TRUE(t);
  EXPECT_THROW(ubatch::jinja::from_json(deep), ubatch::jinja::TemplateException);
}

TEST(TemplateSandbox, WallTimeIsBounded) {
  RenderOptions o = default_options();
  o.limits.fuel = 50'000'000'000ull;
  o.limits.max_time = std::chrono::milliseconds(100);
  const auto t0 = std::chrono::steady_clock::now();
  expect_limit("{% for i in range(10000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "time limit", o);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(TemplateSandbox, ReferenceCyclesAreReleased) {
  // A namespace holding itself, a macro stored in the scope it closes over, a loop object in a
  // namespace: all freed when the render ends (ASan's leak checker fails the test otherwise).
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me.me is defined }}"), "True");
  EXPECT_EQ(render("{% macro m() %}x{% endmacro %}{% set ns = namespace(f=m) %}{{ ns.f() }}"), "x");
  EXPECT_EQ(render("{% set ns = namespace() %}{% for i in [ns] %}{% set ns.l = loop %}{% endfor %}{{ ns.l.length }}"), "1");
  EXPECT_EQ(render("{% for i in [1] %}{% macro m() %}{{ i }}{% endmacro %}{% set ns = namespace(f=m) %}{{ ns.f() }}{% endfor %}"),
            "1");
  EXPECT_EQ(render("{% set c = cycler() %}{% set ns = namespace(c=c) %}{{ ns.c.current }}|"), "|");
}

TEST(TemplateSandbox, TheDefaultBudgetLeavesRoomForRealWork) {
  // 2,000 messages through a ChatML-style loop with namespace bookkeeping.
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (int i = 0; i < 2000; ++i) msgs.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(200, 'a')}});
  const std::string out = render(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}<|im_start|>{{ m.role }}\n"
      "{{ m.content | trim }}<|im_end|>\n{% endfor %}{{ ns.n }}",
      {{"messages", msgs}});
  EXPECT_EQ(out.size(), 2000u * (12 + 1 + 200 + 10 + 1) + 1000u * (4 + 9) + 4);
}

}  // namespace
