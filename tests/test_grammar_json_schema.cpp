// JSON Schema → grammar: every supported keyword accepts the JSON texts it should and
// rejects the others; numeric bounds are checked exhaustively against arithmetic;
// unsupported keywords and bad patterns are errors that name the keyword and where it is.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "grammar/json_schema.h"
#include "grammar/regex_gbnf.h"
#include "grammar_helpers.h"

namespace ubatch::test {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const grammar::CompiledGrammar> schema_grammar(const std::string& schema_text) {
  auto gbnf = grammar::json_schema_to_gbnf(ojson::parse(schema_text));
  EXPECT_TRUE(gbnf.is_ok()) << gbnf.message() << "\n" << schema_text;
  if (!gbnf) return nullptr;
  return compile_gbnf(gbnf.value());
}

std::string schema_error(const std::string& schema_text) {
  auto gbnf = grammar::json_schema_to_gbnf(ojson::parse(schema_text));
  EXPECT_FALSE(gbnf.is_ok()) << schema_text;
  return gbnf ? "" : gbnf.message();
}

void expect_valid(const std::string& schema, std::initializer_list<const char*> good,
                  std::initializer_list<const char*> bad) {
  auto g = schema_grammar(schema);
  ASSERT_TRUE(g);
  for (const char* t : good) EXPECT_TRUE(matches(g, t)) << schema << "\nshould accept: " << t;
  for (const char* t : bad) EXPECT_FALSE(matches(g, t)) << schema << "\nshould reject: " << t;
}

TEST(GrammarJsonSchema, Types) {
  // Characters are generated literally or with the two-character escapes: no `\uXXXX` (docs/STRUCTURED.md).
  expect_valid(R"({"type": "string"})", {R"("")", R"("a\"b\\c\/é\n\t\r\b\f")", "\"é€😀\""},
               {R"("a)", R"("\ud800")", R"("\u00e9")", R"("\u0019")", "\"a\nb\"", "1", R"("\x")"});
  expect_valid(R"({"type": "integer"})", {"0", "-7", "123456789012345678"}, {"01", "1.5", "-", "1e3", "\"1\""});
  expect_valid(R"({"type": "number"})", {"0", "-0.5", "3.25e-2", "1E+10", "12"}, {".5", "1.", "01.2", "NaN"});
  expect_valid(R"({"type": "boolean"})", {"true", "false"}, {"True", "1"});
  expect_valid(R"({"type": "null"})", {"null"}, {"nul", "None"});
  expect_valid(R"({"type": ["string", "null"]})", {R"("x")", "null"}, {"1"});
  expect_valid(R"({})", {"1", R"({"a": [true, null, {"b": "c"}]})", R"("s")"}, {"{", "[1,]"});
  expect_valid(R"(true)", {"[]", "{}"}, {"]"});
}

TEST(GrammarJsonSchema, ObjectsKeepOrderAndRequired) {
  const char* s = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
                      "required": ["b"], "additionalProperties": false})";
  expect_valid(s,
               {R"({"b": "x"})", R"({"a": 1, "b": "x"})", R"({"b": "x", "c": true})", R"({"a": 1,"b":"x","c":false})",
                "{\n  \"a\": 1,\n  \"b\": \"x\"\n}"},
               {R"({})", R"({"a": 1})", R"({"b": "x", "a": 1})", R"({"b": "x",})", R"({"b": "x", "d": 1})",
                R"({"b": 1})", R"({"b": "x" "c": true})"});
  // All optional: the empty object, any ordered subset.
  expect_valid(R"({"properties": {"x": {"type": "null"}, "y": {"type": "null"}}})",
               {"{}", R"({"x": null})", R"({"y": null})", R"({"x": null, "y": null})"}, {R"({"y": null, "x": null})"});
  // Required names that are not listed take any value, after the listed ones.
  expect_valid(R"({"properties": {"a": {"type": "integer"}}, "required": ["z"]})", {R"({"z": [1]})", R"({"a": 2, "z": {}})"},
               {R"({"a": 2})"});
}

