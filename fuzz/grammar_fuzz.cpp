// libFuzzer entry for the grammar parsers and compiler (not part of the default build).
//
// The first input byte picks what the rest is fed to:
//   0: GBNF text (up to a NUL byte) → parse_gbnf → build_automaton (small limits) → a matcher
//      over a byte vocabulary driven by the bytes after the NUL (the text itself when there is
//      none), each step checked against its mask (the pushdown machinery, token classes);
//   1: JSON text → json_schema_to_gbnf → parse_gbnf → build_automaton (the schema converter must
//      emit GBNF that parses, or an error);
//   2: a `pattern` → regex_to_gbnf → parse_gbnf (the same).
// Any crash, sanitizer report, or generated GBNF that does not parse is a finding.
//
// Build and run: docs/FUZZING.md (scripts/fuzz.sh grammar_fuzz); seeds in
// fuzz/corpus/grammar_fuzz/, dictionary fuzz/grammar_fuzz.dict.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/automaton.h"
#include "grammar/compiled_grammar.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex_gbnf.h"

using namespace ubatch;
using namespace ubatch::grammar;

namespace {

std::shared_ptr<const Vocabulary> byte_vocab() {
  static std::shared_ptr<const Vocabulary> v = [] {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
    for (const char* p : {"ab", "\"}", "{\"", "12", "é"}) pieces.push_back(p);
    pieces.push_back("");
    std::vector<uint8_t> eog(pieces.size(), 0);
    eog.back() = 1;
    return std::make_shared<const Vocabulary>(std::move(pieces), std::move(eog));
  }();
  return v;
}

AutomatonLimits small_limits() {
  AutomatonLimits l;
  l.max_nfa_nodes = 20000;
  l.max_states = 5000;
  l.max_table_entries = 500000;
  return l;
}

void run_gbnf(std::string_view text, std::string_view drive) {
  Result<Grammar> g = parse_gbnf(text);
  if (!g) return;
  auto compiled = CompiledGrammar::compile(g.value(), byte_vocab(), small_limits());
  if (!compiled) return;
  Matcher m(compiled.value());
  for (size_t i = 0; i < drive.size() && i < 64; ++i) {
    const std::shared_ptr<const TokenMask> mask = m.mask();
    const auto t = static_cast<int32_t>(static_cast<unsigned char>(drive[i]));
    if (m.accept(t) != mask->allows(t)) std::abort();  // the mask and the matcher disagree
  }
}

void must_parse(const std::string& gbnf) {
  Result<Grammar> g = parse_gbnf(gbnf);
  if (!g) {
    std::fprintf(stderr, "generated GBNF does not parse: %s\n%s\n", g.message().c_str(), gbnf.c_str());
    std::abort();
  }
  (void)build_automaton(g.value(), small_limits());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0: {
      const size_t nul = rest.find('\0');
      if (nul == std::string_view::npos) run_gbnf(rest, rest);
      else run_gbnf(rest.substr(0, nul), rest.substr(nul + 1));
      break;
    }
    case 1: {
      nlohmann::ordered_json schema = nlohmann::ordered_json::parse(rest, nullptr, false);
      if (schema.is_discarded()) break;
      Result<std::string> gbnf = json_schema_to_gbnf(schema);
      if (gbnf) must_parse(gbnf.value());
      break;
    }
    case 2: {
      Result<std::string> expr = regex_to_gbnf(rest, "c");
      if (expr) must_parse("root ::= " + expr.value() + "\nc ::= [a-z]\n");
      break;
    }
  }
  return 0;
}
