// What a live view shows of the requests the scheduler holds: one row per request still
// queued or running, built by the engine thread and published to readers (the server's
// dashboard, docs/API.md "GET /v1/dashboard/events").
//
// Threads: Scheduler::active_requests() builds the rows on the engine thread; the engine
// publishes them to a RequestBoard, which any thread reads. publish() swaps a vector under
// the board's mutex (no allocation, no copy), read() copies the rows under it: a reader never
// stalls the engine longer than that copy, and never across a forward pass.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace ubatch::sched {

enum class RequestState {
  Waiting,     // queued, never scheduled
  Prefilling,  // holds KV, computing its prompt (or recomputing after a preemption)
  Decoding,    // holds KV, generating one token per step
  Preempted,   // was running; its KV was freed, it waits to be recomputed
};
// "waiting", "prefilling", "decoding", "preempted"
const char* request_state_name(RequestState s);

struct ActiveRequest {
  uint64_t id = 0;            // the engine's request id (Stream::id)
  RequestState state = RequestState::Waiting;  // of its most advanced sample (decoding > prefilling > preempted > waiting)
  int32_t priority = 0;       // as requested
  double rank = 0;            // priority + aging levels earned while waiting (of sample 0)
  int64_t deadline_ms = 0;    // as requested (0: none)
  double deadline_left_ms = 0;  // until the deadline (negative: passed); 0 when none
  bool strict_deadline = false;
  double age_ms = 0;          // since arrival
  double ttft_ms = -1;        // arrival → first token; -1 before it
  int32_t n_prompt = 0;       // prompt tokens
  int32_t n_cached = 0;       // prompt tokens served from the prefix cache
  int32_t n_computed = 0;     // tokens of sample 0 whose KV is in the cache
  int32_t n_generated = 0;    // generated tokens, all samples
  int32_t max_tokens = 0;     // per sample
  int32_t n_samples = 1;      // `n`
  int32_t n_preempted = 0;    // times its samples were preempted
};

struct ActiveRequests {
  double published_ms = -1;  // runner clock when the rows were built (-1: never)
  std::vector<ActiveRequest> rows;  // ordered by arrival
};

class RequestBoard {
 public:
  // Engine thread: replaces the published rows with `rows` (swapped: `rows` gets the old ones
  // back, to reuse their storage).
  void publish(std::vector<ActiveRequest>& rows, double now_ms);
  // Any thread: a copy of the last published rows.
  ActiveRequests read() const;
  // Any thread: how many rows were published last (no copy).
  size_t n_published() const;

 private:
  mutable std::mutex mutex_;
  ActiveRequests published_;
};

}  // namespace ubatch::sched
