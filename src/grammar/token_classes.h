// Which tokens an automaton state allows as the top of a parse stack, found by one walk of
// the vocabulary's token trie (the idea behind XGrammar's adaptive token mask cache, Dong et
// al. 2024, "XGrammar: Flexible and Efficient Structured Generation Engine for LLMs").
//
// From state q as the bottom frame of a local stack, a token is:
//   accepted   some parse consumes all its bytes without leaving q's rule (calls and returns
//              inside it are fine), or leaves it exactly at the token's end: allowed whatever
//              frames lie below q;
//   uncertain  not accepted, but q's rule can end after a proper prefix of the token and the
//              next byte is one that can follow the rule somewhere (its FOLLOW set), so the
//              rest may be matched by a caller: decided per stack at mask time (matcher.h);
//   rejected   otherwise: never allowed.
// The walk visits the trie in preorder with the parse position after each prefix; a dead
// prefix skips its whole subtree, so the cost is the number of trie nodes that stay alive.
// (The start rule ending at the bottom of a stack ends the text: nothing follows it there.)
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/stack_set.h"
#include "grammar/vocabulary.h"

namespace ubatch::grammar {

struct TokenClass {
  enum class Form : uint8_t {
    List,        // ids: the accepted tokens
    Complement,  // ids: the text tokens that are not accepted (rejected or uncertain)
    Bits,        // bits: the accepted tokens
  };
  Form form = Form::List;
  std::vector<int32_t> ids;
  std::vector<uint64_t> bits;       // [n_words] when Form::Bits
  std::vector<int32_t> uncertain;   // in trie order (sorted by piece), for prefix sharing
  int32_t n_accepted = 0;

  // mask [n_words] |= the accepted tokens.
  void add_accepted(const Vocabulary& vocab, uint64_t* mask) const;
  size_t memory_bytes() const;
};

// Walks the trie from state `state`. The expander must be over the same automaton.
TokenClass classify_state(const Vocabulary& vocab, Expander& expander, uint32_t state);

}  // namespace ubatch::grammar
