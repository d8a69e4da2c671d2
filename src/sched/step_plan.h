// One scheduler step as values (docs/SCHEDULER.md, "One step"): the planner (step_planner.h)
// decides a StepPlan, run_step() executes its batch on the runner into a StepResult, and the
// output stage (step_output.h) applies the result to the sequences. A plan holds pointers to
// the scheduler's sequences (sequence.h); it is valid until the next step starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "context/batch.h"
#include "context/context.h"
#include "sched/runner.h"

namespace ubatch::sched {

struct Seq;

// What one sequence computes in the step.
struct StepEntry {
  static constexpr size_t kNoRow = SIZE_MAX;
  Seq* seq = nullptr;
  int32_t n_tokens = 0;         // tokens of the sequence computed (prefill chunk, or 1 to decode)
  std::vector<int32_t> draft;   // decode entries: draft tokens verified after the token
  int32_t n_match = 0;          // the draft's n-gram match length
  size_t first_row = kNoRow;    // its first row in StepPlan::rows; kNoRow: it samples nothing
};

// A batch row whose final hidden state an embedding sequence pools.
struct PooledRow {
  Seq* seq = nullptr;
  int32_t batch_row = 0;
};

// What one step does, decided before anything runs. Admissions, preemptions and expired
// deadlines were applied to the scheduler state while planning (they decide what fits); the
// plan records them. Invariants (checked when planned): batch.n_tokens() <= n_batch, running
// sequences <= n_parallel; `rows` has one entry per batch row with logits, in batch order,
// each sequence's rows consecutive (its token, then one per draft token).
struct StepPlan {
  std::vector<StepEntry> entries;  // decodes (highest rank first), then prefill chunks
  Batch batch;                     // the entries' tokens (drafts after their sequence's token)
  std::vector<RowSample> rows;     // what to sample: sampler, grammar, draft, forced token
  std::vector<Seq*> row_seq;       // [rows.size()] the sequence each row belongs to
  std::vector<PooledRow> pooled;   // embedding sequences' rows, in batch order
  std::vector<Seq*> admitted;      // given a KV sequence this step (and planned)
  std::vector<Seq*> preempted;     // preempted while planning (for rank, or for KV room)
  std::vector<uint64_t> expired;   // requests ended by their strict deadline
  bool empty() const { return entries.empty(); }
  int32_t n_tokens() const { return batch.n_tokens(); }
};

// What running a plan gave: the decode status, the sampled rows (StepPlan::rows with the
// runner's outputs filled in) and the runner-clock times (ms) around the run.
struct StepResult {
  DecodeResult decode;
  std::vector<RowSample> rows;
  double start_ms = 0, end_ms = 0;
  double run_ms() const { return end_ms - start_ms; }
};

// Runs the plan's batch on the runner (Runner::run) and samples its rows; the hidden states of
// pooled rows stay readable through Runner::embedding until the next run.
StepResult run_step(Runner& runner, const StepPlan& plan);

}  // namespace ubatch::sched
