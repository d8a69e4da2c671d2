#include "grammar/grammar_cache.h"

#include <chrono>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::grammar {

Result<std::string> grammar_source(GrammarKind kind, std::string_view text) {
  switch (kind) {
    case GrammarKind::Gbnf: return std::string(text);
    case GrammarKind::JsonObject: return json_object_gbnf();
    case GrammarKind::JsonSchema: {
      nlohmann::ordered_json schema;
      try {
        schema = nlohmann::ordered_json::parse(text);
      } catch (const nlohmann::json::exception& e) {
        return Status::error(std::string("json_schema: invalid JSON: ") + e.what());
      }
      return json_schema_to_gbnf(schema);
    }
  }
  return Status::error("grammar: unknown kind");
}

GrammarCache::GrammarCache(const Tokenizer& tokenizer, size_t capacity)
    : tokenizer_(tokenizer), capacity_(capacity < 1 ? 1 : capacity) {}

std::shared_ptr<const Vocabulary> GrammarCache::vocabulary() {
  std::lock_guard<std::mutex> lock(vocab_mutex_);
  if (!vocab_) vocab_ = Vocabulary::from_tokenizer(tokenizer_);
  return vocab_;
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCache::get(GrammarKind kind, std::string_view text) {
  std::string key(1, static_cast<char>('0' + static_cast<int>(kind)));
  if (kind != GrammarKind::JsonObject) key.append(text);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      ++counters_.hits;
      return it->second.grammar;
    }
  }
  std::shared_ptr<const Vocabulary> vocab = vocabulary();
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::string> source = grammar_source(kind, text);
  if (!source) return source.status();
  Result<std::shared_ptr<const CompiledGrammar>> compiled = CompiledGrammar::from_gbnf(source.value(), vocab);
  if (!compiled) return compiled.status();
  compiled.value()->warm_up();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(mutex_);
  ++counters_.compiled;
  counters_.compile_ms += ms;
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second.grammar;  // another thread compiled it meanwhile
  lru_.push_front(key);
  entries_.emplace(key, Entry{compiled.value(), lru_.begin()});
  while (entries_.size() > capacity_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
  return compiled.value();
}

GrammarCacheCounters GrammarCache::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

}  // namespace ubatch::grammar
