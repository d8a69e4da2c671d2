// Statements: for (loop variable, filters, else, break/continue, unpacking, scoping), set and
// namespace, if/elif, with, macros (defaults, varargs/kwargs, recursion, closures), set and
// filter blocks, {% generation %}, the globals — checked against jinja2.
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

const Case kStatementCases[] = {
    {R"j({% for a in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('a','b') }}{{ loop.depth }}{{ loop.depth0 }};{% endfor %})j",
     R"j(1032TrueFalse3||2|a10;2121FalseFalse3|1|3|b10;3210FalseTrue3|2||a10;)j"},
    {R"j({% for a in [1,1,2] %}{{ loop.changed(a) }}{% endfor %})j",
     R"j(TrueFalseTrue)j"},
    {R"j({% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %})j",
     R"j(a=1;b=2;)j"},
    {R"j({% for (a, b), c in [((1, 2), 3)] %}{{ a }}{{ b }}{{ c }}{% endfor %})j",
     R"j(123)j"},
    {R"j({% for m in msgs if m.role != 'system' %}[{{ loop.index }}/{{ loop.length }} {{ m.role }}{{ loop.last }}]{% endfor %})j",
     R"j([1/2 userFalse][2/2 assistantTrue])j"},
    {R"j({% for i in [1, 2] %}{{ i }}{% break %}{% else %}E{% endfor %}|{% for i in [1, 2] %}{{ i }}{% continue %}X{% endfor %}|{% for i in [] %}{{ i }}{% else %}E{% endfor %}|{% for i in [1, 2] %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% else %}E{% endfor %})j",
     R"j(1E|12|E|1)j"},
    {R"j({% for i in [1, 2] %}{{ i }}{% if i == 1 %}{% continue %}{% endif %}{% else %}E{% endfor %})j",
     R"j(12)j"},
    {R"j({% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ loop.revindex }}{% endfor %}{{ loop.index }}|{% endfor %})j",
     R"j(12211|12212|)j"},
    {R"j({% for c in 'héy' %}[{{ c }}]{% endfor %}{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}{% for q in undefined_x %}Q{% endfor %})j",
     R"j([h][é][y]ab)j"},
    {R"j({% set outer = 1 %}{% for a in [1, 2] %}[{{ outer }}]{% set outer = a * 10 %}({{ outer }}){% endfor %}{{ outer }})j",
     R"j([1](10)[1](20)1)j"},
    {R"j({% set ns = namespace(n=0, l=[]) %}{% for a in [1, 2, 3] %}{% set ns.n = ns.n + a %}{% set ns.l = ns.l + [a] %}{% endfor %}{{ ns.n }} {{ ns.l }} {{ ns }})j",
     R"j(6 [1, 2, 3] <Namespace {'n': 6, 'l': [1, 2, 3]}>)j"},
    {R"j({% set ns = namespace({'k': 'v'}, z=1) %}{{ ns.k }}{{ ns.z }}{{ ns.missing }}|)j",
     R"j(v1|)j"},
    {R"j({% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c, d = 'xy' %}{{ c }}-{{ d }}{% set t = 1, 2 %}{{ t }})j",
     R"j(12x-y(1, 2))j"},
    {R"j({% if true %}{% set z = 3 %}{% endif %}{{ z }}{% if false %}a{% elif 0 %}b{% elif 'x' %}c{% else %}d{% endif %})j",
     R"j(3c)j"},
    {R"j({% with x = 1, y = 2 %}{{ x + y }}{% endwith %}{{ x }})j",
     R"j(3{'a': 1, 'b': [1, 2.5, 'é'], 'c': {'d': None, 'e': True}})j"},
    {R"j({% macro m(a, b=a*2) %}{{ a }},{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, 3) }} {{ m(b=5, a=2) }})j",
     R"j(1,2 1,3 2,5)j"},
    {R"j({% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }})j",
     R"j(1(2, 3){'x': 4})j"},
    {R"j({% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}{{ m(*[5]) }}{{ m(**{'a': 6}) }})j",
     R"j([][5][6])j"},
    {R"j({% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }})j",
     R"j(54321)j"},
    {R"j({% macro m() %}{{ g }}{% endmacro %}{% set g = 1 %}{{ m() }}{% set g = 2 %}{{ m() }})j",
     R"j(12)j"},
    {R"j({% macro m() %}{{ g }}{% endmacro %}{% for g in [5] %}[{{ m() }}]{% endfor %}{% for g in [5] %}{% macro m2() %}{{ g }}{% endmacro %}[{{ m2() }}]{% endfor %})j",
     R"j([][5])j"},
    {R"j({% macro m() %}{% set inner = 5 %}{{ inner }}{% endmacro %}{{ m() }}{{ inner }}|{{ m }})j",
     R"j(5|<Macro 'm'>)j"},
    {R"j({% macro schema(p, d=0) %}{% for k, v in p.items() %}{{ ' ' * d }}{{ k }}{% if v is mapping %}:
{{ schema(v, d + 1) }}{% else %}={{ v }}
{% endif %}{% endfor %}{% endmacro %}{{ schema({'a': {'b': 1, 'c': {'d': 2}}, 'e': 3}) }})j",
     R"j(a:
 b=1
 c:
  d=2
e=3
)j"},
    {R"j({% filter upper %}abc {{ 'def' }}{% endfilter %}|{% filter trim|upper %}  x  {% endfilter %}|{% set blk | upper %}inner {{ 1 }}{% endset %}{{ blk }}|{% set b2 %}{% set q = 1 %}x{% endset %}{{ q }}{{ b2 }})j",
     R"j(ABC DEF|X|INNER 1|x)j"},
    {R"j({% generation %}G{{ 1 }}{% set gen_var = 1 %}{% endgeneration %}{{ gen_var }}|)j",
     R"j(G1|)j"},
    {R"j({{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }} {{ dict.fromkeys(['a', 'b'], 0) }} {{ dict({'q': 1}, r=2) }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(3)|length }})j",
     R"j({'a': 1, 'b': 2} {'x': 1} {'a': 0, 'b': 0} {'q': 1, 'r': 2} [1, 4, 7] [5, 3, 1] 3)j"},
    {R"j({% set j = joiner(', ') %}{% for i in [1, 2, 3] %}{{ j() }}{{ i }}{% endfor %} {% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }})j",
     R"j(1, 2, 3 abab)j"},
    {R"j({{ strftime_now('%Y-%m-%d %H:%M %a %A %b %B %j %U %W %u %w %y %e %-d %I %p %C %G %V %%') }}|{{ strftime_now('%c | %x | %X | %D | %F | %T | %R | %r | %h') }})j",
     R"j(2026-07-26 00:00 Sun Sunday Jul July 207 30 29 7 0 26 26 26 12 AM 20 2026 30 %|Sun Jul 26 00:00:00 2026 | 07/26/26 | 00:00:00 | 07/26/26 | 2026-07-26 | 00:00:00 | 00:00 | 12:00:00 AM | Jul)j"},
};

