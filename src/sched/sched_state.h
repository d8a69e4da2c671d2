// What the scheduler holds between steps, and the transitions every stage uses: the live
// requests and their sequences (waiting: no KV; running: a KV sequence), KV sequence ids,
// the speculation statistics, the step-time estimates, the step log and the metrics.
// Admission, preemption and finishing live here because planning (admit, preempt, expire),
// the output stage (finish, preempt on a failed run) and the public API (cancel) all need
// them. Single-threaded (the engine thread) except `metrics`, `ttft_window` and
// `itl_window`, guarded by metrics_mutex, and the step log (thread-safe itself).
// Times are milliseconds on the runner clock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sched/engine.h"
#include "sched/latency_window.h"
#include "sched/metrics.h"
#include "sched/ngram_draft.h"
#include "sched/rank.h"
#include "sched/request.h"
#include "sched/runner.h"
#include "sched/spec_policy.h"
#include "sched/step_log.h"
#include "sched/step_plan.h"
#include "sched/step_time_model.h"

namespace ubatch::sched {

struct Seq;
struct Req;

class SchedState {
 public:
  enum class PreemptCause { Memory, Priority };

  SchedState(Runner& runner, const EngineConfig& config);
  ~SchedState();
  SchedState(const SchedState&) = delete;
  SchedState& operator=(const SchedState&) = delete;

  // A request (already validated) that arrived at arrival_ms, with its absolute deadline and
  // usage set, not yet queued (it has no sequences yet).
  static std::unique_ptr<Req> new_request(uint64_t id, Request request, std::shared_ptr<Stream> stream,
                                          double arrival_ms);
  // Queues r: one waiting sequence per sample, each with its own sampler seed (seed + index).
  // Counts it as submitted.
  void add_request(std::unique_ptr<Req> r);

  // Rank (rank.h): a waiting sequence's priority raised by aging; a running one keeps the
  // rank it was admitted with.
  double effective_priority(const Seq& s, double now) const;
  RankKey rank_key(const Seq& s) const;
  // Samples i > 0 of a request wait until sample 0 has computed the prompt, then fork its KV.
  bool admissible(const Seq& s) const;
  // Whether s may draft speculative tokens (configuration and request allow it).
  bool speculates(const Seq& s) const;
  double oldest_waiting_arrival() const;  // +inf when nothing waits
  // Chunk-wise prompts (models whose KV cache has a state_chunk C: Batch::chunkable): C when
  // the step budget holds a chunk, else 0 (every row step by step). A sequence's rows
  // [0, n_chunkable(s)) — its prompt but the last token, a function of the sequence alone — are
  // flagged, and its prompt pieces start and end at multiples of C within them.
  int32_t prompt_chunk() const;
  int32_t n_chunkable(const Seq& s) const;

  // Gives a waiting s a KV sequence, reusing what it can: the leader's prompt (fork), else
  // cached prefix blocks; never allocates new blocks itself. Moves it to `running`.
  void admit(Seq& s);
  // Undoes admit() within the same plan: the wait (and the preemption it ended) goes on.
  void unadmit(Seq& s);
  // Frees a running s's blocks and requeues it; it recomputes its tokens later, same output.
  void preempt(Seq& s, PreemptCause cause);
  // The lowest-ranked running sequence not already in `planned` (the requester itself may be
  // chosen); nullptr when none.
  Seq* pick_victim(const std::vector<StepEntry>& planned, const Seq* requester);
  // Ends s (flushing held-back text on stop, length and deadline), frees its KV, pushes its
  // Finish event; the request's Done follows when its last sequence ends. No-op when done.
  void finish_seq(Seq& s, FinishReason reason, const std::string& error = "");
  // Pushes a Token event with `text` (and the row's token and log-probabilities, if any).
  void emit_text(Seq& s, const std::string& text, const RowSample* row);
  // Copies the queue, running and KV gauges into the metrics.
  void update_gauges();

  Runner& runner;
  const EngineConfig cfg;
  std::map<uint64_t, std::unique_ptr<Req>> requests;  // live, by id (ids grow with arrival)
  std::vector<std::unique_ptr<Req>> finished;        // ended this step, freed at the next
  std::vector<Seq*> waiting;                          // not holding KV
  std::vector<Seq*> running;                          // holding KV
  size_t n_waiting_requests = 0;                      // requests none of whose samples ran yet
  double step_ms = 0;               // moving average of measured step times (admission estimate)
  StepTimeModel step_model;         // measured step time by tokens and logits rows (speculation)
  std::vector<AcceptanceCounts> accept_by_match;  // [spec_ngram + 1] draft acceptance by n-gram match length
  NgramTable spec_table;            // server-wide n-gram table (capacity 0: off)
  StepLog step_log;
  mutable std::mutex metrics_mutex;
  MetricsSnapshot metrics;                          // guarded by metrics_mutex
  mutable LatencyWindow ttft_window, itl_window;    // guarded by metrics_mutex

 private:
  int32_t alloc_seq_id();
  void release_kv(Seq& s);
  void finish_request(Req& r);

  std::vector<int32_t> free_seq_ids_;
  int32_t next_seq_id_ = 0;
};

}  // namespace ubatch::sched
