// A bounded record of the last steps the scheduler ran, for live views (the server's
// dashboard, docs/API.md "GET /v1/dashboard/events"): what each step ran against its token
// budget. The engine thread appends one record per step that ran; any thread copies out the
// records it has not seen yet.
//
// Threads: push() is called by the engine thread only; read() and n_steps() from any
// thread. One mutex guards the ring; push() holds it for one record copy and read() for
// the copy of at most `max` records, so a reader never stalls the engine longer than that
// copy and no lock is ever held across a forward pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace ubatch::sched {

struct StepRecord {
  uint64_t index = 0;      // 1 for the first step the scheduler ran
  double end_ms = 0;       // runner clock (ms) when the step's decode returned
  float decode_ms = 0;     // time in the decode: forward passes and sampling (ms)
  int32_t n_decode = 0;    // tokens of sequences generating their next token: one each, plus
                           // the draft tokens it verifies (speculative decoding)
  int32_t n_prefill = 0;   // prompt tokens, and tokens recomputed after a preemption
  int32_t n_draft = 0;     // draft tokens verified (part of n_decode)
  int32_t n_budget = 0;    // the step's token budget (n_batch); n_decode + n_prefill <= n_budget
  int32_t n_sampled = 0;   // tokens the step gave its sequences (output tokens; accepted drafts included)
  int32_t n_running = 0;   // sequences holding KV after the step
  int32_t n_waiting = 0;   // sequences waiting (queued or preempted) after the step
};

class StepLog {
 public:
  // Keeps the last `capacity` records (>= 1).
  explicit StepLog(size_t capacity = kDefaultCapacity);
  static constexpr size_t kDefaultCapacity = 16384;  // > a minute of steps at 250 steps/s

  // Engine thread: appends r; r.index must be n_steps() + 1.
  void push(const StepRecord& r);

  // Any thread: appends to `out`, oldest first, the records whose index is > after — at most
  // `max` of them, the newest (older ones, or ones already overwritten in the ring, are
  // skipped: compare the first index with after + 1 to see a gap). Returns n_steps().
  uint64_t read(uint64_t after, size_t max, std::vector<StepRecord>& out) const;

  uint64_t n_steps() const;  // records pushed so far (the newest index)
  size_t capacity() const { return ring_.size(); }

 private:
  mutable std::mutex mutex_;
  std::vector<StepRecord> ring_;  // record i lives at (i - 1) % capacity
  uint64_t n_ = 0;                // guarded by mutex_
};

}  // namespace ubatch::sched