const Case kStatementErrorCases[] = {
    {R"j({{ raise_exception('boom: ' ~ 42) }})j",
     R"j(ERROR(raise_exception))j"},
    {R"j({% macro m(a) %}{% endmacro %}{{ m(1, 2) }})j",
     R"j(ERROR(runtime))j"},
    {R"j({% macro m(a) %}{% endmacro %}{{ m(b=2) }})j",
     R"j(ERROR(runtime))j"},
    {R"j({% set a, b = [1, 2, 3] %})j",
     R"j(ERROR(runtime))j"},
    {R"j({% set x = 1 %}{% set x.y = 2 %})j",
     R"j(ERROR(runtime))j"},
    {R"j({% set ns = namespace() %}{% set ns._p = 1 %})j",
     R"j(ERROR(runtime))j"},
    {R"j({% for q in none %}{% endfor %})j",
     R"j(ERROR(runtime))j"},
    {R"j({% for q in 5 %}{% endfor %})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ undefined_fn() }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 'x'() }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ range(1, 2, 0) }})j",
     R"j(ERROR(runtime))j"},
};

TEST(TemplateStatements, AsJinja2) {
  for (const Case& c : kStatementCases) EXPECT_EQ(render_or_kind(c.source, table_vars()), c.expected) << c.source;
}

TEST(TemplateStatements, FailuresAsJinja2) {
  for (const Case& c : kStatementErrorCases) EXPECT_EQ(render_or_kind(c.source, table_vars()), c.expected) << c.source;
}

TEST(TemplateStatements, RaiseExceptionIsItsOwnKindWithTheMessageVerbatim) {
  const TemplateError e = render_error("line one\n{% if true %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}");
  EXPECT_EQ(e.kind, ErrorKind::kRaiseException);
  EXPECT_EQ(e.message, "Only user and assistant roles are supported!");
  EXPECT_EQ(e.describe(), "Only user and assistant roles are supported!");
  EXPECT_EQ(e.pos.line, 2u);
}

TEST(TemplateStatements, RuntimeErrorsPointAtTheNode) {
  const TemplateError e = render_error("{% for m in msgs %}\n  {{ m.content + 1 }}\n{% endfor %}", table_vars());
  EXPECT_EQ(e.kind, ErrorKind::kRuntime);
  EXPECT_EQ(e.message, "can only concatenate str (not \"int\") to str");
  EXPECT_EQ(e.pos.line, 2u);
  EXPECT_EQ(e.pos.column, 16u);  // the "+"
  EXPECT_EQ(e.describe(), "template error at line 2, column 16: can only concatenate str (not \"int\") to str");
}

TEST(TemplateStatements, StrftimeNowUsesTheRenderClock) {
  ubatch::jinja::RenderOptions o = ubatch::jinja::test::default_options();
  o.now = ubatch::jinja::make_date(2024, 2, 29, 13, 5, 9);
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y %H:%M:%S %A %j') }}", {}, o), "29 Feb 2024 13:05:09 Thursday 060");
  o.now = ubatch::jinja::make_date(2021, 1, 1);
  EXPECT_EQ(render("{{ strftime_now('%G-W%V-%u %U %W') }}", {}, o), "2020-W53-5 00 00");
}

}  // namespace
