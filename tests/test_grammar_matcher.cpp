// The compiled automaton and the matcher: which texts a grammar accepts (checked against a
// reference recognizer that reads the grammar tree directly), prefixes, completion, end of
// generation, copies, and the compile-time errors (left recursion, empty language, size).
#include <gtest/gtest.h>

#include "grammar/automaton.h"
#include "grammar_helpers.h"

namespace ubatch::test {
namespace {

TEST(GrammarMatcher, LiteralsClassesAndRepetition) {
  auto g = compile_gbnf(R"G(root ::= "ab" [0-9]{2,3} [^a-c]? ("x" | "yz")*)G");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "ab12"));
  EXPECT_TRUE(matches(g, "ab123"));
  EXPECT_TRUE(matches(g, "ab123d"));
  EXPECT_TRUE(matches(g, "ab12dxyzx"));
  EXPECT_FALSE(matches(g, "ab1"));
  EXPECT_FALSE(matches(g, "ab1234a"));
  EXPECT_FALSE(matches(g, "ab12a"));
  EXPECT_FALSE(matches(g, "ab12dy"));
  EXPECT_TRUE(is_prefix(g, "ab12dy"));
  EXPECT_FALSE(is_prefix(g, "ac"));
}

TEST(GrammarMatcher, Utf8CharactersAcrossBytes) {
  // Classes hold code points; the automaton runs on their UTF-8 bytes.
  auto g = compile_gbnf(R"G(root ::= [à-ÿ]+ "€" [^a]  )G");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "àé€b"));
  EXPECT_TRUE(matches(g, "ÿ€\xF0\x9F\x98\x80"));  // U+1F600 is not 'a'
  EXPECT_FALSE(matches(g, "a€b"));
  EXPECT_FALSE(matches(g, "é€a"));
  EXPECT_TRUE(is_prefix(g, "\xC3"));   // half of à
  EXPECT_FALSE(is_prefix(g, "\xC2"));  // no class member starts with C2 (below à)
  // A negated class never admits surrogates or invalid UTF-8.
  EXPECT_FALSE(is_prefix(g, "é€\xED\xA0\x80"));
  EXPECT_FALSE(is_prefix(g, "é€\xFF"));
}

TEST(GrammarMatcher, RecursionAndCompletion) {
  auto g = compile_gbnf(R"G(root ::= "(" inner ")"
inner ::= | root inner)G");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "()"));
  EXPECT_TRUE(matches(g, "(()(()))"));
  EXPECT_FALSE(matches(g, "(()"));
  EXPECT_FALSE(matches(g, "())"));
  grammar::Matcher m(g);
  ASSERT_TRUE(m.accept_bytes("(()"));
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.accept_bytes(")"));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.is_complete());  // nothing may follow the outermost ')'
}

TEST(GrammarMatcher, EndOfGenerationOnlyWhereTheGrammarMayEnd) {
  auto g = compile_gbnf(R"G(root ::= [0-9]+)G");
  ASSERT_TRUE(g);
  grammar::Matcher m(g);
  EXPECT_FALSE(m.accept(256));  // end of generation before any digit
  EXPECT_FALSE(m.mask()->allows(256));
  ASSERT_TRUE(m.accept('4'));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.is_complete());  // more digits may follow
  EXPECT_TRUE(m.mask()->allows(256));
  EXPECT_TRUE(m.mask()->allows('7'));
  EXPECT_FALSE(m.mask()->allows('x'));
  ASSERT_TRUE(m.accept(256));
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.accept('1'));
  EXPECT_EQ(m.mask()->n_allowed, 0);
}

TEST(GrammarMatcher, RejectedTokenLeavesTheStateUnchanged) {
  auto g = compile_gbnf(R"G(root ::= "ab" "c")G");
  grammar::Matcher m(g);
  ASSERT_TRUE(m.accept('a'));
  EXPECT_FALSE(m.accept('x'));
  EXPECT_TRUE(m.accept('b'));
  EXPECT_TRUE(m.accept('c'));
  EXPECT_TRUE(m.is_complete());
}

TEST(GrammarMatcher, CopiesAreIndependent) {
  auto g = compile_gbnf(R"(root ::= "a" ("b" | "c") "d")");
  grammar::Matcher a(g);
  ASSERT_TRUE(a.accept('a'));
  grammar::Matcher b = a;
  ASSERT_TRUE(a.accept('b'));
  ASSERT_TRUE(b.accept('c'));
  EXPECT_FALSE(a.accept('c'));
  EXPECT_TRUE(a.accept('d'));
  EXPECT_TRUE(b.accept('d'));
  grammar::Matcher c(g);
  c = b;
  EXPECT_TRUE(c.is_complete());
}

TEST(GrammarMatcher, TailCallsKeepStacksFlat) {
  // A right-recursive list of a thousand items: the recursive call is the rule's last step,
  // so the stack does not grow with the list.
  auto g = compile_gbnf(R"G(root ::= item ("," root)?
item ::= [a-z]+)G");
  ASSERT_TRUE(g);
  grammar::Matcher m(g);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(m.accept_bytes(i ? ",ab" : "ab"));
  EXPECT_TRUE(m.can_end());
  size_t max_depth = 0;
  for (size_t i = 0; i < m.position().size(); ++i) max_depth = std::max(max_depth, m.position().stack(i).size());
  EXPECT_LE(max_depth, 3u);
}

TEST(GrammarMatcher, NullableLoopsTerminate) {
  auto g = compile_gbnf(R"G(root ::= (opt)* "x"
opt ::= "a"?)G");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "x"));
  EXPECT_TRUE(matches(g, "aaax"));
  EXPECT_FALSE(matches(g, "aaa"));
}

