// Filters: every built-in filter (filters.h) on the cases real templates use and their
// edge cases — checked against jinja2 — including transformers' tojson and its arguments.
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

const Case kFilterCases[] = {
    {R"j({{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'Hello World'|replace('o', '0', 1) }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'hello world'|title }}|{{ 'hello WORLD'|capitalize }}|{{ 'a-b c(d'|title }}|{{ 'ßa'|title }})j",
     R"j(x|a|Hell0 World|ABC|abc|Hello World|Hello world|A-B C(D|SSa)j"},
    {R"j({{ [3, 1, 2]|sort }} {{ ['b', 'A', 'a', 'B']|sort }} {{ ['b', 'A', 'a', 'B']|sort(case_sensitive=true) }} {{ [{'a': 2}, {'a': 1}]|sort(attribute='a') }} {{ [{'a': 2, 'b': 1}, {'a': 1, 'b': 2}]|sort(attribute='b,a', reverse=true) }})j",
     R"j([1, 2, 3] ['A', 'a', 'b', 'B'] ['A', 'B', 'a', 'b'] [{'a': 1}, {'a': 2}] [{'a': 1, 'b': 2}, {'a': 2, 'b': 1}])j"},
    {R"j({{ [1, 2, 2, 'a', 'A']|unique|list }} {{ [1, 2, 3]|sum }} {{ [{'v': 1}, {'v': 2}]|sum(attribute='v', start=10) }} {{ [3, 1]|min }} {{ ['b', 'A']|max }} {{ []|min }}|{{ [{'v': 3}, {'v': 1}]|min(attribute='v') }})j",
     R"j([1, 2, 'a'] 6 13 1 b |{'v': 1})j"},
    {R"j({{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3, 4, 5]|batch(2, 'x')|list }} {{ [1, 2, 3, 4, 5]|slice(2)|list }} {{ [1, 2, 3, 4, 5]|slice(3, 0)|list }})j",
     R"j([[1, 2], [3, 4], [5]] [[1, 2], [3, 4], [5, 'x']] [[1, 2, 3], [4, 5]] [[1, 2], [3, 4], [5, 0]])j"},
    {R"j({{ 'line1\nline2\n\nline4'|indent(2) }}|{{ 'line1\nline2'|indent(2, true) }}|{{ 'a\n\nb'|indent('> ', blank=true) }}|{{ 'x'|indent(first=true) }})j",
     R"j(line1
  line2

  line4|  line1
  line2|a
> 
> b|    x)j"},
    {R"j({{ '42'|int }} {{ '42.7'|int }} {{ 'x'|int(5) }} {{ '0x1A'|int(0, 16) }} {{ ' 12 '|int }} {{ 3.9|int }} {{ '1_000'|int }} {{ '3.5'|float }} {{ 'inf'|float }} {{ 'x'|float(1.5) }} {{ true|int }} {{ none|int }})j",
     R"j(42 42 5 26 12 3 1000 3.5 inf 1.5 1 0)j"},
    {R"j({{ 3.14159|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2|round }} {{ 2.567|round(1, 'floor') }} {{ 2.513|round(1, 'ceil') }} {{ -3|abs }} {{ -2.5|abs }})j",
     R"j(3.14 2.0 4.0 2 2.5 2.6 3 2.5)j"},
    {R"j({{ 'a b  c'|wordcount }} {{ 'Hello world, how are you'|truncate(12) }} {{ 'Hello world, how are you'|truncate(12, true) }} {{ 'short'|truncate(12) }} {{ '<p>Hi <b>there</b></p>  &amp; x'|striptags }})j",
     R"j(3 Hello... Hello wor... short Hi there & x)j"},
    {R"j({{ [1, 2]|first }} {{ [1, 2]|last }} {{ 'ab'|first }} {{ []|first }}|{{ {'a': 1}|first }} {{ 'abc'|reverse }} {{ [1, 2]|reverse|list }} {{ 'abc'|list }} {{ {'a': 1}|list }} {{ 'héllo'|length }} {{ {'a': 1}|count }})j",
     R"j(1 2 a |a cba [2, 1] ['a', 'b', 'c'] ['a'] 5 1)j"},
    {R"j({{ none|default('d') }} {{ undefined_x|default('d') }} {{ ''|default('d', true) }} {{ 0|d('z', true) }} {{ false|default('d') }} {{ undefined_x|d }}|)j",
     R"j(None d d z False |)j"},
    {R"j({{ [{'a': 1}, {'b': 2}]|map(attribute='a')|list }} {{ [{'a': 1}, {'b': 2}]|map(attribute='a', default='D')|list }} {{ ['a', 'b']|map('upper')|list }} {{ [1, 2]|map('string')|join('|') }} {{ ['x y', 'z']|map('replace', ' ', '_')|list }} {{ none|map('upper')|list }})j",
     R"j([1, Undefined] [1, 'D'] ['A', 'B'] 1|2 ['x_y', 'z'] [])j"},
    {R"j({{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [1, 2, 3]|select('gt', 1)|list }} {{ [0, 1, none, '']|select|list }} {{ [{'t': 'a'}, {'t': 'b'}, {}]|selectattr('t', 'equalto', 'a')|list }} {{ [{'t': 'a'}, {}]|selectattr('t', 'defined')|list }} {{ [{'t': 'a'}, {}]|rejectattr('t')|list }} {{ [1,2,3]|select('in', [2, 3])|list }})j",
     R"j([1, 3] [1, 3] [2, 3] [1] [{'t': 'a'}] [{'t': 'a'}] [{}] [2, 3])j"},
    {R"j({{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ {'B': 1, 'a': 2}|dictsort(true) }} {{ {'a': 1}|items|list }} {{ undefined_x|items|list }})j",
     R"j([('a', 2), ('b', 1)] [('b', 1), ('a', 2)] [('B', 1), ('a', 2)] [('a', 1)] [])j"},
    {R"j({{ [1, 'a', none]|join(', ') }} {{ [{'n': 'x'}, {'n': 'y'}]|join(',', attribute='n') }} {{ 'abc'|join('-') }} {{ msgs|map(attribute='role')|join(',') }} {{ msgs|selectattr('role', 'equalto', 'user')|list|length }})j",
     R"j(1, a, None x,y a-b-c system,user,assistant 1)j"},
    {R"j({{ x|tojson }}|{{ x|tojson(indent=2) }}|{{ x|tojson(indent='\t') }}|{{ x|tojson(sort_keys=true) }}|{{ x|tojson(separators=(',', ':')) }}|{{ x|tojson(ensure_ascii=true) }}|{{ x|tojson(indent=0) }})j",
     R"j({"a": 1, "b": [1, 2.5, "é"], "c": {"d": null, "e": true}}|{
  "a": 1,
  "b": [
    1,
    2.5,
    "é"
  ],
  "c": {
    "d": null,
    "e": true
  }
}|{
	"a": 1,
	"b": [
		1,
		2.5,
		"é"
	],
	"c": {
		"d": null,
		"e": true
	}
}|{"a": 1, "b": [1, 2.5, "é"], "c": {"d": null, "e": true}}|{"a":1,"b":[1,2.5,"é"],"c":{"d":null,"e":true}}|{"a": 1, "b": [1, 2.5, "\u00e9"], "c": {"d": null, "e": true}}|{
"a": 1,
"b": [
1,
2.5,
"é"
],
"c": {
"d": null,
"e": true
}
})j"},
    {R"j({{ (1, 2)|tojson }} {{ 'a/b<c>&\u2028\x01\x7f'|tojson }} {{ 1e20|tojson }} {{ none|tojson }} {{ 'x😀'|tojson(ensure_ascii=true) }} {{ {1: 2, true: 3}|tojson }} {{ [[], {}]|tojson(indent=2) }})j",
     R"j([1, 2] "a/b<c>& \u0001" 1e+20 null "x\ud83d\ude00" {"1": 3} [
  [],
  {}
])j"},
    {R"j({{ '<'|escape }} {{ '<'|e|e }} {{ '<b>'|forceescape }} {{ ('<b>'|safe)|escape }} {{ 5|safe }} {{ 'x'|string }} {{ [1.0, 2.50]|string }} {{ none|string }}|{{ 'x'|center(5) }}|{{ {'b': 1, 'a': 2}|pprint }})j",
     R"j(&lt; &lt; &lt;b&gt; <b> 5 x [1.0, 2.5] None|  x  |{'a': 2, 'b': 1})j"},
    {R"j({{ x|attr('items') is callable }}|{{ x|attr('a') }}|{{ 'abc'|nofilter if false }}ok)j",
     R"j(True||ok)j"},
};

