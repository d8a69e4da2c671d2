// Parser: operator precedence and the statement grammar (through rendering), syntax errors
// with positions, unsupported tags, the nesting bound, and reads_variable.
#include <gtest/gtest.h>

#include <string>

#include "template_test_util.h"

namespace {

using ubatch::jinja::ErrorKind;
using ubatch::jinja::TemplateError;
using ubatch::jinja::test::Case;
using ubatch::jinja::test::render;
using ubatch::jinja::test::render_error;
using ubatch::jinja::test::render_or_kind;
using ubatch::jinja::test::table_vars;

TEST(TemplateParser, PrecedenceFollowsJinja2) {
  // + binds looser than ~, which binds looser than * (jinja2: math1 > concat > math2).
  EXPECT_EQ(render("{{ 1 + 2 ~ 3 }}"), "ERROR(runtime): unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(render("{{ 2 * 3 ~ 4 }}"), "64");
  EXPECT_EQ(render("{{ -2 ** 2 }}|{{ 2 ** 3 ** 2 }}|{{ 10 - 2 - 3 }}"), "4|64|5");
  // Filters bind tighter than unary minus, which applies first: -x|abs is abs(-x).
  EXPECT_EQ(render("{{ -3|abs }}|{{ -(3|abs) }}"), "3|-3");
  EXPECT_EQ(render("{{ not 1 == 2 }}|{{ not 'a' in 'abc' }}|{{ 'a' not in 'abc' }}"), "True|False|False");
  EXPECT_EQ(render("{{ 1 if false else 2 if false else 3 }}|{{ 'x' if false }}|"), "3||");
  EXPECT_EQ(render("{{ 0 or 1 and 2 }}|{{ (0 or 1) and 2 }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}"), "2|2|True|False");
  EXPECT_EQ(render("{{ 'a' is string and 1 is number }}|{{ x is not defined or x }}"), "True|True");
  EXPECT_EQ(render("{{ [1, 2, 3][1:] }}|{{ (1, 2)[0] }}|{{ {'a': [1, 2]}.a[1] }}|{{ 'ab'.upper().lower() }}"), "[2, 3]|1|2|ab");
  EXPECT_EQ(render("{{ (1, 2) }}|{{ () }}|{{ (1,) }}|{{ [] }}|{{ {} }}|{{ [1, 2,] }}"), "(1, 2)|()|(1,)|[]|{}|[1, 2]");
  EXPECT_EQ(render("{{ 1 is divisibleby 1 }}|{{ 'a' ~ 'b' is string }}"), "True|aTrue");
}

TEST(TemplateParser, SyntaxErrorsCarryLineAndColumn) {
  struct Bad {
    const char* source;
    const char* message_part;
    uint32_t line, column;
  };
  const Bad bad[] = {
      {"{% if x %}\nno end", "Jinja was looking for the following tags: 'elif' or 'else' or 'endif'", 2, 7},
      {"{% for x in y %}{% endif %}", "Encountered unknown tag 'endif'", 1, 20},
      {"\n  {% frobnicate %}", "Encountered unknown tag 'frobnicate'", 2, 6},
      {"{% include 'x.j2' %}", "'include' tag is not supported", 1, 4},
      {"{% extends 'base' %}", "'extends' tag is not supported", 1, 4},
      {"{% call m() %}{% endcall %}", "'call' tag is not supported", 1, 4},
      {"{% for x in y recursive %}{% endfor %}", "recursive for loops are not supported", 1, 15},
      {"{% break %}", "'break' outside of a loop", 1, 4},
      {"{% for x in y %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}", "'break' outside of a loop", 1, 35},
      {"{{ 1 + }}", "unexpected end of print statement", 1, 8},
      {"{{ a b }}", "expected end of print statement, got 'b'", 1, 6},
      {"{% set = 1 %}", "expected a name", 1, 8},
      {"{% set true = 1 %}", "cannot assign to 'true'", 1, 8},
      {"{% macro m(a=1, b) %}{% endmacro %}", "non-default argument follows default argument", 1, 18},
      {"{{ f(a=1, 2) }}", "positional argument follows keyword argument", 1, 11},
      {"{{ x is y is z }}", "You cannot chain multiple tests with is", 1, 11},
      {"{{ x.1.y. }}", "expected name or number", 1, 11},
  };
  for (const Bad& b : bad) {
    const TemplateError e = render_error(b.source);
    EXPECT_EQ(e.kind, ErrorKind::kSyntax) << b.source;
    EXPECT_NE(e.message.find(b.message_part), std::string::npos) << b.source << " -> " << e.message;
    EXPECT_EQ(e.pos.line, b.line) << b.source << " -> " << e.describe();
    EXPECT_EQ(e.pos.column, b.column) << b.source << " -> " << e.describe();
  }
}

TEST(TemplateParser, UnknownFiltersAndTestsFailOnlyWhenEvaluated) {
  // jinja2 3.x defers them: DeepSeek's from_json renders until that branch is taken.
  EXPECT_EQ(render("{% if false %}{{ x|from_json }}{{ x is frob }}{% endif %}ok"), "ok");
  const TemplateError e = render_error("ok\n{{ '{}'|from_json }}");
  EXPECT_EQ(e.kind, ErrorKind::kRuntime);
  EXPECT_EQ(e.message, "No filter named 'from_json'.");
  EXPECT_EQ(e.pos.line, 2u);
  EXPECT_EQ(render_error("{{ 1 is frob }}").message, "No test named 'frob'.");
}

TEST(TemplateParser, NestingDeeperThanTheBoundIsASyntaxError) {
  std::string deep(5000, '(');
  deep = "{{ " + deep + "1" + std::string(5000, ')') + " }}";
  TemplateError e = render_error(deep);
  EXPECT_EQ(e.kind, ErrorKind::kSyntax);
  EXPECT_NE(e.message.find("nested too deeply"), std::string::npos) << e.message;

  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  e = render_error(chain + " }}");
  EXPECT_EQ(e.kind, ErrorKind::kSyntax) << e.message;

  std::string ifs;
  for (int i = 0; i < 400; ++i) ifs += "{% if true %}";
  for (int i = 0; i < 400; ++i) ifs += "{% endif %}";
  EXPECT_EQ(render_error(ifs).kind, ErrorKind::kSyntax);

  // Real templates nest far less: 60 levels parse and render.
  std::string ok = "{{ " + std::string(60, '(') + "7" + std::string(60, ')') + " }}";
  EXPECT_EQ(render(ok), "7");
}

TEST(TemplateParser, ReadsVariableLooksAtTheWholeTemplate) {
  auto t = ubatch::jinja::Template::parse(
      "{# tools #}{{ 'tools' }}{% macro m() %}{{ enable_thinking }}{% endmacro %}{% for x in messages %}{% endfor %}");
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->reads_variable("messages"));
  EXPECT_TRUE(t->reads_variable("enable_thinking"));  // inside a macro
  EXPECT_FALSE(t->reads_variable("tools"));           // only in a comment and a string
  EXPECT_FALSE(t->reads_variable("x"));               // assigned, not read
}

}  // namespace
