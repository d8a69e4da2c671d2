// What the scheduler drives: a model runner that executes a batch and samples the rows
// that need it, plus the KV block pool it plans against. The scheduler knows nothing of
// architectures; ContextRunner runs the real model, sim::FakeRunner a cost model on a
// virtual clock (ubatch sim, scheduler tests).
#pragma once

#include <cstdint>
#include <functional>
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
//
// Speculative verification: a sequence whose batch rows are its last token followed by draft
// tokens has one RowSample per row, consecutive; `draft` is the token the batch fed at the
// sequence's next row (-1 on its last row). The rows are sampled in order, each with the
// sequence's sampler after accepting the tokens before it, exactly as plain decoding would
// sample them one step at a time; the first row whose sampled token differs from its draft
// ends the sequence's rows: the rows after it are not sampled (token stays -1), so no random
// draw is taken for them and the sampler's stream stays that of plain decoding.
struct RowSample {
  Sampler* sampler = nullptr;
  grammar::Matcher* grammar = nullptr;  // non-null: sample only what it allows, then advance it
  int32_t top_logprobs = -1;        // >= 0: fill logprob and `top`
  int32_t draft = -1;               // the draft token at the next row of this sequence, or -1
  int32_t forced = -1;              // >= 0: this token instead of a sampled one (accepted by the
                                    // sampler and grammar all the same; the grammar refusing it: token -1)
  int32_t token = -1;               // out; -1 when the grammar allows no token at all, or not sampled
  bool sampled = false;             // out: sampled (false: a draft before it was rejected)
  TokenLogprob logprob{-1, 0.0f};   // out
  std::vector<TokenLogprob> top;    // out
  double grammar_ms = 0;            // out: time on the grammar (mask, masking the logits, advance)
  bool grammar_complete = false;    // out: the grammar is complete after this row's token (with
                                    // drafts the matcher runs ahead of the tokens streamed so far)
};

// Calls sample(k, rows[k]) for the rows in order, skipping (token -1, sampled false) the rows
// of a sequence after its first rejected draft; marks the others sampled. sample must set
// rows[k].token and accept it into the sequence's sampler and grammar (if any).
void sample_rows(std::vector<RowSample>& rows, const std::function<void(size_t, RowSample&)>& sample);

class Runner {
 public:
  virtual ~Runner() = default;
  virtual KvCache& kv() = 0;
  virtual int32_t n_vocab() const = 0;
  // Decodes the batch; rows[k] belongs to the k-th batch row with logits set.
  virtual DecodeResult run(const Batch& batch, std::vector<RowSample>& rows) = 0;
  // Width of a final hidden state (0: this runner cannot return them, embedding requests are
  // refused), and the one of batch row i of the last run (which had Batch::embd[i] set):
  // [n_embd] floats, or nullptr.
  virtual int32_t n_embd() const { return 0; }
  virtual const float* embedding(int32_t /*batch_row*/) const { return nullptr; }
  virtual std::string token_to_piece(int32_t id) const = 0;
  virtual bool is_eog(int32_t id) const = 0;
  // Milliseconds on the runner's clock (steady clock, or virtual in simulation).
  virtual double now_ms() const = 0;
};

}  // namespace ubatch::sched
