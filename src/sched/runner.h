// What the scheduler drives: a model runner that executes a batch and samples the rows
// that need it, plus the KV block pool it plans against. The scheduler knows nothing of
// architectures; ContextRunner runs the real model, sim::FakeRunner a cost model on a
// virtual clock (ubatch sim, scheduler tests).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "context/batch.h"
#include "context/context.h"
#include "kv/kv_cache.h"
#include "sampling/sampler.h"

namespace ubatch::grammar {
class Matcher;
}

namespace ubatch::sched {

// One batch row with logits to sample: filled in by the runner.
struct RowSample {
  Sampler* sampler = nullptr;
  grammar::Matcher* grammar = nullptr;  // non-null: sample only what it allows, then advance it
  int32_t top_logprobs = -1;        // >= 0: fill logprob and `top`
  int32_t token = -1;               // out; -1 when the grammar allows no token at all
  TokenLogprob logprob{-1, 0.0f};   // out
  std::vector<TokenLogprob> top;    // out
  double grammar_ms = 0;            // out: time on the grammar (mask, masking the logits, advance)
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual KvCache& kv() = 0;
  virtual int32_t n_vocab() const = 0;
  // Decodes the batch; rows[k] belongs to the k-th batch row with logits set.
  virtual DecodeResult run(const Batch& batch, std::vector<RowSample>& rows) = 0;
  virtual std::string token_to_piece(int32_t id) const = 0;
  virtual bool is_eog(int32_t id) const = 0;
  // Milliseconds on the runner's clock (steady clock, or virtual in simulation).
  virtual double now_ms() const = 0;
};

}  // namespace ubatch::sched