TEST(GrammarJsonSchema, AdditionalProperties) {
  // true: further keys after the listed ones, never a listed name again.
  expect_valid(R"({"properties": {"ab": {"type": "integer"}}, "additionalProperties": true})",
               {R"({"ab": 1})", R"({"ab": 1, "a": "x"})", R"({"abc": [1], "b": null})", "{}"},
               {R"({"ab": 1, "ab": 2})", R"({"ab": "x"})"});
  // A schema: the values of further keys follow it; no listed keys: a map.
  expect_valid(R"({"type": "object", "additionalProperties": {"type": "number"}})",
               {"{}", R"({"x": 1, "y": 2.5})"}, {R"({"x": "1"})"});
}

TEST(GrammarJsonSchema, Arrays) {
  expect_valid(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})",
               {"[1, 2]", "[1,2,3]", "[ 1 , 2 ]"}, {"[]", "[1]", "[1, 2, 3, 4]", "[1, \"a\"]", "[1, 2,]"});
  expect_valid(R"({"type": "array"})", {"[]", "[1, \"a\", [null]]"}, {"[,]"});
  expect_valid(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false})",
               {"[]", R"(["a"])", R"(["a", 1])"}, {R"([1])", R"(["a", 1, 2])"});
  expect_valid(R"({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "null"}, "minItems": 2})",
               {R"(["a", null])", R"(["a", null, null])"}, {R"(["a"])", R"(["a", "b"])"});
  expect_valid(R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"});
}

TEST(GrammarJsonSchema, EnumAndConst) {
  expect_valid(R"({"enum": ["red", "a\"b", 3, null, {"k": [1, 2]}]})",
               {R"("red")", R"("a\"b")", "3", "null", R"({"k":[1,2]})"}, {R"("blue")", "4", R"({"k": [1, 2]})"});
  expect_valid(R"({"type": "string", "enum": ["x", 1]})", {R"("x")"}, {"1"});
  expect_valid(R"({"const": "fixed"})", {R"("fixed")"}, {R"("other")"});
}

TEST(GrammarJsonSchema, StringLengthCountsCharacters) {
  // An escape or a multi-byte character is one character.
  expect_valid(R"({"type": "string", "minLength": 2, "maxLength": 3})",
               {R"("ab")", R"("abc")", R"("\n\t")", "\"éé\"", R"("a\\")"}, {R"("a")", R"("abcd")", R"("\n")"});
}

TEST(GrammarJsonSchema, Patterns) {
  expect_valid(R"({"type": "string", "pattern": "^[A-Z]{3}-\\d{2,4}$"})", {R"("ABC-12")", R"("XYZ-1234")"},
               {R"("ABC-1")", R"("abc-12")", R"(" ABC-12")", R"("ABC-12x")"});
  // Unanchored patterns match anywhere.
  expect_valid(R"({"type": "string", "pattern": "ab+c"})", {R"("abc")", R"("xxabbbcyy")"}, {R"("ac")", R"("")"});
  // Characters JSON escapes are written escaped.
  expect_valid(R"({"type": "string", "pattern": "^a\"b\\\\c\\n(x|y)?$"})", {R"("a\"b\\c\n")", R"("a\"b\\c\nx")"},
               {"\"a\"b\\c\n\"", R"("a\"b\\c\n\n")"});
  expect_valid(R"({"type": "string", "pattern": "^[^a-z\\s]+\\.?$|^(?:foo)*$"})", {R"("ABC")", R"("12.")", R"("foofoo")", R"("")"},
               {R"("A B")", R"("abc")", R"("fo")"});
  expect_valid(R"({"type": "string", "pattern": "^.{2}$"})", {R"("ab")", "\"é€\"", R"("\"x")"}, {R"("\n1")", R"("abc")"});
}

