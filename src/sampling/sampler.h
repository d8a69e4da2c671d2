// Token sampling from logits: logit bias, penalties, temperature, top-k, top-p (nucleus,
// Holtzman et al. 2019), min-p (Nguyen et al. 2024), greedy, with a seeded RNG.
//
// Order of application (as the field's common servers do): logit bias → repetition penalty
// (CTRL, Keskar et al. 2019: positive logits divided, negative multiplied, over the last
// repeat_last_n tokens) and presence/frequency penalties (OpenAI API semantics) → if
// temperature <= 0: greedy argmax (ties to the lowest id) → top-k → softmax with temperature
// → top-p → min-p → draw. A Sampler belongs to one sequence and one thread.
// An allowed-token mask (a grammar's, src/grammar/matcher.h) applies before everything else:
// masked tokens count as -inf logits.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <utility>
#include <vector>

namespace ubatch {

struct SamplingParams {
  float temperature = 0.8f;     // <= 0: greedy
  int32_t top_k = 40;           // <= 0: whole vocabulary
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off; keeps p >= min_p · p_max
  float repeat_penalty = 1.0f;  // 1: off
  int32_t repeat_last_n = 64;   // tokens the repetition penalty looks back over
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0xFFFFFFFFu;  // same seed, same logits → same tokens
  // (token id, added to its logit). Sorted by id with each id once (as the server gives it),
  // each step costs time linear in its size; otherwise it is sorted at every step.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

struct TokenLogprob {
  int32_t id;
  float logprob;  // natural log of the probability after temperature (before top-k/p)
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, int32_t n_vocab);

  // Chooses the next token from logits [n_vocab]. Does not record it (see accept).
  // allowed: null, or a bitset [(n_vocab + 63) / 64] words (bit id % 64 of word id / 64) of
  // the tokens that may be chosen; it must allow at least one token, and the token chosen is
  // always one it allows.
  int32_t sample(const float* logits, const uint64_t* allowed = nullptr);

  // The logits [n_vocab] with the tokens `allowed` does not allow at -inf: a copy owned by
  // the sampler, valid until the next call. sample(mask_logits(l, a), a) does not copy again
  // (callers time the masking on its own this way).
  const float* mask_logits(const float* logits, const uint64_t* allowed);

  // Records a token of the sequence (prompt or generated) for the penalties.
  void accept(int32_t token);

  // Log-probabilities of `chosen` and of the n_top most likely tokens for the last logits
  // passed to sample() (from the full distribution at the sampling temperature, or 1 when
  // greedy).
  TokenLogprob logprob_of(const float* logits, int32_t chosen) const;
  std::vector<TokenLogprob> top_logprobs(const float* logits, int n_top) const;

  const SamplingParams& params() const { return params_; }

 private:
  int32_t sample_logits(const float* logits);

  SamplingParams params_;
  int32_t n_vocab_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;          // last repeat_last_n accepted tokens
  std::vector<int32_t> counts_;         // occurrences of each accepted token (the engine accepts prompt and generated tokens)
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
  std::vector<float> masked_;           // [n_vocab] scratch: logits with disallowed tokens at -inf
};

}  // namespace ubatch
