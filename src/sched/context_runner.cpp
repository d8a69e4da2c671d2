#include "sched/context_runner.h"

#include <chrono>

#include "grammar/matcher.h"

namespace ubatch::sched {

DecodeResult ContextRunner::run(const Batch& batch, std::vector<RowSample>& rows) {
  DecodeResult r = ctx_.decode(batch);
  if (!r.ok()) return r;
  std::vector<int32_t> batch_row;  // batch row of each RowSample
  for (int32_t i = 0; i < batch.n_tokens(); ++i)
    if (batch.logits[i]) batch_row.push_back(i);
  UBATCH_CHECK(batch_row.size() == rows.size());
  sample_rows(rows, [&](size_t k, RowSample& row) {
    const float* logits = ctx_.logits(batch_row[k]);
    if (row.forced >= 0) {  // a thinking budget closing the block
      if (row.grammar) {
        if (!row.grammar->accept(row.forced)) {
          row.token = -1;
          return;
        }
        row.grammar_complete = row.grammar->is_complete();
      }
      row.token = row.forced;
    } else if (row.grammar) {
      // Constrained: the grammar's mask (cached by position), applied to a copy of the logits.
      const auto t0 = std::chrono::steady_clock::now();
      const std::shared_ptr<const grammar::TokenMask> mask = row.grammar->mask();
      const float* masked = mask->n_allowed > 0 ? row.sampler->mask_logits(logits, mask->bits.data()) : nullptr;
      const auto t1 = std::chrono::steady_clock::now();
      row.grammar_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
      if (!masked) {
        row.token = -1;
        return;
      }
      row.token = row.sampler->sample(masked, mask->bits.data());
      const auto t2 = std::chrono::steady_clock::now();
      UBATCH_CHECK_MSG(row.grammar->accept(row.token), "context runner: the grammar rejected a token its mask allowed");
      row.grammar_complete = row.grammar->is_complete();
      row.grammar_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t2).count();
    } else {
      row.token = row.sampler->sample(logits);
    }
    // Log-probabilities are the model's own (raw logits), as without a grammar.
    if (row.top_logprobs >= 0) {
      row.logprob = row.sampler->logprob_of(logits, row.token);
      row.top = row.sampler->top_logprobs(logits, row.top_logprobs);
    }
    row.sampler->accept(row.token);
  });
  return r;
}

double ContextRunner::now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace ubatch::sched
