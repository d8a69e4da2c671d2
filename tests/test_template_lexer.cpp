// Lexer: whitespace control (trim_blocks, lstrip_blocks, "-" and "+" signs), comments, raw
// blocks, line breaks, literals — checked against jinja2 — and syntax errors with positions.
#include <gtest/gtest.h>

#include <string>

#include "template/lexer.h"
#include "template/parser.h"
#include "template_test_util.h"

namespace {

using ubatch::jinja::ErrorKind;
using ubatch::jinja::TemplateError;
using ubatch::jinja::test::Case;
using ubatch::jinja::test::render;
using ubatch::jinja::test::render_error;
using ubatch::jinja::test::render_or_kind;
using ubatch::jinja::test::table_vars;

const Case kLexerCases[] = {
    {R"j(a
)j",
     R"j(a)j"},
    {R"j(a

)j",
     R"j(a
)j"},
    {R"j(a
b
c
)j",
     R"j(a
b
c)j"},
    {R"j({% if true %}
x{% endif %}
y)j",
     R"j(xy)j"},
    {R"j({% if true %}
x
{% endif %}
y)j",
     R"j(x
y)j"},
    {R"j(  {% if true %}x{% endif %})j",
     R"j(x)j"},
    {R"j(a  {% if true %}x{% endif %})j",
     R"j(a  x)j"},
    {R"j(
	 {% if true %}x
  {% endif %}y)j",
     R"j(
x
y)j"},
    {R"j(  {%+ if true %}x{% endif %})j",
     R"j(  x)j"},
    {R"j({% if true +%}
x{% endif %})j",
     R"j(
x)j"},
    {R"j(a  {{- 'b' -}}  c)j",
     R"j(abc)j"},
    {R"j(a

{%- if true -%}

 b{% endif %})j",
     R"j(ab)j"},
    {R"j(a {{ 'b' }}
 c)j",
     R"j(a b
 c)j"},
    {R"j(  {{ 'x' }}
)j",
     R"j(  x)j"},
    {R"j(a {# c #} b)j",
     R"j(a  b)j"},
    {R"j(  {# c #}
x)j",
     R"j(x)j"},
    {R"j(a {#- c -#} b)j",
     R"j(ab)j"},
    {R"j(a{#
multi
line
#}
b)j",
     R"j(ab)j"},
    {R"j({% raw %}{{ x }}{% if %}{% endraw %})j",
     R"j({{ x }}{% if %})j"},
    {R"j(  {% raw %}
{{ x }}
  {% endraw %}
y)j",
     R"j(
{{ x }}
y)j"},
    {R"j({%- raw -%}  {{ x }}  {%- endraw -%})j",
     R"j({{ x }})j"},
    {R"j({{ 'a\tb\n\\\'' }})j",
     R"j(a	b
\')j"},
    {R"j({{ "q\"uote" }})j",
     R"j(q"uote)j"},
    {R"j({{ 'x\u00e9\x41\101\U0001F600' }})j",
     R"j(xéAA😀)j"},
    {R"j({{ 'keep \q' }})j",
     R"j(keep \q)j"},
    {R"j({{ 'é\é' }})j",
     R"j(é\xe9)j"},
    {R"j({{ 'adjacent' "strings" }})j",
     R"j(adjacentstrings)j"},
    {R"j({{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }})j",
     R"j(31 15 5 1000)j"},
    {R"j({{ 1.5 }} {{ 1e3 }} {{ 1.5E-2 }} {{ 1_0.2_5 }})j",
     R"j(1.5 1000.0 0.015 10.25)j"},
    {R"j({{ {'a': {'b': 1}} }})j",
     R"j({'a': {'b': 1}})j"},
    {R"j({{ '%}' }}{{ '}}' }})j",
     R"j(%}}})j"},
    {R"j({% set x = '}}' %}{{ x }})j",
     R"j(}})j"},
    {R"j({{ [1, (2, 3)] }})j",
     R"j([1, (2, 3)])j"},
    {R"j({%- if true %}  a  {%- endif %})j",
     R"j(  a)j"},
    {R"j(x  
  {%- if true %}y{% endif %})j",
     R"j(xy)j"},
    {R"j({% for i in [1, 2] %}
  {{ i }}
{% endfor %}
)j",
     R"j(  1
  2
)j"},
    {R"j({% for i in [1, 2] -%}
  {{ i }}
{%- endfor %})j",
     R"j(12)j"},
    {R"j(<s>{% for m in msgs %}
  <|{{ m.role }}|>
  {{ m.content }}
{% endfor %}
{% if true %}<|assistant|>
{% endif %})j",
     R"j(<s>  <|system|>
  S
  <|user|>
  Hi <|im_end|>
  <|assistant|>
   A 
