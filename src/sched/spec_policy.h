// When speculation pays: per-token acceptance estimates and the per-step choice of draft
// lengths from the measured step-time model (step_time_model.h).
//
// A draft of d tokens whose tokens are each accepted with probability p (given the earlier
// ones were) yields E(d) = p + p² + … + p^d accepted tokens in expectation, besides the token
// the verification always samples. A step that samples `rows` rows from `tokens` tokens and
// adds drafts d_i produces rows + Σ E_i(d_i) tokens in model.ms(tokens + Σd_i, rows + Σd_i)
// (every draft token is a batch token with a logits row). The step's drafts maximize that
// rate — the goodput of SmartSpec (Liu et al. 2024, "Optimizing Speculative Decoding for
// Serving Large Language Models Using Goodput") — which is how speculation backs off: in a
// compute-bound step (many sequences, or prefill) a draft token costs a larger share of the
// step than its expected gain, and sequences whose drafts keep failing get low estimates.
#pragma once

#include <cstdint>
#include <vector>

#include "sched/step_time_model.h"

namespace ubatch::sched {

// Decayed counts of verified draft positions: accepted / verified, shrunk towards a prior.
struct AcceptanceCounts {
  double accepted = 0;
  double verified = 0;
  // A draft of n_draft tokens of which the first n_accepted matched: n_accepted successes and,
  // when n_accepted < n_draft, one failure (positions after the first mismatch were never
  // verified). Older counts are multiplied by `decay` first.
  void add(int32_t n_accepted, int32_t n_draft, double decay);
  // Multiplies the counts by decay: the estimate drifts back towards the prior (a sequence that
  // stopped drafting is tried again later).
  void relax(double decay);
  double estimate(double prior, double prior_weight) const {
    return (accepted + prior * prior_weight) / (verified + prior_weight);
  }
};

// One sequence's draft offer for a step.
struct DraftOption {
  int32_t max_len = 0;  // draft tokens available (after the caps: k, max_tokens, budget, KV)
  double p = 0;         // estimated per-token acceptance probability, in [0, 1)
};

struct DraftChoice {
  std::vector<int32_t> len;    // chosen length per option (0: none)
  double expected_tokens = 0;  // rows + Σ E_i(len_i)
  double step_ms = 0;          // predicted
  double rate() const { return step_ms > 0 ? expected_tokens / step_ms : 0; }
};

// Draft lengths maximizing expected tokens per predicted ms for a step of `tokens` tokens and
// `rows` logits rows without drafts, using at most `budget` draft tokens in all. Greedy over
// single draft tokens in order of marginal gain p_i^(d_i+1): with a step time linear in
// tokens and rows every draft token costs the same, so the rate rises while the marginal gain
// exceeds cost · rate and the first token that fails that test ends the choice (it is the
// optimum). `margin` >= 0 asks each token for that much more gain than break-even (a guard
// against optimistic estimates).
DraftChoice choose_drafts(const StepCost& cost, int64_t tokens, int64_t rows, const std::vector<DraftOption>& options,
                          int32_t budget, double margin = 0.0);

}  // namespace ubatch::sched
