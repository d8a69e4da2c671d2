// Token masks against brute force: at positions reached by random walks, the mask must equal
// {t : a copy of the matcher accepts t} for every token of the vocabulary, on vocabularies
// whose tokens cross rule boundaries, split UTF-8 characters and repeat pieces — a synthetic
// one, and the tiny reference models' real ones (512 tokens; skipped visibly without them).
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "grammar/json_schema.h"
#include "grammar_helpers.h"
#include "support.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::test {
namespace {

// Single bytes, pieces that span the grammars' rule boundaries, split UTF-8, duplicates.
std::shared_ptr<const grammar::Vocabulary> tricky_vocab() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  for (const char* p : {"{\"", "\":", "\",", "\"}", "\"]", "]}", "}}", "}]", ", ", ",\"", "\": \"", "\":\"", " {",
                        "true", "false", "null", "nu", "ll", "12", "1.", ".5", "e+", "e-1", "-0", "00", "10", "0.",
                        "\xC3", "\xA9", "é", "é\"", "€", "\xE2\x82", "\x82\xAC", "ab", "abc", "(1", "1)", "+(", ")*",
                        "SELECT", " FROM", " WHERE", " = ", "','", "\n", "\n\n", "  ", "\t", ",\n", "\\\"", "\\n",
                        "\\u00", "\"\"", "a,", ",b", "x\n", "select", "AND ", "\",\"", "[[", "]]", "[]", "{}", "\",\n",
                        "2024-", "-01", "T1", "Z\"", "-4", "abcd"})
    pieces.push_back(p);
  pieces.push_back("\":");  // a duplicate piece
  pieces.push_back("");     // a control token: never allowed
  pieces.push_back("");     // end of generation
  std::vector<uint8_t> eog(pieces.size(), 0);
  eog.back() = 1;
  return std::make_shared<grammar::Vocabulary>(std::move(pieces), std::move(eog));
}

std::shared_ptr<const grammar::Vocabulary> tiny_model_vocab(const std::string& name) {
  const std::string path = reference_path("models/" + name);
  if (!std::filesystem::exists(path)) return nullptr;
  auto file = gguf::File::open(path);
  if (!file) return nullptr;
  auto tok = Tokenizer::from_gguf(*file.value());
  if (!tok) return nullptr;
  return grammar::Vocabulary::from_tokenizer(*tok.value());
}

const char* kArithmetic = R"G(root ::= expr
expr ::= term (ws ("+" | "-") ws term)*
term ::= factor (ws ("*" | "/") ws factor)*
factor ::= "-"? ([0-9]+ ("." [0-9]+)? | "(" ws expr ws ")")
ws ::= " "?)G";

const char* kSql = R"G(root ::= "SELECT " cols " FROM " ident where? ";"?
cols ::= "*" | ident (", " ident)*
where ::= " WHERE " cond (" AND " cond)*
cond ::= ident " = " (ident | [0-9]+ | "'" [a-z]* "'")
ident ::= [a-z_] [a-z0-9_]*)G";

const char* kCsvLine = R"G(root ::= field ("," field)* "\n"
field ::= [^,"\n]* | "\"" ([^"] | "\"\"")* "\"")G";

const char* kTinyLoops = R"G(root ::= "<" item* ">"
item ::= c | "(" root ")"
c ::= [a-e] | "é")G";

