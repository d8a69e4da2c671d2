#include "sched/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fmt/format.h>

#include "sched/admission.h"
#include "sched/sequence.h"

namespace ubatch::sched {


Scheduler::Scheduler(Runner& runner, const EngineConfig& config)
    : state_(runner, config), planner_(state_), output_(state_) {}

Scheduler::~Scheduler() = default;

std::optional<SubmitError> Scheduler::validate(const Request& r) const {
  auto invalid = [](std::string m) { return SubmitError{SubmitError::Code::Invalid, std::move(m)}; };
  if (r.prompt.empty()) return invalid("the prompt is empty");
  const int32_t n_vocab = state_.runner.n_vocab();
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= n_vocab)
      return invalid(fmt::format("prompt token {} at index {} is outside the vocabulary [0, {})", r.prompt[i], i, n_vocab));
  if (r.pooling != Pooling::None) return validate_embedding(r);
  if (r.max_tokens < 1) return invalid(fmt::format("max_tokens must be >= 1, got {}", r.max_tokens));
  if (r.max_tokens > state_.cfg.max_tokens_cap)
    return invalid(fmt::format("max_tokens {} is above the limit {}", r.max_tokens, state_.cfg.max_tokens_cap));
  if (r.n < 1) return invalid(fmt::format("n must be >= 1, got {}", r.n));
  for (const auto& [id, bias] : r.sampling.logit_bias)
    if (id < 0 || id >= n_vocab) return invalid(fmt::format("logit_bias token {} is outside the vocabulary [0, {})", id, n_vocab));
  if (r.grammar && r.grammar->vocabulary().n_vocab() != n_vocab)
    return invalid(fmt::format("the grammar was compiled for a vocabulary of {} tokens, the model has {}",
                               r.grammar->vocabulary().n_vocab(), n_vocab));
  const KvCache& kv = state_.runner.kv();
  const int64_t n_prompt = static_cast<int64_t>(r.prompt.size());
  if (n_prompt > kv.n_cells())
    return SubmitError{SubmitError::Code::TooLong,
                       fmt::format("the prompt has {} tokens but the context holds {}", n_prompt, kv.n_cells())};
  if (state_.cfg.n_ctx_seq > 0 && n_prompt + r.max_tokens > state_.cfg.n_ctx_seq)
    return SubmitError{SubmitError::Code::TooLong,
                       fmt::format("prompt ({} tokens) + max_tokens ({}) = {} tokens is above the {} tokens one sequence "
                                   "may hold",
                                   n_prompt, r.max_tokens, n_prompt + r.max_tokens, state_.cfg.n_ctx_seq)};
  // One sequence must be able to hold its prompt and every token it may generate.
  const int64_t need_tokens = n_prompt + r.max_tokens;
  const int64_t need_blocks = (need_tokens + kv.block_size() - 1) / kv.block_size();
  if (need_blocks > kv.n_blocks())
    return SubmitError{SubmitError::Code::TooLong,
                       fmt::format("prompt ({} tokens) + max_tokens ({}) = {} tokens can never fit the KV cache of {} tokens",
                                   n_prompt, r.max_tokens, need_tokens, kv.n_cells())};
  return std::nullopt;
}

std::optional<SubmitError> Scheduler::submit(uint64_t id, Request request, std::shared_ptr<Stream> stream) {
  std::unique_ptr<Req> r = SchedState::new_request(id, std::move(request), std::move(stream), state_.runner.now_ms());
  if (std::optional<SubmitError> refused = check_deadline(*r, r->arrival_ms)) {
    note_rejected(refused->code);
    Event done;
    done.kind = Event::Kind::Done;
    done.usage = r->usage;
    done.rejection = refused;
    r->stream->push(std::move(done));
    return refused;
  }
  state_.add_request(std::move(r));
  return std::nullopt;
}

