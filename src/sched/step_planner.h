// The planning stage of a step (docs/SCHEDULER.md, "One step"): decides what the next step
// computes under the token budget and the KV room, and returns it as a StepPlan
// (step_plan.h). It never runs the model and never samples. Deciding what fits needs the
// decisions before it applied, so admissions (KV attached: fork or prefix reuse),
// preemptions and expired strict deadlines change the scheduler state as they are taken;
// the plan lists them. In order:
//   0. requests whose strict deadline has passed end (never prefilled when still queued);
//      policy ubatch: waiting requests that outrank a running sequence by the margin and find
//      no slot or KV room preempt it (preemption.h);
//   1. one decode token for every running sequence ready to decode, highest rank first,
//      preempting the lowest-ranked sequences (rank.h) when the KV cache cannot hold them;
//   2. prefill chunks of partly prefilled and waiting sequences into the remaining budget
//      (chunked prefill; ubatch: effective priority, deadline, objective score, arrival;
//      static/grouped: groups run to completion), admitting waiting ones on the spot;
//   3. speculative drafts (prompt lookup, ngram_draft.h) for decodes, into the budget and KV
//      room left, where the step-time model says they pay (spec_policy.h);
//   4. the batch and the rows to sample, with the recurrent-state checkpoints drafts and forks
//      need.
#pragma once

#include <cstdint>
#include <limits>

#include "sched/sched_state.h"
#include "sched/step_plan.h"

namespace ubatch::sched {

class StepPlanner {
 public:
  explicit StepPlanner(SchedState& state) : st_(state) {}

  // Plans the next step at the runner clock's now. An empty plan: nothing can run now (idle,
  // or holding a small batch for the window: see hold_until_ms). Aborts (always-on check)
  // if the plan breaks its invariants (step_plan.h).
  StepPlan plan();

  // Set by the last plan: when holding a small batch for the collection window, the clock time
  // (ms) the hold ends; else +inf.
  double hold_until_ms() const { return hold_until_ms_; }
  // Policies static and grouped: a group is running to completion.
  bool group_active() const { return group_active_; }

 private:
  void expire_deadlines(StepPlan& plan, double now);
  void preempt_for_priority(StepPlan& plan, double now);
  Seq* priority_victim(const Seq& waiting, double now);
  void plan_decodes(StepPlan& plan, int32_t& budget, int32_t& reserved);
  void plan_prefills(StepPlan& plan, int32_t& budget, int32_t& reserved, double now);
  int32_t whole_chunks(const Seq& s, int32_t n) const;
  void plan_drafts(StepPlan& plan, int32_t budget, int32_t reserved);
  bool static_group_ready(double now) const;
  void build_batch(StepPlan& plan) const;

  SchedState& st_;
  double hold_until_ms_ = std::numeric_limits<double>::infinity();
  bool group_active_ = false;
};

}  // namespace ubatch::sched
