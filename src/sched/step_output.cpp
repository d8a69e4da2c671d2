#include "sched/step_output.h"

#include <algorithm>

#include "common/status.h"
#include "sched/sequence.h"
#include "sched/spec_estimates.h"

namespace ubatch::sched {

void StepOutput::apply(const StepPlan& plan, const StepResult& result) {
  const DecodeResult& res = result.decode;
  if (res.status == DecodeStatus::NoKvSpace && st_.running.size() > 1) {
    // Planning reserves KV before running, so this means the plan under-counted; the cache
    // is unchanged (decode checks before placing). Preempt the lowest-ranked sequence (it
    // recomputes later, same output) and plan again, rather than fail requests. Each retry
    // frees one sequence's blocks, and any one sequence fits the cache (validate()).
    st_.preempt(*st_.pick_victim({}, nullptr), SchedState::PreemptCause::Memory);
    return;
  }
  if (!res.ok()) {
    // An invalid batch is a bug or an invalid request: fail the requests in this batch with
    // the message rather than hang or crash.
    for (const StepEntry& e : plan.entries)
      if (!e.seq->done) {
        e.seq->req->failed = true;
        st_.finish_seq(*e.seq, FinishReason::Error, res.message);
      }
    return;
  }
  pool_embeddings(plan);
  StepRecord rec;
  const Counts counts = advance_sequences(plan, result, rec);
  record_metrics(plan, result, counts);
  finish_embeddings(plan);
  stream_tokens(plan, result, rec);
  const KvCache& kv = st_.runner.kv();
  for (const StepEntry& e : plan.entries)
    if (!e.seq->done && e.seq->seq_id >= 0)
      UBATCH_CHECK_MSG(kv.seq_n_tokens(e.seq->seq_id) == e.seq->n_computed,
                       "scheduler: a sequence's KV does not hold exactly its computed tokens");
  st_.update_gauges();
  log_step(result, rec);
}

// Embedding sequences: pool their rows, in token order (each sequence's rows are in order).
void StepOutput::pool_embeddings(const StepPlan& plan) {
  for (const auto& [seq, row] : plan.pooled) {
    const float* h = st_.runner.embedding(row);
    UBATCH_CHECK_MSG(h != nullptr, "scheduler: the runner returned no hidden state for a pooled row");
    if (seq->pooling() == Pooling::Mean) {
      for (size_t j = 0; j < seq->pool_sum.size(); ++j) seq->pool_sum[j] += static_cast<double>(h[j]);
    } else {
      for (size_t j = 0; j < seq->pool_sum.size(); ++j) seq->pool_sum[j] = static_cast<double>(h[j]);
    }
  }
}

// Each entry's tokens are computed now; drafts are verified, the rejected ones' KV rolled back.
StepOutput::Counts StepOutput::advance_sequences(const StepPlan& plan, const StepResult& result, StepRecord& rec) {
  Counts c;
  KvCache& kv = st_.runner.kv();
  for (const StepEntry& e : plan.entries) {
    Seq& s = *e.seq;
    // Tokens up to the prompt's end are prompt processing; later ones generation.
    const int32_t from = s.n_computed, to = s.n_computed + e.n_tokens;
    if (from < s.n_prompt) c.prompt_tokens += static_cast<uint64_t>(std::min(to, s.n_prompt) - from);
    // A decode is one generated token's step (with the draft tokens it verifies); anything
    // else (prompt chunks, recomputing a preempted sample's tokens) is prefill.
    const auto n_step_draft = static_cast<int32_t>(e.draft.size());
    (e.n_tokens == 1 && from >= s.n_prompt ? rec.n_decode : rec.n_prefill) += e.n_tokens + n_step_draft;
    rec.n_draft += n_step_draft;
    s.n_computed = to;
    if (e.first_row != StepEntry::kNoRow) ++c.sampling_seqs;
    if (e.draft.empty()) continue;
    // Verified: the drafts up to the first mismatch. Their KV stays; the rest is rolled back.
    const auto n_draft = static_cast<int32_t>(e.draft.size());
    int32_t accepted = 0;
    while (accepted < n_draft && result.rows[e.first_row + static_cast<size_t>(accepted)].token == e.draft[accepted])
      ++accepted;
    if (accepted < n_draft) {
      const int32_t freed = kv.seq_rollback(s.seq_id, to + accepted);
      UBATCH_CHECK_MSG(freed >= 0, "scheduler: no checkpoint to roll a recurrent state back to");  // marked when planned
    }
    s.n_computed = to + accepted;
    s.acceptance.add(accepted, n_draft, kSeqDecay);
    st_.accept_by_match[static_cast<size_t>(std::min(e.n_match, st_.cfg.spec_ngram))].add(accepted, n_draft, kGlobalDecay);
    c.draft_tokens += static_cast<uint64_t>(n_draft);
    c.accepted += static_cast<uint64_t>(accepted);
    ++c.spec_seqs;
  }
  return c;
}

// The step's time into the estimates (admission, speculation), and its counts into the metrics.
void StepOutput::record_metrics(const StepPlan& plan, const StepResult& result, const Counts& c) {
  const double run_ms = result.run_ms();
  const int32_t n_tokens = plan.n_tokens();
  st_.step_ms = st_.step_ms > 0 ? 0.9 * st_.step_ms + 0.1 * run_ms : run_ms;
  st_.step_model.observe(n_tokens, static_cast<int64_t>(result.rows.size()), run_ms);
  double grammar_ms = 0;
  uint64_t grammar_rows = 0;
  for (const RowSample& row : result.rows)
    if (row.grammar) grammar_ms += row.grammar_ms, ++grammar_rows;
  std::lock_guard<std::mutex> lock(st_.metrics_mutex);
  MetricsSnapshot& m = st_.metrics;
  ++m.steps;
  m.step_tokens += static_cast<uint64_t>(n_tokens);
  m.step_budget += static_cast<uint64_t>(st_.cfg.n_batch);
  m.prompt_tokens += c.prompt_tokens;
  m.busy_ms += run_ms;
  m.sample_seq_steps += c.sampling_seqs;
  m.spec_steps += c.spec_seqs > 0 ? 1 : 0;
  m.spec_seq_steps += c.spec_seqs;
  m.draft_tokens += c.draft_tokens;
  m.draft_accepted += c.accepted;
  m.step_cost = st_.step_model.cost();
  if (grammar_rows > 0) {
    m.grammar_ms += grammar_ms;
    m.grammar_rows += grammar_rows;
  }
}

// Embedding sequences whose prompt is computed are done: their vector goes out with Done.
void StepOutput::finish_embeddings(const StepPlan& plan) {
  for (const StepEntry& e : plan.entries) {
    Seq& s = *e.seq;
    if (s.pooling() == Pooling::None || s.done || s.remaining() > 0) continue;
    const double scale = s.pooling() == Pooling::Mean ? 1.0 / static_cast<double>(s.tokens.size()) : 1.0;
    s.req->embedding.resize(s.pool_sum.size());
    for (size_t j = 0; j < s.pool_sum.size(); ++j) s.req->embedding[j] = static_cast<float>(s.pool_sum[j] * scale);
    st_.finish_seq(s, FinishReason::Stop);
  }
}

// Streams the sampled tokens in order; a sequence that finishes drops the rest of its rows.
void StepOutput::stream_tokens(const StepPlan& plan, const StepResult& result, StepRecord& rec) {
  const std::vector<RowSample>& rows = result.rows;
  const double t1 = result.end_ms;
  for (const StepEntry& e : plan.entries) {
    if (e.first_row == StepEntry::kNoRow) continue;
    Seq& s = *e.seq;
    size_t end = e.first_row;
    while (end < rows.size() && plan.row_seq[end] == &s && rows[end].sampled) ++end;
    const double burst = static_cast<double>(end - e.first_row);
    const double itl_ms = s.last_token_ms >= 0 ? (t1 - s.last_token_ms) / burst : -1.0;
    const int32_t generated = s.n_generated;
    for (size_t r = e.first_row; r < end && !s.done; ++r) on_token(s, rows[r], t1, itl_ms);
    rec.n_sampled += s.n_generated - generated;
  }
}

void StepOutput::log_step(const StepResult& result, StepRecord& rec) {
  rec.index = st_.step_log.n_steps() + 1;
  rec.end_ms = result.end_ms;
  rec.decode_ms = static_cast<float>(result.run_ms());
  rec.n_budget = st_.cfg.n_batch;
  rec.n_running = static_cast<int32_t>(st_.running.size());
  rec.n_waiting = static_cast<int32_t>(st_.waiting.size());
  st_.step_log.push(rec);
}

// itl_ms: the time per token to record in the TPOT histogram (the gap since the sequence's
// previous step, shared by the tokens this step gave it); < 0: none.
void StepOutput::on_token(Seq& s, const RowSample& row, double now, double itl_ms) {
  Req& r = *s.req;
  const int32_t id = row.token;
  if (id < 0) {  // the grammar allows no token of this vocabulary here
    st_.finish_seq(s, FinishReason::Error, "grammar: no token of the vocabulary can continue the output here");
    return;
  }
  s.tokens.push_back(id);
  if (s.drafter) s.drafter->append(id);
  ++s.n_generated;
  ++r.usage.completion_tokens;
  {
    std::lock_guard<std::mutex> lock(st_.metrics_mutex);
    ++st_.metrics.generated_tokens;
    if (r.first_token_ms < 0) {
      st_.metrics.ttft.observe(now - r.arrival_ms);
      st_.ttft_window.observe(now, now - r.arrival_ms);
    } else if (itl_ms >= 0) {
      st_.metrics.tpot.observe(itl_ms);
      st_.itl_window.observe(now, itl_ms);
    }
  }
  if (r.first_token_ms < 0) r.first_token_ms = now;
  r.last_token_ms = now;
  s.last_token_ms = now;

  if (st_.runner.is_eog(id) && !r.request.ignore_eos) {
    st_.finish_seq(s, FinishReason::Stop);
    return;
  }
  bool stopped = false;
  std::string text = s.stop.push(s.utf8.push(st_.runner.token_to_piece(id)), &stopped);
  st_.emit_text(s, text, &row);
  if (stopped) {
    st_.finish_seq(s, FinishReason::Stop);
    return;
  }
  if (r.request.stop_when) {
    s.text += text;
    if (!text.empty() && r.request.stop_when(s.text)) {
      st_.finish_seq(s, FinishReason::Stop);
      return;
    }
  }
  if (row.grammar && row.grammar_complete) {  // a complete sentence that nothing may extend (after this token)
    st_.finish_seq(s, FinishReason::Stop);
    return;
  }
  if (s.in_reasoning) advance_reasoning(s, id);
  if (s.n_generated >= r.request.max_tokens) st_.finish_seq(s, FinishReason::Length);
}

// The thinking budget's bookkeeping after token `id` (Request::reasoning_budget).
void StepOutput::advance_reasoning(Seq& s, int32_t id) {
  const Request& q = s.req->request;
  if (s.forcing >= 0) {  // a forced closing token
    if (++s.forcing >= static_cast<int32_t>(q.reasoning_close_tokens.size())) {
      s.forcing = -1;
      s.in_reasoning = false;
    }
    return;
  }
  if (id == q.reasoning_close_token) {
    s.in_reasoning = false;  // the model closed the block itself (a control token)
    return;
  }
  ++s.reasoning_tokens;
  s.reasoning_tail += st_.runner.token_to_piece(id);
  if (!q.reasoning_close.empty() && s.reasoning_tail.find(q.reasoning_close) != std::string::npos) {
    s.in_reasoning = false;  // the model closed the block itself
    return;
  }
  if (s.reasoning_tail.size() > q.reasoning_close.size())
    s.reasoning_tail.erase(0, s.reasoning_tail.size() - q.reasoning_close.size());
  if (s.reasoning_tokens >= q.reasoning_budget) s.forcing = 0;
}


}  // namespace ubatch::sched
