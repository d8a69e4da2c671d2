// A grammar compiled against one vocabulary: its automaton, and the caches that make token
// masks cheap — per automaton state, the token classes (token_classes.h, computed the first
// time the state is the top of a stack), and per parse position, the finished masks
// (matcher.h). Matchers of any number of sequences share one CompiledGrammar.
//
// Thread-safe: the caches are guarded by a mutex, held while a missing entry is computed
// (one trie walk, or one mask). Memory is bounded: past the limits below, a cache is
// emptied and refills from use.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/token_classes.h"
#include "grammar/vocabulary.h"

namespace ubatch::grammar {

// Which tokens may come next: a bitset over the vocabulary.
struct TokenMask {
  std::vector<uint64_t> bits;  // [n_words]: bit id % 64 of word id / 64 set when token id is allowed
  int32_t n_allowed = 0;
  bool allows(int32_t id) const { return (bits[static_cast<size_t>(id) / 64] >> (id % 64)) & 1; }
};

struct GrammarCacheStats {
  uint64_t classes_computed = 0;  // trie walks
  uint64_t masks_computed = 0;    // mask cache misses
  uint64_t mask_hits = 0;
};

class CompiledGrammar : public std::enable_shared_from_this<CompiledGrammar> {
 public:
  static constexpr size_t kMaxClassBytes = size_t{256} << 20;  // token classes kept, all states
  static constexpr size_t kMaxMaskBytes = size_t{64} << 20;    // masks kept

  // Builds the automaton (automaton.h errors).
  static Result<std::shared_ptr<const CompiledGrammar>> compile(const Grammar& grammar,
                                                                std::shared_ptr<const Vocabulary> vocab,
                                                                const AutomatonLimits& limits = {});
  // parse_gbnf + compile.
  static Result<std::shared_ptr<const CompiledGrammar>> from_gbnf(std::string_view text,
                                                                  std::shared_ptr<const Vocabulary> vocab);

  const Automaton& automaton() const { return automaton_; }
  const Vocabulary& vocabulary() const { return *vocab_; }
  const std::shared_ptr<const Vocabulary>& vocabulary_ptr() const { return vocab_; }

  // The token classes of automaton state `state` (computed on first use).
  std::shared_ptr<const TokenClass> token_class(uint32_t state) const;
  // Computes the token classes of the start position's states now (so the first mask of a
  // request costs no trie walk).
  void warm_up() const;

  // Mask cache, keyed by a parse position's encoding (StackSet::append_key).
  std::shared_ptr<const TokenMask> find_mask(const std::string& key) const;
  void store_mask(const std::string& key, std::shared_ptr<const TokenMask> mask) const;

  GrammarCacheStats stats() const;

 private:
  CompiledGrammar(Automaton a, std::shared_ptr<const Vocabulary> v);
  Automaton automaton_;
  std::shared_ptr<const Vocabulary> vocab_;
  mutable std::mutex mutex_;
  mutable Expander expander_;  // for trie walks, under mutex_
  mutable std::vector<std::shared_ptr<const TokenClass>> classes_;  // [n_states], null until computed
  mutable size_t class_bytes_ = 0;
  mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> masks_;
  mutable size_t mask_bytes_ = 0;
  mutable GrammarCacheStats stats_;
};

}  // namespace ubatch::grammar