const Case kFilterErrorCases[] = {
    {R"j({{ 'abc'|nofilter }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ [1]|map('nofilter')|list }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ [1]|select('notatest')|list }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ x|selectattr('a')|length }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ x|selectattr('a')|tojson }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ undefined_x|tojson }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 7|items|list }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 3|indent }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ undefined_x|int }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ [1, 'a']|sort }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ x|dictsort(by='nope') }})j",
     R"j(ERROR(runtime))j"},
    {R"j({{ 'x'|round }})j",
     R"j(ERROR(runtime))j"},
};

TEST(TemplateFilters, AsJinja2) {
  for (const Case& c : kFilterCases) EXPECT_EQ(render_or_kind(c.source, table_vars()), c.expected) << c.source;
}

TEST(TemplateFilters, FailuresAsJinja2) {
  for (const Case& c : kFilterErrorCases) EXPECT_EQ(render_or_kind(c.source, table_vars()), c.expected) << c.source;
}

TEST(TemplateFilters, TojsonIsPythonJsonDumps) {
  const nlohmann::ordered_json v = nlohmann::ordered_json::parse(
      R"({"name": "get_weather", "args": {"city": "Zürich \"x\" \\ / <tag> &", "n": 3, "f": 0.5, "ok": true, "none": null},
          "list": [1, [], {}], "emoji": "😀\u0001"})");
  EXPECT_EQ(render("{{ v|tojson }}", {{"v", v}}),
            R"({"name": "get_weather", "args": {"city": "Zürich \"x\" \\ / <tag> &", "n": 3, "f": 0.5, "ok": true, "none": null}, "list": [1, [], {}], "emoji": "😀\u0001"})");
  EXPECT_EQ(render("{{ v.list|tojson(indent=2) }}", {{"v", v}}), "[\n  1,\n  [],\n  {}\n]");
  EXPECT_EQ(render("{{ v.args|tojson(ensure_ascii=true, sort_keys=true, separators=(',', ':')) }}", {{"v", v}}),
            R"({"city":"Z\u00fcrich \"x\" \\ / <tag> &","f":0.5,"n":3,"none":null,"ok":true})");
  EXPECT_EQ(render("{{ v.emoji|tojson(ensure_ascii=true) }}", {{"v", v}}), R"("\ud83d\ude00\u0001")");
  // Objects JSON cannot represent are errors, as in Python.
  EXPECT_EQ(render("{{ namespace(a=1)|tojson }}"), "ERROR(runtime): Object of type Namespace is not JSON serializable");
  EXPECT_EQ(render("{{ [1]|map('string')|tojson }}"), "ERROR(runtime): Object of type generator is not JSON serializable");
  EXPECT_EQ(render("{{ nothing|tojson }}"), "ERROR(runtime): Object of type Undefined is not JSON serializable");
}

TEST(TemplateFilters, GeneratorsAreOneShotLikePythons) {
  // select/map/... return iterators: consumed once, always true, no len().
  EXPECT_EQ(render("{% set g = [1, 2, 3]|select('odd') %}{{ g|list }}{{ g|list }}{{ g is iterable }}"),
               "[1, 3][]True");
  EXPECT_EQ(render("{% if []|select %}T{% else %}F{% endif %}"), "T");
  EXPECT_EQ(render("{% set g = [1, 2, 3]|map('string') %}{{ g|first }}{{ g|list }}"), "1['2', '3']");
  EXPECT_EQ(render("{{ [1]|select|length }}"), "ERROR(runtime): object of type 'generator' has no len()");
  // Their errors surface when they are consumed, not when they are made.
  EXPECT_EQ(render("{% set g = 7|items %}ok"), "ok");
  EXPECT_EQ(render("{% set g = 7|items %}{{ g|list }}"), "ERROR(runtime): Can only get item pairs from a mapping.");
}

}  // namespace
