// Values with Python's semantics: arithmetic, comparison, truth, str()/repr() of numbers and
// containers, %-formatting and str.format, markupsafe's Markup — checked against jinja2.
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

const Case kValueCases[] = {
    {R"j({{ 1 + true }} {{ 1.5 + 1 }} {{ 10 / 4 }} {{ 10 // 4 }} {{ -10 // 4 }} {{ 10 % 3 }} {{ -10 % 3 }} {{ 10 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }})j",
     R"j(2 2.5 2.5 2 -3 1 2 -2 1024 0.5 3.0 0.5)j"},
    {R"j({{ 1 == 1.0 }} {{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1.0} }} {{ none == none }} {{ 'a' < 'b' }} {{ [1, 'a'] < [1, 'b'] }} {{ true == 1 }})j",
     R"j(True True False True True True True True)j"},
    {R"j({{ 0.1 + 0.2 }} {{ 1e100 }} {{ 1.5e-10 }} {{ 100000000000000000.0 }} {{ 3.0 }} {{ -0.0 }} {{ 123456789.123456789 }} {{ 1/3 }} {{ 2.5e15 }} {{ 1e16 }} {{ 0.0001 }} {{ 0.00001 }})j",
     R"j(0.30000000000000004 1e+100 1.5e-10 1e+17 3.0 -0.0 123456789.12345679 0.3333333333333333 2500000000000000.0 1e+16 0.0001 1e-05)j"},
    {R"j({{ ['a', "b'c", 'd"e', 'f\'g"h', '\n\t\\', 'é', '\x00\x7f', '\u200b'] }})j",
     R"j(['a', "b'c", 'd"e', 'f\'g"h', '\n\t\\', 'é', '\x00\x7f', '\u200b'])j"},
    {R"j({{ {'a': none, 'b': true, 'c': 1.0, 'd': (1,), 'e': ()} }})j",
     R"j({'a': None, 'b': True, 'c': 1.0, 'd': (1,), 'e': ()})j"},
    {R"j({{ x }})j",
     R"j({'a': 1, 'b': [1, 2.5, 'é'], 'c': {'d': None, 'e': True}})j"},
    {R"j({{ x.items() }} {{ x.keys() }} {{ x.values() }})j",
     R"j(dict_items([('a', 1), ('b', [1, 2.5, 'é']), ('c', {'d': None, 'e': True})]) dict_keys(['a', 'b', 'c']) dict_values([1, [1, 2.5, 'é'], {'d': None, 'e': True}]))j"},
    {R"j({{ 'a' ~ 1 ~ 2.0 ~ none ~ true ~ [1] ~ {'a': 'b'} ~ undefined_thing }})j",
     R"j(a12.0NoneTrue[1]{'a': 'b'})j"},
    {R"j({{ 'a' * 3 }} {{ [1] * 3 }} {{ 3 * 'ab' }} {{ 'ab' * 0 }} {{ [1, 2] + [3] }} {{ (1,) + (2,) }})j",
     R"j(aaa [1, 1, 1] ababab  [1, 2, 3] (1, 2))j"},
    {R"j({{ not 1 == 2 }} {{ not 'a' in 'abc' }} {{ 'a' not in 'abc' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1 == 1.0 }})j",
     R"j(True False False True False True)j"},
    {R"j({{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'x' }} {{ none or [] }} {{ [] or none }} {{ 'x' if false }}|{{ 1 if 0 else 2 if 0 else 3 }})j",
     R"j(2 0 x [] None |3)j"},
    {R"j({{ -2 ** 2 }} {{ (-2) ** 2 }} {{ 2 * 3 ~ 4 }} {{ 1 + 2 ~ 3 }} {{ 'a' ~ 1 + 2 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }} {{ 100 / 10 / 2 }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 'abc'[1] }} {{ 'abc'[-1] }} {{ 'abc'[10] }} {{ 'abcdef'[1:4] }} {{ 'abcdef'[::2] }} {{ 'abcdef'[::-2] }} {{ [1,2,3,4][-3:-1] }} {{ [1,2,3][5:] }} {{ 'héllo'[1:3] }} {{ 'héllo'[::-1] }})j",
     R"j(b c  bcd ace fdb [2, 3] [] él olléh)j"},
    {R"j({{ msgs[0].role }} {{ msgs[0]['role'] }} {{ msgs.0.role }} {{ msgs[-1].content }} {{ msgs[5] }}|{{ msgs[0].nope }}|{{ msgs[0].nope is defined }}|{{ none.attr }})j",
     R"j(system system system  A  ||False|)j"},
    {R"j({{ 'ab' in 'cab' }} {{ 1 in [1.0] }} {{ 'a' in {'a': 1} }} {{ 'z' in undefined_y }} {{ (1, 2) in [(1, 2)] }})j",
     R"j(True True True False True)j"},
    {R"j({{ {1: 'a', 1.0: 'b', true: 'c'} }} {{ {(1, 2): 'k'}[(1, 2)] }} {{ {'a': 1}[['x']] }})j",
     R"j({1: 'c'} k )j"},
    {R"j({{ '%s and %r' % ('a', 'b') }} {{ '%5.2f|%-5d|%05d|%x|%X|%o|%e|%g|%c|%%' % (3.14159, 42, 42, 255, 255, 8, 12345.678, 0.0001, 65) }} {{ '%(a)s-%(b)d' % {'a': 'x', 'b': 3} }} {{ '%s' % [1, 2] }} {{ '%.3d' % 7 }})j",
     R"j(a and 'b'  3.14|42   |00042|ff|FF|10|1.234568e+04|0.0001|A|% x-3 [1, 2] 007)j"},
    {R"j({{ '{} {}'.format(1, 'a') }} {{ '{1}{0}'.format('a', 'b') }} {{ '{x}|{x!r}'.format(x='q') }} {{ '{:>6}|{:<4}|{:^7}|{:08.3f}|{:,}|{:x}|{:#b}|{:+d}|{:.2%}|{:e}'.format('ab', 'c', 'mid', 3.14159, 1234567, 255, 5, 3, 0.256, 1234.5) }})j",
     R"j(1 a ba q|'q'     ab|c   |  mid  |0003.142|1,234,567|ff|0b101|+3|25.60%|1.234500e+03)j"},
    {R"j({{ '{0[a]} {0[b][1]}'.format({'a': 1, 'b': [5, 6]}) }} {{ '{{literal}} {}'.format(1) }} {{ '{:.3}'.format(3.14159) }} {{ '{:.3}'.format(2.0) }} {{ '{:5}'.format(1.0) }} {{ '{:*^9}'.format('é') }})j",
     R"j(1 6 {literal} 1 3.14 2.0   1.0 ****é****)j"},
    {R"j({{ 'abc'|safe + '<x>' }} {{ '<x>' + 'abc'|safe }} {{ ('a'|safe) ~ '<x>' }} {{ ('<a>'|safe).upper() + '&' }} {{ ('x'|safe).replace('x', '<') }} {{ ('{}'|safe).format('<') }} {{ ('a'|safe) is escaped }} {{ ('ab'|safe)|list }})j",
     R"j(abc&lt;x&gt; &lt;x&gt;abc a<x> <A>&amp; &lt; &lt; True ['a', 'b'])j"},
};

const Case kValueErrorCases[] = {
    {R"j({{ 1 < 'a' }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 'a' + 1 }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ [1] + (2,) }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 1 / 0 }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 1 // 0 }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 1 % 0 }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ undefined_x + 1 }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ undefined_x.attr }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ none + 1 }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 'a' in none }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 1 in 'abc' }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ x[1:] }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ msgs[1.5:] }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 'abc'[::0] }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ '%d' % 'x' }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ '%s %s' % ('a',) }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 'x' % 'y' }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ '{}'.format() }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ '}'.format() }})j",
     R"j(ERROR(runtime))j"},
};

TEST(TemplateValues, OperatorsAndTextAsJinja2) {
  for (const Case& c : kValueCases) EXPECT_EQ(render_or_kind(c.source, table_vars()), c.expected) << c.source;
}

TEST(TemplateValues, TypeErrorsAsJinja2) {
  for (const Case& c : kValueErrorCases) EXPECT_EQ(render_or_kind(c.source, table_vars()), c.expected) << c.source;
}

TEST(TemplateValues, ErrorsSayWhatWasWrong) {
  EXPECT_EQ(render("{{ 'a' + 1 }}"), "ERROR(runtime): can only concatenate str (not \"int\") to str");
  EXPECT_EQ(render("{{ 1 < 'a' }}"), "ERROR(runtime): '<' not supported between instances of 'int' and 'str'");
  EXPECT_EQ(render("{{ nothing.attr }}"), "ERROR(runtime): 'nothing' is undefined");
  EXPECT_EQ(render("{{ {}.a.b }}"), "ERROR(runtime): 'dict object' has no attribute 'a'");
  EXPECT_EQ(render("{{ [1][3] + 1 }}"), "ERROR(runtime): 'list object' has no element 3");
  EXPECT_EQ(render("{{ 1 / 0 }}"), "ERROR(runtime): division by zero");
  EXPECT_EQ(render("{{ 9223372036854775807 + 1 }}"), "ERROR(runtime): integer overflow (ints are 64-bit here)");
  // Python would answer with a complex number.
  EXPECT_EQ(render("{{ (-8) ** 0.5 }}"), "ERROR(runtime): a negative number to a fractional power is complex (not supported)");
}

TEST(TemplateValues, FloatsPrintAsPythonRepr) {
  EXPECT_EQ(render("{{ x }}", {{"x", 1.0}}), "1.0");
  EXPECT_EQ(render("{{ x }}", {{"x", 0.75}}), "0.75");
  EXPECT_EQ(render("{{ x }}", {{"x", 1e22}}), "1e+22");
  EXPECT_EQ(render("{{ x }}", {{"x", 5e-324}}), "5e-324");
  EXPECT_EQ(render("{{ x }}", {{"x", 1.7976931348623157e308}}), "1.7976931348623157e+308");
  EXPECT_EQ(render("{{ x }}|{{ x|tojson }}", {{"x", 123456789012345.6}}), "123456789012345.6|123456789012345.6");
  EXPECT_EQ(render("{{ x }}", {{"x", 0.1}}), "0.1");
  EXPECT_EQ(render("{{ (x * 0)|string }}", {{"x", -1.5}}), "-0.0");
}

TEST(TemplateValues, JsonInputKeepsKeyOrderAndTypes) {
  nlohmann::ordered_json v = nlohmann::ordered_json::parse(R"({"z": 1, "a": [true, null, 2.0, "s", {"y": 0, "b": 1}]})");
  EXPECT_EQ(render("{{ v }}|{{ v|tojson }}", {{"v", v}}),
            "{'z': 1, 'a': [True, None, 2.0, 's', {'y': 0, 'b': 1}]}|"
            "{\"z\": 1, \"a\": [true, null, 2.0, \"s\", {\"y\": 0, \"b\": 1}]}");
  // Beyond int64: a float (Python would keep the exact integer).
  EXPECT_EQ(render("{{ v }}", {{"v", nlohmann::ordered_json::parse("18446744073709551615")}}), "1.8446744073709552e+19");
}

}  // namespace