// An embedding request: one prefill-only sequence that must fit one sequence's context.
std::optional<SubmitError> Scheduler::validate_embedding(const Request& r) const {
  if (state_.runner.n_embd() <= 0) return SubmitError{SubmitError::Code::Invalid, "this engine cannot compute embeddings"};
  if (r.n != 1) return SubmitError{SubmitError::Code::Invalid, fmt::format("an embedding request has n = 1, got {}", r.n)};
  const KvCache& kv = state_.runner.kv();
  const int64_t n_prompt = static_cast<int64_t>(r.prompt.size());
  const int64_t limit = state_.cfg.n_ctx_seq > 0 ? std::min<int64_t>(state_.cfg.n_ctx_seq, kv.n_cells()) : kv.n_cells();
  const int64_t need_blocks = (n_prompt + kv.block_size() - 1) / kv.block_size();
  if (n_prompt > limit || need_blocks > kv.n_blocks())
    return SubmitError{SubmitError::Code::TooLong,
                       fmt::format("the input has {} tokens, above the {} tokens one sequence may hold", n_prompt, limit)};
  return std::nullopt;
}

// Refuses a strict deadline the admission estimate says cannot be met (admission.h).
std::optional<SubmitError> Scheduler::check_deadline(const Req& r, double now) const {
  if (!r.strict_deadline || state_.step_ms <= 0) return std::nullopt;
  AdmissionInputs in;
  in.step_ms = state_.step_ms;
  in.n_batch = state_.cfg.n_batch;
  in.n_prompt = static_cast<int32_t>(r.request.prompt.size());
  in.free_slots = std::max(0, state_.cfg.n_parallel - static_cast<int32_t>(state_.running.size()));
  in.group_running = state_.cfg.policy != Policy::UBatch && planner_.group_active();
  const RankKey mine{static_cast<double>(r.request.priority), r.deadline_abs_ms, r.arrival_ms, 0};
  for (const Seq* s : state_.waiting)
    if (ranks_above(RankKey{state_.effective_priority(*s, now), s->req->deadline_abs_ms, s->req->arrival_ms, s->index}, mine))
      ++in.ahead;
  for (const Seq* s : state_.running) {
    const Request& q = s->req->request;
    // Only a sequence that ignores end-of-generation and has no stop strings is sure to run
    // to max_tokens; any other may end at its next token.
    const bool runs_to_length = q.ignore_eos && q.stop.empty();
    int64_t steps = runs_to_length ? std::max(1, q.max_tokens - s->n_generated) : 1;
    if (state_.cfg.policy == Policy::UBatch && state_.cfg.preempt_margin > 0 && s->req->id != r.id &&
        r.request.priority >= s->rank + state_.cfg.preempt_margin) {
      // It may preempt this one once the minimum run time is over.
      const double wait_ms = std::max(0.0, state_.cfg.preempt_min_run_ms - (now - s->admitted_ms));
      steps = std::min(steps, static_cast<int64_t>(std::ceil(wait_ms / state_.step_ms)));
    }
    in.steps_to_free.push_back(steps);
  }
  const double eta_ms = first_token_estimate_ms(in);
  const double deadline = static_cast<double>(r.request.deadline_ms);
  if (eta_ms <= deadline) return std::nullopt;
  return SubmitError{SubmitError::Code::DeadlineUnattainable,
                     fmt::format("the deadline of {} ms cannot be met: the first token is estimated at {:.0f} ms at the "
                                 "earliest ({} steps of {:.1f} ms, {} sequences ahead, {} of {} slots free)",
                                 r.request.deadline_ms, eta_ms, steps_to_first_token(in), state_.step_ms, in.ahead,
                                 in.free_slots, state_.cfg.n_parallel)};
}

void Scheduler::cancel(uint64_t id) {
  auto it = state_.requests.find(id);
  if (it == state_.requests.end()) return;
  Req& r = *it->second;
  r.cancelled = true;
  for (auto& s : r.seqs)
    if (!s->done) state_.finish_seq(*s, FinishReason::Cancelled);
  // finish_seq finished the request when the last sequence ended; its KV is free now.
  state_.update_gauges();
}