TEST(GrammarMatcher, CompileErrors) {
  auto err = [](const std::string& text) {
    auto g = grammar::CompiledGrammar::from_gbnf(text, byte_vocab());
    EXPECT_FALSE(g.is_ok()) << text;
    return g ? std::string() : g.message();
  };
  EXPECT_EQ(err("root ::= root \"a\" | \"b\"\n"),
            "grammar: left recursion: the rule 'root' can reach itself without consuming input ('root' → 'root')");
  EXPECT_EQ(err("root ::= a \"x\" | \"y\"\na ::= b? root\nb ::= \"b\"\n"),
            "grammar: left recursion: the rule 'root' can reach itself without consuming input ('root' → 'a' → 'root')");
  EXPECT_EQ(err("root ::= \"a\" root\n"),
            "grammar: the start rule 'root' matches no text (each of its alternatives needs a rule that never ends)");
  // Expansion stops at the node limit (memory stays bounded), and the state limit holds too.
  EXPECT_NE(err("root ::= ((\"a\" | \"b\"){100}){10000}\n").find("grammar: too large (more than 500000 automaton nodes)"),
            std::string::npos);
  grammar::AutomatonLimits small;
  small.max_states = 1000;
  auto parsed = grammar::parse_gbnf("root ::= [a-z]{600} [0-9]{600}\n");
  ASSERT_TRUE(parsed.is_ok());
  auto big = grammar::build_automaton(parsed.value(), small);
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.message().find("more than 1000 automaton states"), std::string::npos) << big.message();
}

TEST(GrammarMatcher, InlinedAndCalledRulesAgree) {
  // The same language with the small rule inlined (finite) and called (it loops).
  auto inl = compile_gbnf(R"G(root ::= "<" d d d ">"
d ::= [0-9] | "x")G");
  auto call = compile_gbnf(R"G(root ::= "<" d d d ">"
d ::= [0-9]+ | "x")G");
  ASSERT_TRUE(inl && call);
  EXPECT_TRUE(matches(inl, "<1x2>"));
  EXPECT_FALSE(matches(inl, "<12x3>"));
  EXPECT_TRUE(matches(call, "<12x3>"));
  EXPECT_FALSE(matches(call, "<12>"));
  EXPECT_LT(inl->automaton().n_rules(), call->automaton().n_rules());
}

// Random sentences and random near-misses: the automaton agrees with the reference recognizer.
class GrammarAgainstReference : public ::testing::TestWithParam<const char*> {};

TEST_P(GrammarAgainstReference, RandomTexts) {
  auto parsed = grammar::parse_gbnf(GetParam());
  ASSERT_TRUE(parsed.is_ok()) << parsed.message();
  auto g = compile_gbnf(GetParam());
  ASSERT_TRUE(g);
  ReferenceRecognizer ref(parsed.value());
  SentenceGenerator gen(parsed.value(), 42);
  std::mt19937_64 rng(7);
  int n_sentences = 0, n_mutants = 0, n_mutants_accepted = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    if (!gen.generate(s)) continue;
    ++n_sentences;
    ASSERT_TRUE(ref.full_match(s)) << "generator/reference disagree on '" << s << "'";
    EXPECT_TRUE(matches(g, s)) << "rejected sentence '" << s << "'";
    // Every prefix of a sentence is a valid prefix.
    if (!s.empty()) {
      EXPECT_TRUE(is_prefix(g, s.substr(0, rng() % s.size()))) << s;
    }
    // Mutants: delete, insert or replace one byte; the verdicts must agree.
    for (int k = 0; k < 4; ++k) {
      std::string m = s;
      const size_t at = m.empty() ? 0 : rng() % (m.size() + 1);
      const char c = "(),+-*/0123456789 abcxyz\"{}[]:é"[rng() % 31];
      switch (rng() % 3) {
        case 0: if (at < m.size()) m.erase(at, 1); break;
        case 1: m.insert(at, 1, c); break;
        default: if (at < m.size()) m[at] = c; break;
      }
      ++n_mutants;
      const bool want = ref.full_match(m);
      n_mutants_accepted += want;
      EXPECT_EQ(matches(g, m), want) << "mutant '" << m << "' of '" << s << "'";
    }
  }
  EXPECT_GT(n_sentences, 100);
  EXPECT_LT(n_mutants_accepted, n_mutants);  // the mutants exercise rejection too
}

INSTANTIATE_TEST_SUITE_P(
    Grammars, GrammarAgainstReference,
    ::testing::Values(
        // arithmetic
        R"G(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= "-"? ([0-9]+ | "(" expr ")"))G",
        // JSON-like
        R"G(root ::= value
value ::= "{" ws (pair ("," ws pair)*)? "}" | "[" ws (value ws ("," ws value ws)*)? "]" | str | [0-9]+
pair ::= str ws ":" ws value ws
str ::= "\"" [a-zé]* "\""
ws ::= " "?)G",
        // nullable rules and ambiguity
        R"G(root ::= a b a
a ::= "x"* | "y"
b ::= "x" | "")G",
        // deep right recursion and tiny rules called in loops
        R"G(root ::= item+
item ::= c | "(" root? ")"
c ::= [abc])G",
        // counted repetitions and alternatives sharing prefixes
        R"G(root ::= ("ab" | "abc" | "a"){1,4} "z"? [0-9]{0,2})G"));

}  // namespace
}  // namespace ubatch::test