// Compares the mask with brute force at every position of `walks` random walks.
void check_masks(const std::shared_ptr<const grammar::CompiledGrammar>& g, int walks, int max_steps, uint64_t seed) {
  const grammar::Vocabulary& v = g->vocabulary();
  std::mt19937_64 rng(seed);
  int n_positions = 0;
  for (int w = 0; w < walks; ++w) {
    grammar::Matcher m(g);
    std::string text;
    for (int step = 0; step < max_steps && !m.is_complete(); ++step) {
      const std::shared_ptr<const grammar::TokenMask> mask = m.mask();
      std::vector<int32_t> allowed;
      int32_t n_allowed = 0;
      for (int32_t t = 0; t < v.n_vocab(); ++t) {
        grammar::Matcher copy = m;
        const bool want = copy.accept(t);
        ASSERT_EQ(mask->allows(t), want) << "token " << t << " '" << v.piece(t) << "' after '" << text << "'";
        if (want) {
          ++n_allowed;
          if (!v.is_eog(t)) allowed.push_back(t);
        }
      }
      ASSERT_EQ(mask->n_allowed, n_allowed);
      ++n_positions;
      if (allowed.empty()) break;
      // Prefer longer pieces now and then, so walks reach deep positions.
      int32_t pick = allowed[rng() % allowed.size()];
      if (rng() % 2) {
        for (int k = 0; k < 8; ++k) {
          const int32_t t = allowed[rng() % allowed.size()];
          if (v.piece(t).size() > v.piece(pick).size()) pick = t;
        }
      }
      text += v.piece(pick);
      ASSERT_TRUE(m.accept(pick));
    }
  }
  EXPECT_GT(n_positions, walks);
}

TEST(GrammarMask, MatchesBruteForceOnATrickyVocabulary) {
  const auto v = tricky_vocab();
  for (const char* text : {kArithmetic, kSql, kCsvLine, kTinyLoops}) {
    auto g = compile_gbnf(text, v);
    ASSERT_TRUE(g);
    check_masks(g, 12, 40, 1);
  }
  auto json = grammar::CompiledGrammar::from_gbnf(grammar::json_object_gbnf(), v);
  ASSERT_TRUE(json.is_ok()) << json.message();
  check_masks(json.value(), 12, 60, 2);
}

TEST(GrammarMask, MatchesBruteForceForASchemaOnATrickyVocabulary) {
  const auto schema = nlohmann::ordered_json::parse(R"G({
    "type": "object",
    "properties": {
      "id": {"type": "string", "format": "uuid"},
      "when": {"type": "string", "format": "date-time"},
      "n": {"type": "integer", "minimum": -40, "maximum": 1200},
      "x": {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
      "tags": {"type": "array", "items": {"enum": ["a", "ab", "é"]}, "maxItems": 3},
      "sub": {"$ref": "#/$defs/node"}
    },
    "required": ["n"],
    "$defs": {"node": {"type": "object", "properties": {"k": {"type": "string", "pattern": "^[a-c]+,b?$"},
                                                        "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                       "required": ["k"]}}
  })G");
  auto gbnf = grammar::json_schema_to_gbnf(schema);
  ASSERT_TRUE(gbnf.is_ok()) << gbnf.message();
  auto g = compile_gbnf(gbnf.value(), tricky_vocab());
  ASSERT_TRUE(g);
  check_masks(g, 16, 80, 3);
}

TEST(GrammarMask, MatchesBruteForceOnTinyModelVocabularies) {
  UBATCH_REQUIRE_REFERENCE();
  for (const char* model : {"tiny-gemma3-f32.gguf", "tiny-llama-f32.gguf"}) {
    auto v = tiny_model_vocab(model);
    if (!v) GTEST_SKIP() << "cannot load the vocabulary of " << reference_path(std::string("models/") + model);
    for (const char* text : {kArithmetic, kSql, kCsvLine}) {
      auto g = compile_gbnf(text, v);
      ASSERT_TRUE(g);
      check_masks(g, 6, 30, 4);
    }
    auto json = grammar::CompiledGrammar::from_gbnf(grammar::json_object_gbnf(), v);
    ASSERT_TRUE(json.is_ok());
    check_masks(json.value(), 6, 40, 5);
  }
}

TEST(GrammarMask, SequencesAtTheSamePositionShareOneMask) {
  auto g = compile_gbnf(kArithmetic, tricky_vocab());
  grammar::Matcher a(g), b(g);
  ASSERT_TRUE(a.accept_bytes("(1+2"));
  ASSERT_TRUE(b.accept_bytes("(1+2"));
  const auto ma = a.mask();
  const auto before = g->stats();
  const auto mb = b.mask();
  EXPECT_EQ(ma.get(), mb.get());
  EXPECT_EQ(g->stats().mask_hits, before.mask_hits + 1);
  EXPECT_EQ(g->stats().masks_computed, before.masks_computed);
}

}  // namespace
}  // namespace ubatch::test
