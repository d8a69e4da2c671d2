#include "grammar/compiled_grammar.h"

#include "grammar/gbnf_parser.h"
#include "grammar/matcher.h"

namespace ubatch::grammar {

CompiledGrammar::CompiledGrammar(Automaton a, std::shared_ptr<const Vocabulary> v)
    : automaton_(std::move(a)), vocab_(std::move(v)), expander_(automaton_), classes_(automaton_.n_states()) {}

Result<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::compile(const Grammar& grammar,
                                                                        std::shared_ptr<const Vocabulary> vocab,
                                                                        const AutomatonLimits& limits) {
  Result<Automaton> a = build_automaton(grammar, limits);
  if (!a) return a.status();
  return std::shared_ptr<const CompiledGrammar>(new CompiledGrammar(std::move(a.value()), std::move(vocab)));
}

Result<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::from_gbnf(std::string_view text,
                                                                          std::shared_ptr<const Vocabulary> vocab) {
  Result<Grammar> g = parse_gbnf(text);
  if (!g) return g.status();
  return compile(g.value(), std::move(vocab));
}

std::shared_ptr<const TokenClass> CompiledGrammar::token_class(uint32_t state) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::shared_ptr<const TokenClass>& slot = classes_[state];
  if (slot) return slot;
  auto tc = std::make_shared<const TokenClass>(classify_state(*vocab_, expander_, state));
  ++stats_.classes_computed;
  const size_t bytes = tc->memory_bytes();
  if (class_bytes_ + bytes > kMaxClassBytes) {
    for (auto& c : classes_) c.reset();
    class_bytes_ = 0;
  }
  class_bytes_ += bytes;
  classes_[state] = tc;
  return tc;
}

void CompiledGrammar::warm_up() const {
  Matcher m(shared_from_this());
  m.mask();
}

std::shared_ptr<const TokenMask> CompiledGrammar::find_mask(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = masks_.find(key);
  if (it == masks_.end()) return nullptr;
  ++stats_.mask_hits;
  return it->second;
}

void CompiledGrammar::store_mask(const std::string& key, std::shared_ptr<const TokenMask> mask) const {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.masks_computed;
  const size_t bytes = key.size() + mask->bits.size() * sizeof(uint64_t) + 64;
  if (mask_bytes_ + bytes > kMaxMaskBytes) {
    masks_.clear();
    mask_bytes_ = 0;
  }
  if (masks_.emplace(key, std::move(mask)).second) mask_bytes_ += bytes;
}

GrammarCacheStats CompiledGrammar::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace ubatch::grammar
