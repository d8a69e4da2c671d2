#include "sched/context_runner.h"

#include <chrono>

namespace ubatch::sched {

DecodeResult ContextRunner::run(const Batch& batch, std::vector<RowSample>& rows) {
  DecodeResult r = ctx_.decode(batch);
  if (!r.ok()) return r;
  size_t k = 0;
  for (int32_t i = 0; i < batch.n_tokens(); ++i) {
    if (!batch.logits[i]) continue;
    UBATCH_CHECK(k < rows.size());
    RowSample& row = rows[k++];
    const float* logits = ctx_.logits(i);
    row.token = row.sampler->sample(logits);
    if (row.top_logprobs >= 0) {
      row.logprob = row.sampler->logprob_of(logits, row.token);
      row.top = row.sampler->top_logprobs(logits, row.top_logprobs);
    }
    row.sampler->accept(row.token);
  }
  return r;
}

double ContextRunner::now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace ubatch::sched
