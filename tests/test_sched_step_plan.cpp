// The step's stages driven one by one on the fake runner (virtual clock, real paged KV cache):
// planning runs nothing, a plan's batch respects the budget and its rows follow its entries
// (drafts included), planning again without running gives the same plan, and running a plan
// leaves the plan as it was (the sampled rows come back in the StepResult).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "sched/sched_state.h"
#include "sched/sequence.h"
#include "sched/sim.h"
#include "sched/step_output.h"
#include "sched/step_plan.h"
#include "sched/step_planner.h"
#include "sched_harness.h"

namespace ubatch::sched {
namespace {

// The fake runner, the scheduler state and the three stages, without a Scheduler.
struct StepPlanRig {
  sim::FakeRunner runner;
  SchedState state;
  StepPlanner planner{state};
  StepOutput output{state};
  uint64_t next_id = 1;
  StepPlanRig(const EngineConfig& cfg, int32_t n_ctx)
      : runner(1000, n_ctx, 16, sim::CostModel{}), state(runner, cfg) {}
  void add(Request r) {
    const uint64_t id = next_id++;
    state.add_request(SchedState::new_request(id, std::move(r), std::make_shared<Stream>(id), runner.now_ms()));
  }
};

// The plan's structural promises (step_plan.h), checked against the configuration.
void step_plan_expect_well_formed(const StepPlan& plan, const EngineConfig& cfg, const SchedState& state) {
  ASSERT_LE(plan.n_tokens(), cfg.n_batch);
  ASSERT_LE(static_cast<int32_t>(state.running.size()), cfg.n_parallel);
  int32_t tokens = 0;
  size_t logits_rows = 0;
  for (int32_t i = 0; i < plan.batch.n_tokens(); ++i) logits_rows += plan.batch.logits[static_cast<size_t>(i)];
  ASSERT_EQ(plan.rows.size(), logits_rows);
  ASSERT_EQ(plan.row_seq.size(), plan.rows.size());
  for (const StepEntry& e : plan.entries) {
    tokens += e.n_tokens + static_cast<int32_t>(e.draft.size());
    ASSERT_GE(e.seq->seq_id, 0) << "a planned sequence holds a KV sequence";
    if (e.first_row == StepEntry::kNoRow) {
      ASSERT_TRUE(e.draft.empty());
      continue;
    }
    // Its token's row, then one per draft token, each naming the next draft token to verify.
    for (size_t j = 0; j <= e.draft.size(); ++j) {
      const size_t r = e.first_row + j;
      ASSERT_LT(r, plan.rows.size());
      EXPECT_EQ(plan.row_seq[r], e.seq);
      EXPECT_EQ(plan.rows[r].draft, j < e.draft.size() ? e.draft[j] : -1);
      EXPECT_EQ(plan.rows[r].sampler, &e.seq->sampler);
    }
  }
  EXPECT_EQ(tokens, plan.n_tokens());
}

TEST(StepPlan, PlanningRunsNothingAndRespectsTheBudget) {
  EngineConfig cfg = config(Policy::UBatch, 4, 48);
  StepPlanRig rig(cfg, 4096);
  for (int i = 0; i < 6; ++i) rig.add(make_request(20 + 9 * i, 8, i));
  const StepPlan plan = rig.planner.plan();
  EXPECT_EQ(rig.runner.n_runs(), 0);
  step_plan_expect_well_formed(plan, cfg, rig.state);
  EXPECT_EQ(plan.n_tokens(), 48);  // prefill chunks fill the budget
  EXPECT_EQ(plan.admitted.size(), plan.entries.size());
  EXPECT_TRUE(plan.preempted.empty());
  // Admission attached KV, but nothing was computed: each KV sequence holds what it reused.
  for (const StepEntry& e : plan.entries)
    EXPECT_EQ(rig.runner.kv().seq_n_tokens(e.seq->seq_id), e.seq->n_computed);
}

TEST(StepPlan, PlanningAgainWithoutRunningGivesTheSamePlan) {
  EngineConfig cfg = config(Policy::UBatch, 4, 40);
  cfg.spec_k = 0;  // draft estimates relax at every plan that offers drafts
  StepPlanRig rig(cfg, 4096);
  for (int i = 0; i < 5; ++i) rig.add(make_request(12 + 5 * i, 20, i));
  for (int step = 0; step < 12; ++step) {
    const StepPlan a = rig.planner.plan();
    const StepPlan b = rig.planner.plan();  // a's admissions are already taken: b admits nothing new
    EXPECT_TRUE(b.admitted.empty());
    ASSERT_EQ(a.entries.size(), b.entries.size()) << "step " << step;
    for (size_t k = 0; k < a.entries.size(); ++k) {
      EXPECT_EQ(a.entries[k].seq, b.entries[k].seq);
      EXPECT_EQ(a.entries[k].n_tokens, b.entries[k].n_tokens);
      EXPECT_EQ(a.entries[k].first_row, b.entries[k].first_row);
    }
    EXPECT_EQ(a.batch.token, b.batch.token);
    EXPECT_EQ(a.batch.pos, b.batch.pos);
    EXPECT_EQ(a.batch.seq_ids, b.batch.seq_ids);
    EXPECT_EQ(a.batch.logits, b.batch.logits);
    EXPECT_EQ(a.row_seq, b.row_seq);
    if (b.empty()) break;
    rig.output.apply(b, run_step(rig.runner, b));
  }
}

TEST(StepPlan, DraftsRideInTheBudgetAndTheResultCarriesTheSampledRows) {
  EngineConfig cfg = config(Policy::UBatch, 4, 24);
  cfg.spec_k = 6;
  cfg.spec_ngram = 3;
  cfg.spec_always = true;
  StepPlanRig rig(cfg, 4096);
  rig.runner.set_repetitive(7);
  for (int i = 0; i < 4; ++i) {
    Request r = make_request(10, 60, i);
    r.ignore_eos = true;
    rig.add(std::move(r));
  }
  int64_t drafted = 0;
  for (int step = 0; step < 400 && (!rig.state.waiting.empty() || !rig.state.running.empty()); ++step) {
    rig.state.finished.clear();
    const StepPlan plan = rig.planner.plan();
    ASSERT_FALSE(plan.empty());
    step_plan_expect_well_formed(plan, cfg, rig.state);
    for (const StepEntry& e : plan.entries) drafted += static_cast<int64_t>(e.draft.size());
    const int64_t runs = rig.runner.n_runs();
    const StepResult result = run_step(rig.runner, plan);
    EXPECT_EQ(rig.runner.n_runs(), runs + 1);
    ASSERT_EQ(result.rows.size(), plan.rows.size());
    for (size_t r = 0; r < plan.rows.size(); ++r) {
      EXPECT_EQ(plan.rows[r].token, -1) << "running leaves the plan as it was";
      EXPECT_EQ(result.rows[r].draft, plan.rows[r].draft);
    }
    EXPECT_GE(result.end_ms, result.start_ms);
    rig.output.apply(plan, result);
  }
  EXPECT_TRUE(rig.state.running.empty());
  EXPECT_GT(drafted, 0);
  EXPECT_EQ(rig.state.metrics.generated_tokens, 4u * 60u);
  EXPECT_EQ(rig.state.metrics.draft_tokens, static_cast<uint64_t>(drafted));
  EXPECT_EQ(rig.runner.kv().stats().n_blocks_used, 0);
}

}  // namespace
}  // namespace ubatch::sched