<|assistant|>
)j"},
};

TEST(TemplateLexer, WhitespaceLiteralsAndCommentsAsJinja2) {
  for (const Case& c : kLexerCases) EXPECT_EQ(render_or_kind(c.source, table_vars()), c.expected) << c.source;
}

TEST(TemplateLexer, TokensCarryLineAndColumn) {
  const auto toks = ubatch::jinja::tokenize("ab\n  {{ x + 1 }}\n{% if y %}é{{ 'z' }}{% endif %}");
  ASSERT_GE(toks.size(), 6u);
  EXPECT_EQ(toks[0].kind, ubatch::jinja::TokenKind::kData);
  EXPECT_EQ(toks[1].kind, ubatch::jinja::TokenKind::kVarBegin);
  EXPECT_EQ(toks[1].pos.line, 2u);
  EXPECT_EQ(toks[1].pos.column, 3u);
  EXPECT_EQ(toks[2].text, "x");
  EXPECT_EQ(toks[2].pos.column, 6u);
  // Columns count code points: the "{{" after "é" on line 3 is column 12.
  size_t i = 0;
  while (i < toks.size() && !(toks[i].kind == ubatch::jinja::TokenKind::kVarBegin && toks[i].pos.line == 3)) ++i;
  ASSERT_LT(i, toks.size());
  EXPECT_EQ(toks[i].pos.column, 12u);
}

TEST(TemplateLexer, SyntaxErrorsNameTheProblemAndWhere) {
  struct Bad {
    const char* source;
    const char* message_part;
    uint32_t line, column;
  };
  const Bad bad[] = {
      {"a\n{{ x", "unexpected end of template", 2, 1},
      {"{% if x %}\n{# never closed", "Missing end of comment", 2, 1},
      {"{{ 'abc }}", "unterminated string", 1, 4},
      {"x {{ a ? b }}", "unexpected char '?'", 1, 8},
      {"{{ (a ] }}", "unexpected ']', expected ')'", 1, 7},
      {"{{ a ) }}", "unexpected ')'", 1, 6},
      {"{% raw %}never ends", "Missing end of raw", 1, 1},
      {"ok\n\xff{{ x }}", "not valid UTF-8", 2, 1},
      {"{{ '\\x4' }}", "truncated \\x escape", 1, 5},
      {"{{ 99999999999999999999 }}", "out of range", 1, 4},
  };
  for (const Bad& b : bad) {
    const TemplateError e = render_error(b.source);
    EXPECT_EQ(e.kind, ErrorKind::kSyntax) << b.source;
    EXPECT_NE(e.message.find(b.message_part), std::string::npos) << b.source << " -> " << e.message;
    EXPECT_EQ(e.pos.line, b.line) << b.source;
    EXPECT_EQ(e.pos.column, b.column) << b.source;
    EXPECT_NE(e.describe().find("line " + std::to_string(b.line)), std::string::npos) << e.describe();
  }
}

TEST(TemplateLexer, LexerOptionsCanTurnTheChatSettingsOff) {
  ubatch::jinja::LexerOptions plain;
  plain.trim_blocks = false;
  plain.lstrip_blocks = false;
  plain.keep_trailing_newline = true;
  auto t = ubatch::jinja::Template::parse("  {% if true %}\nx{% endif %}\n", plain);
  ASSERT_TRUE(t);
  auto r = t->render({}, ubatch::jinja::test::default_options());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->str(), "  \nx\n");
}

}  // namespace
