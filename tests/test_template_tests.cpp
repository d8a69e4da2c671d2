// Tests (`is ...`) and the str/dict/list methods the sandbox allows — checked against
// jinja2 — and the sandbox's refusal of mutating methods and dunder attributes.
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

const Case kTestMethodCases[] = {
    {R"j({{ x is mapping }}{{ [] is sequence }}{{ 'a' is sequence }}{{ {} is sequence }}{{ 1 is sequence }}{{ x.items() is sequence }}{{ x.items() is iterable }}{{ undefined_x is iterable }}{{ undefined_x is sequence }}{{ none is iterable }})j",
     R"j(TrueTrueTrueTrueFalseFalseTrueTrueTrueFalse)j"},
    {R"j({{ 1 is number }}{{ 1.0 is integer }}{{ true is integer }}{{ true is number }}{{ true is boolean }}{{ 1 is true }}{{ none is none }}{{ 'a' is lower }}{{ 'A' is upper }}{{ 4 is divisibleby 2 }}{{ 3 is divisibleby(2) }}{{ 1 is in [1] }})j",
     R"j(TrueFalseFalseTrueTrueFalseTrueTrueTrueTrueFalseTrue)j"},
    {R"j({{ 'upper' is filter }}{{ 'odd' is test }}{{ range is callable }}{{ x is callable }}{{ 1 is eq 1 }}{{ 1 is ne 1 }}{{ 1 is lt 2 }}{{ 1 is le 1 }}{{ 1 is gt 2 }}{{ 1 is ge 2 }}{{ 1 is greaterthan 0 }}{{ 1 is lessthan 0 }}{{ 2 is equalto 2 }}{{ 2 is sameas 2 }}{{ none is sameas none }})j",
     R"j(TrueTrueTrueFalseTrueFalseTrueTrueFalseFalseTrueFalseTrueTrueTrue)j"},
    {R"j({{ undefined_x is defined }}{{ undefined_x is undefined }}{{ x.a is defined }}{{ x.zz is not defined }}{{ 'x' is string }}{{ 1.5 is float }}{{ 3 is odd }}{{ 3 is even }}{{ 1 is not none }}{{ not 1 is none }})j",
     R"j(FalseTrueTrueTrueTrueTrueTrueFalseTrueTrue)j"},
    {R"j({{ 'Hello'.startswith('He') }} {{ 'Hello'.startswith(('x', 'H')) }} {{ 'Hello'.endswith('lo', 0, 4) }} {{ 'a,b'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(None, 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'a\nb\r\nc'.splitlines() }} {{ 'abc'.find('c') }} {{ 'héllo'.find('l') }} {{ 'abcabc'.rfind('b') }} {{ 'aaa'.count('a') }})j",
     R"j(True True False ['a', 'b'] ['a', 'b'] ['a', 'b c'] ['a b', 'c'] ['a', 'b', 'c'] 2 2 4 3)j"},
    {R"j({{ 'x'.join(['a', 'b']) }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'prefix_x'.removeprefix('prefix_') }} {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4, '.') }} {{ 'ab'.rjust(4) }} {{ 'Ab'.swapcase() }})j",
     R"j(axb ('a', '=', 'b=c') ('a=b', '=', 'c') x 00042 -0042 **ab** ab..   ab aB)j"},
    {R"j({{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ ' '.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'Hello World'.istitle() }} {{ '  x  '.strip() }}|{{ '  x  '.lstrip() }}|{{ '  x  '.rstrip() }}|{{ 'xyx'.strip('x') }} {{ 'aXbX'.replace('X', '-') }} {{ 'ab'.replace('', '.') }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'ßx'.upper() }})j",
     R"j(True True True True True True x|x  |  x|y a-b- .a.b. Hello World Hello SSX)j"},
    {R"j({{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b') }} {{ {'a': 1}.get('b', 2) }} {{ {'a': 1}.items()|list }} {{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }} {{ (1, 2).index(2) }} {{ {'a': 1}.copy() }})j",
     R"j(1 None 2 [('a', 1)] 2 1 1 {'a': 1})j"},
    {R"j({{ '\u00a0x\u3000'.strip()|length }} {{ 'a\u2028b'.splitlines() }} {{ 'A\u00c9\u0130'.lower() }} {{ 'straße'.upper() }})j",
     R"j(1 ['a', 'b'] aéi̇ STRASSE)j"},
};

const Case kMethodErrorCases[] = {
    {R"j({{ [1].append(2) }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ {'a': 1}.update({'b': 2}) }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ x.pop('a') }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 'abc'.__class__() }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 'ab'.index('z') }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 'a'.split('') }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 'a'.nomethod() }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 'a'.startswith(1) }})j",
     R"j(ERROR(runtime))j"},
};

TEST(TemplateTests, TestsAndMethodsAsJinja2) {
  for (const Case& c : kTestMethodCases) EXPECT_EQ(render_or_kind(c.source, table_vars()), c.expected) << c.source;
}

TEST(TemplateTests, MethodFailuresAsJinja2) {
  for (const Case& c : kMethodErrorCases) EXPECT_EQ(render_or_kind(c.source, table_vars()), c.expected) << c.source;
}

TEST(TemplateMethods, MutationIsRefusedLikeTheImmutableSandbox) {
  // Looking a mutating method up is allowed (an unsafe undefined); calling it is an error.
  EXPECT_EQ(render("{{ [1].append is defined }}"), "False");
  EXPECT_EQ(render("{{ [1].append(2) }}"),
            "ERROR(runtime): SecurityError: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(render("{{ x.update({}) }}", {{"x", nlohmann::ordered_json::object()}}),
            "ERROR(runtime): SecurityError: access to attribute 'update' of 'dict' object is unsafe.");
  EXPECT_EQ(render("{{ ''.__class__.__mro__ }}"),
            "ERROR(runtime): SecurityError: access to attribute '__class__' of 'str' object is unsafe.");
  EXPECT_EQ(render("{{ namespace.__init__ }}|{{ range.__globals__ }}|"), "||");
  // A dict's own keys win over nothing but its methods: x.items is the method, x['items'] the key.
  EXPECT_EQ(render("{{ x['items'] }}|{{ x.items()|list }}", {{"x", {{"items", 5}}}}), "5|[('items', 5)]");
  EXPECT_EQ(render("{{ x.get('k') }}|{{ x.k }}", {{"x", {{"k", "v"}}}}), "v|v");
}

}  // namespace
