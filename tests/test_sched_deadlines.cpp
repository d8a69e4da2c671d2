// Deadlines on the fake runner (virtual clock): a strict deadline that passes in the queue ends
// the request within one step without prefilling it; one that passes while running stops it
// with the tokens made so far; best effort only orders; a deadline the admission estimate says
// cannot be met is refused at submit; the estimate itself (admission.h).
#include <gtest/gtest.h>

#include "sched/admission.h"
#include "sched_harness.h"

namespace ubatch::sched {
namespace {

// The longest a step of this test's configuration can take on the default cost model.
double max_step_ms(const EngineConfig& c) { return sim::CostModel{}.step_ms(c.n_batch, c.n_parallel); }

TEST(AdmissionEstimate, SlotWaitThenPromptChunks) {
  AdmissionInputs in;
  in.step_ms = 10;
  in.n_batch = 64;
  in.n_prompt = 100;  // two chunks
  in.free_slots = 1;
  EXPECT_EQ(steps_to_first_token(in), 2);
  EXPECT_DOUBLE_EQ(first_token_estimate_ms(in), 20.0);
  // No free slot: the earliest a running sequence can be done.
  in.free_slots = 0;
  in.steps_to_free = {300, 1, 40};
  EXPECT_EQ(steps_to_first_token(in), 1 + 2);
  // Two requests ahead: the third slot to free.
  in.ahead = 2;
  EXPECT_EQ(steps_to_first_token(in), 300 + 2);
  // More ahead than running: all of them.
  in.ahead = 9;
  EXPECT_EQ(steps_to_first_token(in), 300 + 2);
  // A running group (static, grouped): all must end, free slots or not.
  in.ahead = 0;
  in.free_slots = 2;
  in.group_running = true;
  EXPECT_EQ(steps_to_first_token(in), 300 + 2);
  // Nothing measured yet: no estimate (never refuse).
  in.step_ms = 0;
  EXPECT_DOUBLE_EQ(first_token_estimate_ms(in), 0.0);
}

Request with_deadline(Request r, int64_t deadline_ms, DeadlinePolicy p = DeadlinePolicy::Strict) {
  r.deadline_ms = deadline_ms;
  r.deadline_policy = p;
  return r;
}

TEST(Deadlines, PassedWhileQueuedNeverPrefillsAndEndsWithinAStep) {
  EngineConfig c = config(Policy::UBatch, 1, 64);
  Harness h(c);
  // The running request may end at any token (end-of-generation not ignored), so the
  // admission estimate lets the deadline request in; it then waits for the only slot.
  const uint64_t a = h.submit(make_request(20, 2000, 1));
  h.run_until(50);
  const uint64_t prompt_before = h.sched.metrics().prompt_tokens;
  const double t_submit = h.runner.now_ms();
  const uint64_t d = h.submit(with_deadline(make_request(30, 8, 2), 300));
  ASSERT_FALSE(h.refused.count(d));
  h.run_until(t_submit + 1000);
  ASSERT_TRUE(h.done.count(d));
  EXPECT_EQ(h.finish[d][0], FinishReason::Deadline);
  EXPECT_NE(h.finish_error[d][0].find("never scheduled"), std::string::npos) << h.finish_error[d][0];
  EXPECT_EQ(h.done[d].usage.completion_tokens, 0);
  EXPECT_TRUE(h.tokens[d].empty());
  // Ended at the first step that began after the deadline.
  EXPECT_GE(h.done[d].timings.total_ms, 300.0);
  EXPECT_LE(h.done[d].timings.total_ms, 300.0 + max_step_ms(c));
  // Never prefilled: the only prompt tokens computed since are none (A only decodes).
  const MetricsSnapshot m = h.sched.metrics();
  EXPECT_EQ(m.prompt_tokens, prompt_before);
  EXPECT_EQ(m.deadline_misses_queued, 1u);
  EXPECT_EQ(m.deadline_misses_running, 0u);
  EXPECT_FALSE(h.done.count(a));  // the long request runs on
  h.sched.cancel(a);
  h.drain();
  EXPECT_EQ(h.runner.kv().stats().n_blocks_used, 0);
}

TEST(Deadlines, PassedWhileRunningStopsWithTheTokensMadeSoFar) {
  EngineConfig c = config(Policy::UBatch, 2, 64);
  Harness h(c);
  Request r = with_deadline(make_request(20, 1000, 3), 200);
  r.ignore_eos = true;
  const uint64_t d = h.submit(r);
  h.run_all();
  ASSERT_TRUE(h.done.count(d));
  EXPECT_EQ(h.finish[d][0], FinishReason::Deadline);
  const int32_t n = h.done[d].usage.completion_tokens;
  EXPECT_GT(n, 10);
  EXPECT_LT(n, 1000);
  EXPECT_EQ(static_cast<int32_t>(h.tokens[d][0].size()), n);
  EXPECT_GE(h.done[d].timings.total_ms, 200.0);
  EXPECT_LE(h.done[d].timings.total_ms, 200.0 + max_step_ms(c));
  EXPECT_EQ(h.sched.metrics().deadline_misses_running, 1u);
  // The tokens are those of the same request without a deadline.
  Harness free_run(c);
  Request no_deadline = r;
  no_deadline.deadline_ms = 0;
  const uint64_t f = free_run.submit(no_deadline);
  free_run.run_all();
  EXPECT_TRUE(std::equal(h.tokens[d][0].begin(), h.tokens[d][0].end(), free_run.tokens[f][0].begin()));
  EXPECT_EQ(h.runner.kv().stats().n_blocks_used, 0);
}

TEST(Deadlines, BestEffortOnlyOrdersTheQueue) {
  EngineConfig c = config(Policy::UBatch, 1, 64);
  Harness h(c);
  const uint64_t a = h.submit(make_request(20, 100, 1));
  const uint64_t late = h.submit(make_request(20, 30, 2));
  Request r = make_request(20, 300, 3);
  r.ignore_eos = true;
  const uint64_t b = h.submit(with_deadline(r, 100, DeadlinePolicy::BestEffort));
  h.run_all();
  EXPECT_EQ(h.finish[b][0], FinishReason::Length);
  EXPECT_EQ(h.done[b].usage.completion_tokens, 300);
  EXPECT_GT(h.done[b].timings.total_ms, 100.0);
  // Its deadline put it ahead of the requests without one that arrived before it.
  EXPECT_LT(h.token_step[b][0].front(), h.token_step[a][0].front());
  EXPECT_LT(h.token_step[b][0].front(), h.token_step[late][0].front());
  const MetricsSnapshot m = h.sched.metrics();
  EXPECT_EQ(m.deadline_misses_queued + m.deadline_misses_running, 0u);
}

TEST(Deadlines, AnUnattainableDeadlineIsRefusedAtSubmit) {
  EngineConfig c = config(Policy::UBatch, 1, 64);
  c.preempt_min_run_ms = 500;
  Harness h(c);
  Request running = make_request(20, 2000, 1);
  running.ignore_eos = true;  // sure to run 2,000 tokens: the slot stays busy
  const uint64_t a = h.submit(running);
  h.run_until(50);
  // Same priority: the slot frees after ~2,000 steps.
  const uint64_t d = h.submit(with_deadline(make_request(30, 8, 2), 300));
  ASSERT_TRUE(h.refused.count(d));
  EXPECT_EQ(h.refused[d].code, SubmitError::Code::DeadlineUnattainable);
  EXPECT_NE(h.refused[d].message.find("cannot be met"), std::string::npos) << h.refused[d].message;
  ASSERT_TRUE(h.done.count(d));
  ASSERT_TRUE(h.done[d].rejection.has_value());
  EXPECT_EQ(h.done[d].rejection->code, SubmitError::Code::DeadlineUnattainable);
  EXPECT_TRUE(h.finish[d].empty());
  // Priority 10 may preempt it, but only once it has run 500 ms: a 300 ms deadline cannot be
  // met either, a 2 s one can.
  const uint64_t u1 = h.submit(with_deadline(make_request(30, 8, 3, 10), 300));
  EXPECT_TRUE(h.refused.count(u1));
  const uint64_t u2 = h.submit(with_deadline(make_request(30, 8, 4, 10), 2000));
  EXPECT_FALSE(h.refused.count(u2));
  // Best effort is never refused.
  const uint64_t b = h.submit(with_deadline(make_request(30, 8, 5), 300, DeadlinePolicy::BestEffort));
  EXPECT_FALSE(h.refused.count(b));
  h.run_all();
  EXPECT_EQ(h.finish[u2][0], FinishReason::Length);
  EXPECT_LE(h.done[u2].timings.total_ms, 2000.0);
  EXPECT_EQ(h.finish[b][0], FinishReason::Length);
  EXPECT_EQ(h.finish[a][0], FinishReason::Length);
  const MetricsSnapshot m = h.sched.metrics();
  EXPECT_EQ(m.rejected_deadline, 2u);
  EXPECT_EQ(m.requests_rejected, 2u);
  EXPECT_EQ(m.requests_submitted, 3u);  // a, u2, b
  EXPECT_EQ(m.deadline_misses_queued + m.deadline_misses_running, 0u);
}

TEST(Deadlines, TheSimulatorAppliesTheSameRules) {
  // 20% urgent requests with a 10 s deadline under 64 closed-loop users, on the cost model
  // fitted to the default model (docs/SCHEDULER.md): token-level scheduling with preemption
  // meets the deadlines that a static policy misses.
  sim::Workload w;
  w.n_users = 64;
  w.n_requests = 256;
  w.prompt_min = 32;
  w.prompt_max = 128;
  w.output_min = 16;
  w.output_max = 64;
  w.urgent_share = 0.2;
  w.urgent_deadline_ms = 10000;
  const sim::CostModel cost{20.312, 1.5502, 1.5982};
  EngineConfig c = config(Policy::UBatch, 16, 128);
  const sim::SimResult ub = sim::simulate(c, cost, w, 65536);
  c.policy = Policy::Static;
  c.batch_window_ms = 50;
  const sim::SimResult st = sim::simulate(c, cost, w, 65536);
  EXPECT_GT(ub.with_deadline, 30);
  EXPECT_EQ(ub.with_deadline, st.with_deadline);
  EXPECT_EQ(ub.completed + ub.rejected, 256);
  EXPECT_EQ(st.completed + st.rejected, 256);
  EXPECT_LT(ub.deadline_miss_rate(), 0.05);
  EXPECT_GT(st.deadline_miss_rate(), 0.3);
  EXPECT_LT(ub.urgent_ttft_p99_ms, st.urgent_ttft_p99_ms);
}

}  // namespace
}  // namespace ubatch::sched
