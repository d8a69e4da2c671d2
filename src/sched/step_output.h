// The output stage of a step (docs/SCHEDULER.md, "One step", 4): applies what running a
// StepPlan gave (StepResult, step_plan.h) to the scheduler state. For every planned entry it
// advances the sequence's computed tokens and verifies its drafts (accepted up to the first
// mismatch; the KV of the rest rolled back); it pools embedding rows and finishes embedding
// requests; it appends the sampled tokens, detokenizes them (never half a UTF-8 character),
// matches stop strings (held back, never emitted), keeps the thinking budget, streams Token
// events and finishes sequences (end of generation, stop string, complete grammar,
// max_tokens); it records the step's metrics, the step-time model and the step log. A run
// that found no KV room preempts the lowest-ranked sequence instead (the next step plans
// again); any other failed run fails the plan's requests with the runner's message.
#pragma once

#include <cstdint>

#include "sched/sched_state.h"
#include "sched/step_log.h"
#include "sched/step_plan.h"

namespace ubatch::sched {

class StepOutput {
 public:
  explicit StepOutput(SchedState& state) : st_(state) {}

  // Applies `result`, the run of `plan` (the plan of this step: its sequences are live).
  void apply(const StepPlan& plan, const StepResult& result);

 private:
  // What the step computed and verified, for the metrics.
  struct Counts {
    uint64_t prompt_tokens = 0, draft_tokens = 0, accepted = 0, spec_seqs = 0, sampling_seqs = 0;
  };
  void pool_embeddings(const StepPlan& plan);
  Counts advance_sequences(const StepPlan& plan, const StepResult& result, StepRecord& rec);
  void record_metrics(const StepPlan& plan, const StepResult& result, const Counts& counts);
  void finish_embeddings(const StepPlan& plan);
  void stream_tokens(const StepPlan& plan, const StepResult& result, StepRecord& rec);
  void on_token(Seq& s, const RowSample& row, double now, double itl_ms);
  void advance_reasoning(Seq& s, int32_t id);
  void log_step(const StepResult& result, StepRecord& rec);

  SchedState& st_;
};

}  // namespace ubatch::sched
