// Preemption for rank and the aging rule on the fake runner (virtual clock): an urgent request
// displaces the lowest-ranked running sequence, the margin and the minimum run time guard
// against thrashing, equal priorities never displace each other, preempted output is
// unchanged, and a low-priority request under sustained high-priority load finishes within
// the documented bound (docs/SCHEDULER.md, "No starvation").
#include <gtest/gtest.h>

#include <set>

#include "sched/preemption.h"
#include "sched_harness.h"

namespace ubatch::sched {
namespace {

RunningView running(double rank, double run_ms, uint64_t request, double arrival = 0) {
  RunningView v;
  v.key.rank = rank;
  v.key.arrival_ms = arrival;
  v.run_ms = run_ms;
  v.request = request;
  return v;
}

TEST(PriorityVictim, LowestRankedEligibleSequence) {
  const std::vector<RunningView> r = {running(3, 900, 1), running(0, 900, 2, 10), running(0, 900, 3, 20),
                                      running(9, 900, 4)};
  // Equal ranks: the later arrival goes first.
  EXPECT_EQ(pick_priority_victim(r, 10, 99, 1, 500), 2);
  // The margin: priority 10 needs rank <= 10 - margin.
  EXPECT_EQ(pick_priority_victim(r, 10, 99, 10, 500), 2);
  EXPECT_EQ(pick_priority_victim(r, 10, 99, 11, 500), -1);
  EXPECT_EQ(pick_priority_victim(r, 3, 99, 3, 500), 2);
  EXPECT_EQ(pick_priority_victim(r, 2, 99, 3, 500), -1);
  // Margin 0: priority preemption off.
  EXPECT_EQ(pick_priority_victim(r, 10, 99, 0, 0), -1);
}

TEST(PriorityVictim, MinimumRunTimeAndOwnRequestAreRespected) {
  std::vector<RunningView> r = {running(0, 100, 1), running(0, 800, 2), running(0, 50, 3)};
  EXPECT_EQ(pick_priority_victim(r, 10, 99, 1, 500), 1);  // the only one past its minimum run
  EXPECT_EQ(pick_priority_victim(r, 10, 99, 1, 1000), -1);
  EXPECT_EQ(pick_priority_victim(r, 10, 2, 1, 500), -1);  // its own request's sample
}

Request long_request(int32_t seed, int32_t max_tokens = 400) {
  Request r = make_request(24, max_tokens, seed);
  r.ignore_eos = true;
  return r;
}

TEST(PriorityPreemption, AnUrgentRequestDisplacesTheLowestRankedSequence) {
  EngineConfig c = config(Policy::UBatch, 2, 64);
  c.preempt_min_run_ms = 100;
  Harness h(c);
  const uint64_t a = h.submit(long_request(1));
  h.run_until(5);
  const uint64_t b = h.submit(long_request(2));  // same priority, later arrival: ranks lower
  h.run_until(300);
  const double t_urgent = h.runner.now_ms();
  const uint64_t u = h.submit(make_request(16, 8, 3, 10));
  h.run_all();
  ASSERT_TRUE(h.done.count(u));
  // Admitted at the next step: its first token comes with the step that prefills it.
  ASSERT_FALSE(h.token_ms[u][0].empty());
  EXPECT_LE(h.token_ms[u][0].front() - t_urgent, 2 * sim::CostModel{}.step_ms(64, 2));
  const MetricsSnapshot m = h.sched.metrics();
  EXPECT_EQ(m.preemptions_priority, 1u);
  EXPECT_EQ(m.preemptions_memory, 0u);
  EXPECT_EQ(h.done[b].timings.preempted, 1);
  EXPECT_GT(h.done[b].timings.preempted_ms, 0.0);
  EXPECT_EQ(h.done[a].timings.preempted, 0);
  EXPECT_EQ(h.done[u].timings.preempted, 0);
  // B was out for about as long as the urgent request ran.
  EXPECT_LE(h.done[b].timings.preempted_ms, h.done[u].timings.total_ms + sim::CostModel{}.step_ms(64, 2));
  // Outputs as if alone (recompute preemption).
  for (uint64_t id : {a, b}) {
    Harness solo(config(Policy::UBatch, 2, 64));
    const uint64_t s = solo.submit(long_request(id == a ? 1 : 2));
    solo.run_all();
    EXPECT_EQ(h.tokens[id][0], solo.tokens[s][0]) << "request " << id;
    EXPECT_EQ(h.text[id], solo.text[s]);
    EXPECT_EQ(h.finish[id][0], FinishReason::Length);
  }
  EXPECT_EQ(h.runner.kv().stats().n_blocks_used, 0);
  h.runner.kv().check_invariants();
}

TEST(PriorityPreemption, MinimumRunTimeDelaysIt) {
  EngineConfig c = config(Policy::UBatch, 1, 64);
  c.preempt_min_run_ms = 1000;
  Harness h(c);
  const uint64_t a = h.submit(long_request(1, 1000));
  h.run_until(200);
  const uint64_t u = h.submit(make_request(16, 4, 3, 10));
  h.run_all();
  ASSERT_TRUE(h.done.count(u));
  // A was admitted at 0 ms: the urgent request waits until A has run 1,000 ms, not longer.
  EXPECT_GE(h.token_ms[u][0].front(), 1000.0);
  EXPECT_LE(h.token_ms[u][0].front(), 1000.0 + 2 * sim::CostModel{}.step_ms(64, 1));
  EXPECT_EQ(h.sched.metrics().preemptions_priority, 1u);
  EXPECT_EQ(h.done[a].timings.preempted, 1);
}

TEST(PriorityPreemption, AMarginAboveTheGapWaitsForASlot) {
  EngineConfig c = config(Policy::UBatch, 1, 64);
  c.preempt_margin = 11;  // priority 10 over priority 0: not enough
  c.preempt_min_run_ms = 0;
  Harness h(c);
  const uint64_t a = h.submit(long_request(1, 200));
  h.run_until(100);
  const uint64_t u = h.submit(make_request(16, 4, 3, 10));
  h.run_all();
  EXPECT_GT(h.token_step[u][0].front(), h.token_step[a][0].back());
  EXPECT_EQ(h.sched.metrics().preemptions, 0u);
  // Margin 0 turns priority preemption off altogether.
  c.preempt_margin = 0;
  Harness off(c);
  const uint64_t a2 = off.submit(long_request(1, 200));
  off.run_until(100);
  const uint64_t u2 = off.submit(make_request(16, 4, 3, 1000));
  off.run_all();
  EXPECT_GT(off.token_step[u2][0].front(), off.token_step[a2][0].back());
  EXPECT_EQ(off.sched.metrics().preemptions, 0u);
}

TEST(PriorityPreemption, EqualPrioritiesNeverDisplaceEachOtherHoweverLongTheyWait) {
  // Aging raises waiting requests many levels above running ones, but only a higher *base*
  // priority preempts: an overloaded server of one priority never thrashes.
  EngineConfig c = config(Policy::UBatch, 2, 64);
  c.aging_ms = 20;
  c.preempt_min_run_ms = 0;
  Harness h(c);
  for (int i = 0; i < 12; ++i) h.submit(long_request(i, 120));
  h.run_all();
  EXPECT_EQ(h.done.size(), 12u);
  EXPECT_EQ(h.sched.metrics().preemptions, 0u);
}

TEST(PriorityPreemption, PreemptedSamplesAndForksKeepTheirOutput) {
  // Repeated urgent arrivals displace n = 3 samples of a low-priority request; every sample
  // still ends with the tokens it produces alone.
  EngineConfig c = config(Policy::UBatch, 3, 64);
  c.preempt_min_run_ms = 20;
  Request low = long_request(5, 150);
  low.n = 3;
  Harness solo(c);
  const uint64_t s = solo.submit(low);
  solo.run_all();
  Harness h(c);
  const uint64_t id = h.submit(low);
  std::vector<uint64_t> urgent;
  for (int k = 0; k < 6; ++k) {
    h.run_until(60.0 * (k + 1));
    urgent.push_back(h.submit(make_request(12, 6, 40 + k, 10)));
  }
  h.run_all();
  EXPECT_GE(h.sched.metrics().preemptions_priority, 3u);
  EXPECT_GT(h.done[id].timings.preempted, 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(h.tokens[id][i], solo.tokens[s][i]) << "sample " << i;
  for (uint64_t u : urgent) EXPECT_EQ(h.finish[u][0], FinishReason::Length);
  EXPECT_EQ(h.runner.kv().stats().n_blocks_used, 0);
  h.runner.kv().check_invariants();
}

// A priority-0 request under sustained priority-10 load: four closed-loop priority-10 clients
// keep both slots busy and the queue non-empty. Returns the low request's Done event (absent
// if it did not finish before `limit_ms`).
std::optional<Event> low_priority_under_load(double aging_ms, double limit_ms, int64_t* high_done) {
  EngineConfig c = config(Policy::UBatch, 2, 64);
  c.aging_ms = aging_ms;
  Harness h(c);
  std::set<uint64_t> live;
  int32_t seed = 100;
  for (int i = 0; i < 4; ++i) live.insert(h.submit(make_request(16, 30, seed++, 10)));
  h.run_until(50);
  // Longer than the minimum run time, so only the rank it keeps protects it once running.
  Request r = make_request(16, 200, 7, 0);
  r.ignore_eos = true;
  const uint64_t low = h.submit(r);
  *high_done = 0;
  while (!h.done.count(low) && h.runner.now_ms() < limit_ms) {
    if (!h.step()) h.runner.advance_to(h.runner.now_ms() + 1.0);
    for (auto it = live.begin(); it != live.end();) {
      if (h.done.count(*it)) {
        ++*high_done;
        it = live.erase(it);
        live.insert(h.submit(make_request(16, 30, seed++, 10)));  // the client sends its next one
      } else {
        ++it;
      }
    }
  }
  if (!h.done.count(low)) return std::nullopt;
  return h.done[low];
}

TEST(NoStarvation, APriorityZeroRequestFinishesWithinTheAgingBound) {
  const double aging = 2000;  // the default
  int64_t high_done = 0;
  std::optional<Event> low = low_priority_under_load(aging, 120000, &high_done);
  ASSERT_TRUE(low.has_value()) << "starved";
  // It waited out the load (it could not get in on its own priority) ...
  EXPECT_GE(low->timings.queue_ms, aging * 9);
  EXPECT_GT(high_done, 100);
  // ... and finished within the bound of docs/SCHEDULER.md: admitted once its effective
  // priority reaches the load's (aging_ms × gap) plus the wait for a slot, then protected
  // (its rank is kept while it runs), plus its own run time (200 tokens, about 1.2 s here).
  EXPECT_LE(low->timings.total_ms, aging * 10 + 2000);
  EXPECT_EQ(low->timings.preempted, 0);
  // Without aging the same load starves it.
  EXPECT_FALSE(low_priority_under_load(0, 60000, &high_done).has_value());
}

}  // namespace
}  // namespace ubatch::sched
