// Shares the machine's compute threads between engines — one engine per model a server holds
// loaded (server/model_registry.h). Each engine's context has a thread pool of all the compute
// threads; two engines stepping at once would run twice as many threads as cores and slow both
// by more than half (cache and memory-bandwidth thrash, spinning workers). So an engine holds
// the gate for each step it runs (plan, forward pass, sampling), and engines take turns in the
// order they asked (a FIFO ticket lock): models that have work alternate steps, each step
// running on every thread; a model alone steps back to back, unhindered. An idle engine never
// asks. Fair by steps: each busy model gets every n-th step, and its share of the machine's time
// is its step time over the sum of the busy models' step times (docs/BENCHMARKS.md measures it).
// The order is that of the callers waiting when a turn ends: an engine whose thread has not
// yet asked again then (the OS ran something else between its steps) loses that one turn.
// tests/test_sched_step_gate.cpp.
//
// Thread-safe. enter() blocks; nothing else does.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace ubatch::sched {

class StepGate {
 public:
  // Waits for this caller's turn: callers are served in the order they called.
  void enter() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t ticket = next_++;
    turn_.wait(lock, [&] { return serving_ == ticket; });
  }
  // Ends the caller's turn (after its step); the next waiting caller runs.
  void leave() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++serving_;
    }
    turn_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable turn_;
  uint64_t next_ = 0;     // the ticket the next caller draws
  uint64_t serving_ = 0;  // the ticket whose turn it is
};

}  // namespace ubatch::sched