void Scheduler::cancel_all(const std::string& why) {
  std::vector<uint64_t> ids;
  for (auto& [id, r] : state_.requests) ids.push_back(id);
  for (uint64_t id : ids) {
    auto it = state_.requests.find(id);
    if (it == state_.requests.end()) continue;
    it->second->error = why;
    cancel(id);
  }
}

// plan → run → output (docs/SCHEDULER.md, "One step").
bool Scheduler::step() {
  state_.finished.clear();  // requests that ended in the last step (or since): no one points at them now
  if (!has_work()) {
    state_.update_gauges();
    return false;
  }
  const StepPlan plan = planner_.plan();
  state_.update_gauges();
  if (plan.empty()) return false;
  const StepResult result = run_step(state_.runner, plan);
  output_.apply(plan, result);
  return true;
}

void Scheduler::note_rejected(SubmitError::Code cause) {
  std::lock_guard<std::mutex> lock(state_.metrics_mutex);
  ++state_.metrics.requests_rejected;
  switch (cause) {
    case SubmitError::Code::QueueFull: ++state_.metrics.rejected_queue_full; break;
    case SubmitError::Code::TooLong: ++state_.metrics.rejected_too_long; break;
    case SubmitError::Code::Invalid:
    case SubmitError::Code::ShuttingDown: ++state_.metrics.rejected_invalid; break;
    case SubmitError::Code::DeadlineUnattainable: ++state_.metrics.rejected_deadline; break;
  }
}

double Scheduler::next_event_ms() const {
  double t = planner_.hold_until_ms();
  for (const auto& [id, r] : state_.requests)
    if (r->strict_deadline) t = std::min(t, r->deadline_abs_ms);
  return t;
}

LatencyLastMinute Scheduler::latency_last_minute(double now_ms) const {
  std::lock_guard<std::mutex> lock(state_.metrics_mutex);
  return {state_.ttft_window.summary(now_ms), state_.itl_window.summary(now_ms)};
}

void Scheduler::active_requests(double now, std::vector<ActiveRequest>& out) const {
  out.clear();
  for (const auto& [id, r] : state_.requests) {  // ids grow with arrival
    ActiveRequest a;
    a.id = id;
    a.priority = r->request.priority;
    a.deadline_ms = r->request.deadline_ms;
    a.strict_deadline = r->strict_deadline;
    if (std::isfinite(r->deadline_abs_ms)) a.deadline_left_ms = r->deadline_abs_ms - now;
    a.age_ms = now - r->arrival_ms;
    a.ttft_ms = r->first_token_ms >= 0 ? r->first_token_ms - r->arrival_ms : -1.0;
    a.n_prompt = r->usage.prompt_tokens;
    a.n_cached = r->usage.cached_tokens;
    a.n_generated = r->usage.completion_tokens;
    a.max_tokens = r->request.max_tokens;
    a.n_samples = static_cast<int32_t>(r->seqs.size());
    a.n_preempted = r->n_preempted;
    const Seq& lead = *r->seqs.front();
    a.rank = state_.effective_priority(lead, now);
    a.n_computed = lead.n_computed;
    int best = -1;  // waiting 0, preempted 1, prefilling 2, decoding 3
    for (const auto& s : r->seqs) {
      if (s->done) continue;
      const int st = s->seq_id >= 0 ? (s->remaining() <= 1 ? 3 : 2) : (s->preempted_at_ms >= 0 ? 1 : 0);
      best = std::max(best, st);
    }
    static constexpr RequestState kStates[] = {RequestState::Waiting, RequestState::Preempted,
                                               RequestState::Prefilling, RequestState::Decoding};
    a.state = kStates[std::max(best, 0)];
    out.push_back(a);
  }
}

MetricsSnapshot Scheduler::metrics() const {
  std::lock_guard<std::mutex> lock(state_.metrics_mutex);
  return state_.metrics;
}


}  // namespace ubatch::sched
