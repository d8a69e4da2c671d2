// Runner over the real model: Context::decode, then sampling of the rows with logits.
#pragma once

#include "context/context.h"
#include "sched/runner.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::sched {

class ContextRunner final : public Runner {
 public:
  ContextRunner(Context& ctx, const Tokenizer& tokenizer) : ctx_(ctx), tok_(tokenizer) {}
  KvCache& kv() override { return ctx_.kv(); }
  int32_t n_vocab() const override { return ctx_.n_vocab(); }
  DecodeResult run(const Batch& batch, std::vector<RowSample>& rows) override;
  int32_t n_embd() const override { return ctx_.n_embd(); }
  const float* embedding(int32_t batch_row) const override { return ctx_.embedding(batch_row); }
  std::string token_to_piece(int32_t id) const override { return tok_.token_to_piece(id); }
  bool is_eog(int32_t id) const override { return tok_.is_eog(id); }
  double now_ms() const override;

 private:
  Context& ctx_;
  const Tokenizer& tok_;
};

}  // namespace ubatch::sched
