// Compiles grammars for one model's vocabulary and keeps the most recently used ones, so
// requests that repeat a schema or grammar (the common case for an application) reuse its
// automaton and every token class and mask computed for it so far.
//
// Thread-safe: any thread may call get() (the server compiles on its request threads, so
// errors reach the client as 400 before anything is queued); compilation runs outside the
// lock. The vocabulary (token pieces and trie) is built on first use (~0.2–0.6 s for a
// 262k-token vocabulary) or by warm_up().
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"
#include "grammar/compiled_grammar.h"
#include "grammar/vocabulary.h"

namespace ubatch {
class Tokenizer;
}

namespace ubatch::grammar {

enum class GrammarKind {
  Gbnf,        // text: GBNF (gbnf_parser.h)
  JsonSchema,  // text: a JSON Schema document (json_schema.h)
  JsonObject,  // any JSON object; text unused
};

struct GrammarCacheCounters {
  uint64_t hits = 0;
  uint64_t compiled = 0;
  double compile_ms = 0;  // total, including each new grammar's first-position token classes
};

class GrammarCache {
 public:
  // tokenizer must outlive the cache.
  explicit GrammarCache(const Tokenizer& tokenizer, size_t capacity = 64);

  // The compiled grammar, from the cache or compiled now. Errors: the text does not parse
  // (position or keyword in the message), the schema uses what is not supported, the
  // grammar is too large or left-recursive.
  Result<std::shared_ptr<const CompiledGrammar>> get(GrammarKind kind, std::string_view text);

  std::shared_ptr<const Vocabulary> vocabulary();
  void warm_up() { vocabulary(); }
  GrammarCacheCounters counters() const;

 private:
  const Tokenizer& tokenizer_;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::mutex vocab_mutex_;  // held while the vocabulary is built
  std::list<std::string> lru_;  // keys, most recent first
  struct Entry {
    std::shared_ptr<const CompiledGrammar> grammar;
    std::list<std::string>::iterator pos;
  };
  std::unordered_map<std::string, Entry> entries_;
  GrammarCacheCounters counters_;
};

// The GBNF text a grammar of `kind` compiles from (for JsonSchema, the converted schema).
Result<std::string> grammar_source(GrammarKind kind, std::string_view text);

}  // namespace ubatch::grammar
