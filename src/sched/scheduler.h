// The step scheduler: requests → sequences, one step at a time (see docs/SCHEDULER.md).
// Single-threaded: the engine thread (or the simulator) calls submit/cancel/step; nothing
// here locks except the metrics snapshot.
//
// A step is three stages over values (step_plan.h):
//   plan    StepPlanner::plan() → StepPlan: deadlines, rank preemption, decodes, prefill
//           chunks, speculative drafts under the token budget and KV room; the batch and the
//           rows to sample (step_planner.h);
//   run     run_step(runner, plan) → StepResult: Runner::run on the plan's batch (the forward
//           pass and sampling), the decode status and times;
//   output  StepOutput::apply(plan, result): drafts verified (rejected KV rolled back),
//           tokens detokenized, stop strings matched, events streamed, sequences finished,
//           metrics and the step log recorded (step_output.h).
// The state they share — requests, sequences, admission, preemption, finishing, metrics —
// is a SchedState (sched_state.h).
// Invariants checked after planning: tokens ≤ n_batch, running ≤ n_parallel; after each
// step a running sequence's KV holds exactly its computed tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sched/active_requests.h"
#include "sched/engine.h"
#include "sched/latency_window.h"
#include "sched/metrics.h"
#include "sched/ngram_draft.h"
#include "sched/rank.h"
#include "sched/request.h"
#include "sched/runner.h"
#include "sched/sched_state.h"
#include "sched/spec_policy.h"
#include "sched/step_log.h"
#include "sched/step_output.h"
#include "sched/step_planner.h"
#include "sched/step_time_model.h"
#include "sched/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::sched {

class Scheduler {
 public:
  Scheduler(Runner& runner, const EngineConfig& config);
  ~Scheduler();

  // Checks a request against the configuration and cache size (pure: no state changes).
  // Empty on success, else the error.
  std::optional<SubmitError> validate(const Request& request) const;

  // Queues a validated request; arrival time = runner clock now. A strict deadline that the
  // admission estimate (admission.h) says cannot be met refuses it: the stream then gets a
  // Done event with the rejection, and the error is returned.
  std::optional<SubmitError> submit(uint64_t id, Request request, std::shared_ptr<Stream> stream);
  // Ends the request with FinishReason::Cancelled and frees its KV now.
  void cancel(uint64_t id);
  // Ends every request (engine shutdown).
  void cancel_all(const std::string& why);

  // Runs one step. Returns false when it ran nothing (idle, or holding for the batch window).
  bool step();
  bool has_work() const { return !state_.waiting.empty() || !state_.running.empty(); }
  // When holding a small batch for the window: the clock time it expires; else +inf.
  double hold_until_ms() const { return planner_.hold_until_ms(); }
  // The next clock time at which a step may have something new to do without any submit or
  // cancel: the end of the batch window or the earliest strict deadline; +inf when none.
  double next_event_ms() const;
  size_t n_waiting_requests() const { return state_.n_waiting_requests; }

  MetricsSnapshot metrics() const;
  // Counts a request refused at submit (thread-safe: only touches the metrics).
  void note_rejected(SubmitError::Code cause);
  const EngineConfig& config() const { return state_.cfg; }

  // Live views (thread-safe): one record per step that ran (step_log.h), and TTFT and ITL
  // (gaps between successive tokens of a sample) over the minute before now_ms (runner clock).
  const StepLog& step_log() const { return state_.step_log; }
  LatencyLastMinute latency_last_minute(double now_ms) const;
  // Engine thread only: replaces `out` with one row per request still queued or running,
  // ordered by arrival (active_requests.h).
  void active_requests(double now_ms, std::vector<ActiveRequest>& out) const;

 private:
  std::optional<SubmitError> check_deadline(const Req& r, double now) const;
  std::optional<SubmitError> validate_embedding(const Request& r) const;

  SchedState state_;
  StepPlanner planner_;
  StepOutput output_;
};

}  // namespace ubatch::sched
