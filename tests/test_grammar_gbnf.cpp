// The GBNF parser: the syntax it accepts, and errors that name the line and column.
#include <gtest/gtest.h>

#include "grammar/gbnf_parser.h"
#include "grammar_helpers.h"

namespace ubatch::test {
namespace {

using grammar::Expr;
using grammar::parse_gbnf;

std::string error_of(const std::string& text) {
  auto g = parse_gbnf(text);
  EXPECT_FALSE(g.is_ok()) << "parsed:\n" << text;
  return g ? "" : g.message();
}

TEST(GrammarGbnf, ParsesEveryConstruct) {
  auto g = parse_gbnf(R"G(# a comment
root ::= greeting (" " name)+ "!"? [0-9]{2,4} tail   # trailing comment
greeting ::= "hi" | "hello"
  | "hey"
name ::= [A-Z] [a-z]* | "\u00e9t\xE9" | [^\n"\\] .
tail ::= ( "a" |
  "b" ) {,2} x{3} y{1,}
x ::= ""
y ::= "y"
)G");
  ASSERT_TRUE(g.is_ok()) << g.message();
  const grammar::Grammar& gr = g.value();
  EXPECT_EQ(gr.rules[static_cast<size_t>(gr.root)].name, "root");
  ASSERT_EQ(gr.rules.size(), 6u);
  // greeting has three alternatives (the third on a line starting with '|').
  const Expr& greeting = gr.rules[1].body;
  ASSERT_EQ(greeting.kind, Expr::Kind::Alt);
  EXPECT_EQ(greeting.items.size(), 3u);
  EXPECT_EQ(greeting.items[2].bytes, "hey");
  // The \u and \x escapes are code points, stored as UTF-8.
  const Expr& name = gr.rules[2].body;
  EXPECT_EQ(name.items[1].bytes, "\xC3\xA9t\xC3\xA9");
  // [^\n"\\] excludes three code points and the surrogates.
  const Expr& neg = name.items[2].items[0];
  ASSERT_EQ(neg.kind, Expr::Kind::Chars);
  for (const grammar::CharRange& r : neg.ranges) {
    EXPECT_FALSE(r.lo <= '\n' && '\n' <= r.hi);
    EXPECT_FALSE(r.lo <= '"' && '"' <= r.hi);
    EXPECT_FALSE(r.lo <= 0xD800 && 0xD800 <= r.hi);
  }
  // {,2} is 0..2, {1,} is 1..unbounded.
  const Expr& tail = gr.rules[3].body;
  EXPECT_EQ(tail.items[0].kind, Expr::Kind::Repeat);
  EXPECT_EQ(tail.items[0].min, 0u);
  EXPECT_EQ(tail.items[0].max, 2u);
  EXPECT_EQ(tail.items[2].max, grammar::kUnbounded);
}

TEST(GrammarGbnf, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("root ::= \"a\"\nfoo = \"b\"\n"), "grammar: line 2, column 5: expected '::=' after the rule name 'foo'");
  EXPECT_EQ(error_of("root ::= \"a\" bar\n"), "grammar: line 1, column 14: undefined rule 'bar'");
  EXPECT_EQ(error_of("root ::= \"abc\n"), "grammar: line 1, column 10: unterminated literal (a '\"' is missing before the end of the line)");
  EXPECT_EQ(error_of("root ::= [a-z\n"), "grammar: line 1, column 10: unterminated character class (a ']' is missing before the end of the line)");
  EXPECT_EQ(error_of("root ::= (\"a\" | \"b\"\n"), "grammar: line 2, column 1: expected ')' to close the '(' at line 1, column 10");
  EXPECT_EQ(error_of("root ::= \"a\"\nroot ::= \"b\"\n"), "grammar: line 2, column 1: the rule 'root' is defined twice");
  EXPECT_EQ(error_of("start ::= \"a\"\n"), "grammar: no rule named 'root' (the start rule)");
  EXPECT_EQ(error_of("root ::= \"\\q\"\n"), "grammar: line 1, column 11: unknown escape '\\q'");
  EXPECT_EQ(error_of("root ::= \"\\x4\"\n"), "grammar: line 1, column 14: escape '\\x' needs 2 hex digits");
  EXPECT_EQ(error_of("root ::= \"\\uD800\"\n"), "grammar: line 1, column 11: escape gives U+D800, which is not a Unicode scalar value");
  EXPECT_EQ(error_of("root ::= [z-a]\n"), "grammar: line 1, column 11: range U+007A-U+0061 is reversed");
  EXPECT_EQ(error_of("root ::= []\n"), "grammar: line 1, column 10: empty character class");
  EXPECT_EQ(error_of("root ::= * \"a\"\n"), "grammar: line 1, column 10: '*' has no element before it to repeat");
  EXPECT_EQ(error_of("root ::= \"a\"{3,1}\n"), "grammar: line 1, column 13: repetition {3,1}: the maximum is below the minimum");
  EXPECT_EQ(error_of("root ::= \"a\"{20000}\n"), "grammar: line 1, column 13: repetition counts are limited to 10000");
  EXPECT_EQ(error_of("root ::= \"a\"{2\n"), "grammar: line 1, column 15: expected '}' to close the repetition");
  EXPECT_EQ(error_of("root ::= \"a\" )\n"), "grammar: line 1, column 14: unexpected ')' in the rule 'root'");
  EXPECT_EQ(error_of("::= \"a\"\n"), "grammar: line 1, column 1: expected a rule name");
  EXPECT_EQ(error_of("root ::= \"\xFF\"\n"), "grammar: line 1, column 11: the grammar text is not valid UTF-8");
}

TEST(GrammarGbnf, HostileNestingIsAnErrorNotACrash) {
  std::string deep = "root ::= " + std::string(1000, '(') + "\"a\"" + std::string(1000, ')') + "\n";
  EXPECT_NE(error_of(deep).find("parentheses nested deeper than 200"), std::string::npos);
  std::string stars = "root ::= \"a\"" + std::string(5000, '*') + "\n";
  EXPECT_NE(error_of(stars).find("more than 32 repetition operators"), std::string::npos);
}

TEST(GrammarGbnf, EmptyAlternativesAndLiterals) {
  auto g = compile_gbnf("root ::= | \"x\" \"\"\n");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, ""));
  EXPECT_TRUE(matches(g, "x"));
  EXPECT_FALSE(matches(g, "xx"));
}

}  // namespace
}  // namespace ubatch::test
