// The step scheduler: requests → sequences, step planning under a token budget, policies,
// admission, preemption, streaming of results, metrics. Single-threaded: the engine thread
// (or the simulator) calls submit/cancel/step; nothing here locks except the metrics snapshot.
//
// A step (see docs/SCHEDULER.md):
//   0. requests whose strict deadline has passed end (FinishReason::Deadline; never prefilled
//      when still queued); policy ubatch: waiting requests that outrank a running sequence by
//      the margin and find no slot or KV room preempt it (preemption.h);
//   1. one decode token for every running sequence that is ready to decode, preempting the
//      lowest-ranked sequences (rank.h) when the KV cache cannot hold them;
//   2. prefill chunks of partly prefilled and waiting sequences into the remaining budget
//      (chunked prefill), candidates ordered by the policy (ubatch: effective priority,
//      then deadline, then the objective score, then arrival);
//   3. speculative drafts (prompt lookup, ngram_draft.h) for decode sequences, into the budget
//      left, where the step-time model says they pay (spec_policy.h);
//   4. one decode() of the batch, sampling of every sequence whose computed tokens reached
//      its token count (verifying drafts in order; rejected drafts' KV is rolled back),
//      streaming, finishing.
// Invariants checked after every step: tokens ≤ n_batch, running ≤ n_parallel; at step
// boundaries a running sequence's KV holds exactly its computed tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "sched/active_requests.h"
#include "sched/engine.h"
#include "sched/latency_window.h"
#include "sched/metrics.h"
#include "sched/rank.h"
#include "sched/request.h"
#include "sched/ngram_draft.h"
#include "sched/runner.h"
#include "sched/spec_policy.h"
#include "sched/step_time_model.h"
#include "sched/step_log.h"
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
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // When holding a small batch for the window: the clock time it expires; else +inf.
  double hold_until_ms() const { return hold_until_ms_; }
  // The next clock time at which a step may have something new to do without any submit or
  // cancel: the end of the batch window or the earliest strict deadline; +inf when none.
  double next_event_ms() const;
  size_t n_waiting_requests() const { return n_waiting_requests_; }

  MetricsSnapshot metrics() const;
  // Counts a request refused at submit (thread-safe: only touches the metrics).
  void note_rejected(SubmitError::Code cause);
  const EngineConfig& config() const { return cfg_; }

  // Live views (thread-safe): one record per step that ran (step_log.h), and TTFT and ITL
  // (gaps between successive tokens of a sample) over the minute before now_ms (runner clock).
  const StepLog& step_log() const { return step_log_; }
  LatencyLastMinute latency_last_minute(double now_ms) const;
  // Engine thread only: replaces `out` with one row per request still queued or running,
  // ordered by arrival (active_requests.h).
  void active_requests(double now_ms, std::vector<ActiveRequest>& out) const;

 private:
  struct Seq;
  struct Req;
  struct Entry {
    Seq* seq;
    int32_t n_tokens;              // tokens of the sequence computed (prefill chunk, or 1 to decode)
    std::vector<int32_t> draft;    // decode entries: draft tokens verified after the token
    int32_t n_match = 0;           // the draft's n-gram match length
  };

  enum class PreemptCause { Memory, Priority };

  double effective_priority(const Seq& s, double now) const;
  RankKey rank_key(const Seq& s) const;
  bool admissible(const Seq& s) const;
  bool admit(Seq& s);
  void release_kv(Seq& s);
  void unadmit(Seq& s);
  void preempt(Seq& s, PreemptCause cause);
  Seq* pick_victim(const std::vector<Entry>& planned, const Seq* requester);
  void expire_deadlines(double now);
  void preempt_for_priority(double now);
  Seq* priority_victim(const Seq& waiting, double now);
  std::optional<SubmitError> check_deadline(const Req& r, double now) const;
  std::optional<SubmitError> validate_embedding(const Request& r) const;
  void plan(std::vector<Entry>& entries);
  void plan_decodes(std::vector<Entry>& entries, int32_t& budget, int32_t& reserved);
  void plan_prefills(std::vector<Entry>& entries, int32_t& budget, int32_t& reserved, double now);
  void plan_drafts(std::vector<Entry>& entries, int32_t budget, int32_t reserved);
  bool speculates(const Seq& s) const;
  double oldest_waiting_arrival() const;  // +inf when nothing waits
  bool static_group_ready(double now) const;
  void on_token(Seq& s, const RowSample& row, double now, double itl_ms);
  void advance_reasoning(Seq& s, int32_t id);
  void finish_seq(Seq& s, FinishReason reason, const std::string& error = "");
  void finish_request(Req& r);
  void emit_text(Seq& s, const std::string& text, const RowSample* row);
  int32_t alloc_seq_id();
  void update_gauges();

  Runner& runner_;
  EngineConfig cfg_;
  std::map<uint64_t, std::unique_ptr<Req>> requests_;
  std::vector<std::unique_ptr<Req>> finished_;  // ended this step, freed at the next
  std::vector<Seq*> waiting_;   // not holding KV
  std::vector<Seq*> running_;   // holding KV
  std::vector<int32_t> free_seq_ids_;
  int32_t next_seq_id_ = 0;
  size_t n_waiting_requests_ = 0;
  double hold_until_ms_ = std::numeric_limits<double>::infinity();
  bool group_active_ = false;   // static/grouped: a group is running to completion
  double step_ms_ = 0;          // moving average of measured step times (admission estimate)
  StepTimeModel step_model_;    // measured step time by tokens and logits rows (speculation)
  std::vector<AcceptanceCounts> accept_by_match_;  // [spec_ngram + 1] draft acceptance by n-gram match length
  NgramTable spec_table_;       // server-wide n-gram table (capacity 0: off)

  StepLog step_log_;
  mutable std::mutex metrics_mutex_;
  MetricsSnapshot metrics_;
  mutable LatencyWindow ttft_window_, itl_window_;  // guarded by metrics_mutex_
};

}  // namespace ubatch::sched