TEST(GrammarJsonSchema, Formats) {
  expect_valid(R"({"type": "string", "format": "date"})", {R"("2024-02-28")", R"("1999-12-31")", R"("2023-04-30")"},
               {R"("2024-02-30")", R"("2023-04-31")", R"("2024-13-01")", R"("2024-1-01")"});
  expect_valid(R"({"type": "string", "format": "time"})", {R"("23:59:59Z")", R"("08:00:00.123+02:00")"},
               {R"("24:00:00Z")", R"("12:00:00")", R"("12:60:00Z")"});
  expect_valid(R"({"type": "string", "format": "date-time"})", {R"("2024-01-15T10:30:00Z")"}, {R"("2024-01-15 10:30:00Z")"});
  expect_valid(R"({"type": "string", "format": "uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
               {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"});
  expect_valid(R"({"type": "string", "format": "email"})", {R"("a.b@example.com")"}, {R"("no-at-sign")"});
  expect_valid(R"({"type": "string", "format": "ipv4"})", {R"("192.168.0.1")", R"("0.0.0.0")"}, {R"("256.1.1.1")", R"("01.1.1.1")"});
}

TEST(GrammarJsonSchema, CombinatorsAndReferences) {
  expect_valid(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})", {"5", R"("x")"}, {R"("xy")", "true"});
  expect_valid(R"({"oneOf": [{"type": "boolean"}, {"type": "null"}]})", {"true", "null"}, {"0"});
  expect_valid(R"({"allOf": [{"type": "integer", "minimum": 3}]})", {"3"}, {"2"});
  // Recursive definitions.
  const char* tree = R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                         "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
                         "$ref": "#/$defs/node"})";
  expect_valid(tree, {R"({"v": 1})", R"({"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}, {"v": 4}]})"},
               {R"({"v": 1, "kids": [{}]})"});
  expect_valid(R"({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["next"]})",
               {R"({"next": null})", R"({"next": {"next": null}})"}, {R"({"next": {}})"});
  expect_valid(R"({"definitions": {"a~b/c": {"type": "null"}}, "$ref": "#/definitions/a~0b~1c"})", {"null"}, {"1"});
}

// Integer bounds: every integer in [-300, 300] against arithmetic.
TEST(GrammarJsonSchema, IntegerBoundsExhaustive) {
  struct Case {
    const char* bounds;
    long lo, hi;  // inclusive, LONG_MIN/LONG_MAX when absent
  };
  for (const Case& c : {Case{R"("minimum": 0, "maximum": 150)", 0, 150}, Case{R"("minimum": -17, "maximum": 9)", -17, 9},
                        Case{R"("exclusiveMinimum": -100, "exclusiveMaximum": -3)", -99, -4},
                        Case{R"("minimum": 10.5)", 11, LONG_MAX}, Case{R"("maximum": -250)", LONG_MIN, -250},
                        Case{R"("minimum": 99, "maximum": 101)", 99, 101}, Case{R"("minimum": 7, "maximum": 7)", 7, 7},
                        Case{R"("exclusiveMaximum": 1000)", LONG_MIN, 999}}) {
    auto g = schema_grammar(std::string(R"({"type": "integer", )") + c.bounds + "}");
    ASSERT_TRUE(g);
    for (long v = -300; v <= 300; ++v)
      EXPECT_EQ(matches(g, std::to_string(v)), v >= c.lo && v <= c.hi) << c.bounds << " value " << v;
    EXPECT_FALSE(matches(g, "007")) << c.bounds;
    EXPECT_EQ(matches(g, "123456"), 123456 >= c.lo && 123456 <= c.hi) << c.bounds;
  }
}

