// The grammar state of one sequence: which parse positions the text generated so far allows,
// the mask of tokens that may come next, and the advance by each generated token.
//
// A position is a closed set of stacks (stack_set.h) plus whether the grammar may end there.
// mask() = for each stack, the accepted tokens of its top state (token_classes.h), plus the
// uncertain ones that the whole stack accepts (checked by running their bytes, sharing the
// work of common prefixes), plus the end-of-generation tokens when the grammar may end.
// Masks are cached in the CompiledGrammar by position, so sequences that reach the same
// position — the common case for a JSON schema — share one computation.
//
// A token is accepted when its bytes keep at least one parse alive; an end-of-generation
// token only where the grammar may end, after which the matcher is complete. Batch
// invariance: the mask depends only on this sequence's tokens.
//
// Copyable (n > 1 samples and speculative drafts copy it); one thread at a time per object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "grammar/compiled_grammar.h"
#include "grammar/stack_set.h"

namespace ubatch::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);
  Matcher(const Matcher& other);
  Matcher& operator=(const Matcher& other);

  // Advances by one token. False (and nothing changes) when the grammar does not allow it.
  bool accept(int32_t token);
  // Advances by raw bytes (tests, tools). False (nothing changes) when they leave no parse.
  bool accept_bytes(std::string_view bytes);

  // The tokens allowed next (never null).
  std::shared_ptr<const TokenMask> mask();

  // The text so far is a complete sentence of the grammar.
  bool can_end() const { return state_.end || ended_; }
  // Nothing may follow: complete, and no byte can extend it (or an end-of-generation token
  // was accepted).
  bool is_complete() const { return ended_ || (state_.end && state_.empty()); }
  // Some parse is still alive (false only after an internal limit was hit).
  bool alive() const { return ended_ || state_.end || !state_.empty(); }

  // Back to the start (an empty text).
  void reset();

  const CompiledGrammar& grammar() const { return *grammar_; }
  const StackSet& position() const { return state_; }

 private:
  bool advance(std::string_view bytes, StackSet& out);
  void check_uncertain(size_t stack_index, const TokenClass& tc, uint64_t* bits);
  void rekey();

  std::shared_ptr<const CompiledGrammar> grammar_;
  Expander expander_;
  StackSet state_;
  std::string key_;  // state_'s cache key
  bool ended_ = false;
};

}  // namespace ubatch::grammar