// Number bounds: decimal texts against arithmetic. Every accepted text is in range; every
// in-range text in canonical form (no "-0", no leading zeros) is accepted.
TEST(GrammarJsonSchema, NumberBoundsAgainstArithmetic) {
  std::vector<std::string> texts;
  for (int i = -130; i <= 130; ++i) {
    texts.push_back(std::to_string(i));
    for (const char* f : {".0", ".00", ".5", ".001", ".999", ".10"}) {
      if (i == 0) texts.push_back(std::string("-0") + f);
      texts.push_back(std::to_string(i) + f);
    }
  }
  const std::vector<std::pair<const char*, const char*>> lower = {
      {"", ""}, {R"("minimum": 0)", ">=0"}, {R"("exclusiveMinimum": 0)", ">0"}, {R"("minimum": -12)", ">=-12"},
      {R"("exclusiveMinimum": -12)", ">-12"}, {R"("minimum": 5)", ">=5"}, {R"("exclusiveMinimum": 100)", ">100"}};
  const std::vector<std::pair<const char*, const char*>> upper = {
      {"", ""}, {R"("maximum": 0)", "<=0"}, {R"("exclusiveMaximum": 0)", "<0"}, {R"("maximum": 7)", "<=7"},
      {R"("exclusiveMaximum": 7)", "<7"}, {R"("maximum": -5)", "<=-5"}, {R"("exclusiveMaximum": 120)", "<120"}};
  int checked = 0;
  for (const auto& [lo, lo_op] : lower) {
    for (const auto& [hi, hi_op] : upper) {
      if (!*lo && !*hi) continue;
      std::string schema = R"({"type": "number")";
      if (*lo) schema += std::string(", ") + lo;
      if (*hi) schema += std::string(", ") + hi;
      schema += "}";
      auto parsed = grammar::json_schema_to_gbnf(ojson::parse(schema));
      if (!parsed) {
        // Only bounds that leave nothing are refused.
        EXPECT_NE(parsed.message().find("no number lies between the bounds"), std::string::npos) << schema;
        continue;
      }
      auto g = compile_gbnf(parsed.value());
      ASSERT_TRUE(g);
      auto holds = [](const char* op, double x) {
        if (!*op) return true;
        const double b = std::atof(op + (op[1] == '=' ? 2 : 1));
        if (op[0] == '>') return op[1] == '=' ? x >= b : x > b;
        return op[1] == '=' ? x <= b : x < b;
      };
      for (const std::string& t : texts) {
        const double x = std::atof(t.c_str());
        const bool in = holds(lo_op, x) && holds(hi_op, x);
        const bool got = matches(g, t);
        if (got) {
          EXPECT_TRUE(in) << schema << " accepted " << t;
        }
        const bool canonical = t.rfind("-0", 0) != 0;
        if (in && canonical) {
          EXPECT_TRUE(got) << schema << " rejected " << t;
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40000);
}

TEST(GrammarJsonSchema, UnsupportedKeywordsAreNamed) {
  EXPECT_EQ(schema_error(R"({"type": "object", "properties": {"n": {"type": "number", "multipleOf": 2}}})"),
            "json_schema: at #/properties/n: unsupported keyword 'multipleOf'");
  EXPECT_EQ(schema_error(R"({"type": "array", "uniqueItems": true})"),
            "json_schema: at #: 'uniqueItems' is not supported");
  EXPECT_EQ(schema_error(R"({"type": "object", "minProperties": 1})"), "json_schema: at #: unsupported keyword 'minProperties'");
  EXPECT_EQ(schema_error(R"({"not": {"type": "null"}})"), "json_schema: at #: unsupported keyword 'not'");
  EXPECT_EQ(schema_error(R"({"properties": {"a/b": {"if": {}}}})"), "json_schema: at #/properties/a~1b: unsupported keyword 'if'");
  EXPECT_EQ(schema_error(R"({"$ref": "other.json#/x"})"),
            "json_schema: at #: $ref 'other.json#/x': only references within the schema (\"#\" or \"#/...\") are supported");
  EXPECT_EQ(schema_error(R"({"$ref": "#/$defs/missing"})"), "json_schema: at #: $ref '#/$defs/missing' does not resolve (no '$defs')");
  EXPECT_EQ(schema_error(R"({"type": "string", "format": "uri"})"),
            "json_schema: at #: format 'uri' is not supported (supported: date, time, date-time, uuid, email, ipv4)");
  EXPECT_EQ(schema_error(R"({"type": "number", "minimum": 0.5})"),
            "json_schema: at #: 'minimum' 0.5: only integer-valued bounds are supported for type number (use type integer, or an integer bound)");
  EXPECT_EQ(schema_error(R"({"allOf": [{"type": "null"}, {"type": "null"}]})"), "json_schema: at #: 'allOf' is supported with exactly one schema");
  EXPECT_EQ(schema_error(R"({"type": "string", "pattern": "^(?=a)b$"})"),
            "json_schema: at #: pattern '^(?=a)b$': at offset 1: lookahead is not supported");
  EXPECT_EQ(schema_error(R"({"type": "string", "pattern": "(a)\\1"})"),
            "json_schema: at #: pattern '(a)\\1': at offset 3: backreferences are not supported");
  EXPECT_EQ(schema_error(R"({"type": "string", "pattern": "a\\bc"})"),
            "json_schema: at #: pattern 'a\\bc': at offset 1: word boundaries (\\b) are not supported");
  EXPECT_EQ(schema_error(R"({"type": "string", "pattern": "a^b"})"),
            "json_schema: at #: pattern 'a^b': at offset 1: '^' is supported only at the start of the pattern (or of a top-level alternative)");
  EXPECT_EQ(schema_error(R"({"type": "string", "pattern": "a**"})"),
            "json_schema: at #: pattern 'a**': at offset 2: nothing to repeat (a quantifier after a quantifier)");
  EXPECT_EQ(schema_error(R"({"type": "widget"})"), "json_schema: at #: unknown type 'widget'");
  EXPECT_EQ(schema_error(R"(false)"), "json_schema: at #: the schema 'false' matches nothing");
  EXPECT_EQ(schema_error(R"({"type": "array", "maxItems": 5000})"), "json_schema: at #: 'maxItems' above 1000 is not supported");
  EXPECT_EQ(schema_error(R"({"type": "integer", "minimum": 5, "maximum": 4})"), "json_schema: at #: no integer lies between the bounds");
  EXPECT_EQ(schema_error(R"({"type": "string", "minLength": 3, "maxLength": 2})"), "json_schema: at #: 'minLength' is above 'maxLength'");
  EXPECT_EQ(schema_error(R"({"$ref": "#/x", "type": "null", "x": {}})"), "json_schema: at #: unsupported keyword 'x'");
  EXPECT_EQ(schema_error(R"({"$ref": "#/$defs/a", "minimum": 1, "$defs": {"a": {}}})"),
            "json_schema: at #: keyword 'minimum' beside '$ref' is not supported");
}

TEST(GrammarJsonSchema, AnnotationsAreIgnored) {
  expect_valid(R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x", "title": "T", "description": "d",
                  "type": "integer", "default": 3, "examples": [1], "deprecated": false, "$comment": "c"})",
               {"3"}, {"\"3\""});
}

TEST(GrammarJsonSchema, RegexSubsetDirectly) {
  auto re = grammar::regex_to_gbnf("^\\u{1F600}\\x41[\\d\\-]{2}$", "c");
  ASSERT_TRUE(re.is_ok()) << re.message();
  auto g = compile_gbnf("root ::= " + re.value() + "\nc ::= [a-z]\n");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "\xF0\x9F\x98\x80" "A1-"));
  EXPECT_FALSE(matches(g, "\xF0\x9F\x98\x80" "A1a"));
}

TEST(GrammarJsonSchema, JsonObjectGrammar) {
  auto g = compile_gbnf(grammar::json_object_gbnf());
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, R"({"a": {"b": [1, 2.5, "x", true, false, null, {}]}})"));
  EXPECT_TRUE(matches(g, "{}"));
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_FALSE(matches(g, R"({"a": 1} )"));  // nothing after the object
  grammar::Matcher m(g);
  ASSERT_TRUE(m.accept_bytes(R"({"a": 1})"));
  EXPECT_TRUE(m.is_complete());
}

}  // namespace
}  // namespace ubatch::test
