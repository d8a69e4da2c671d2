// Preemption for rank (policy ubatch, docs/SCHEDULER.md): which running sequence a waiting
// request displaces when it finds no free slot or KV room. Pure; the scheduler passes a view
// of its running sequences and preempts the one chosen (recompute later, same output).
//
// Two guards against thrashing, both configurable (EngineConfig):
//   - rank margin: the waiting request's priority must be at least the victim's rank + margin
//     (its base priority: aging orders the queue and protects a running sequence, it never
//     lets a waiting request displace one of the same priority);
//   - minimum run time: the victim has run at least min_run_ms since its (re)admission.
#pragma once

#include <cstdint>
#include <vector>

#include "sched/rank.h"

namespace ubatch::sched {

struct RunningView {
  RankKey key;           // the running sequence's rank
  double run_ms = 0;     // time since its (re)admission
  uint64_t request = 0;  // owning request: a request never displaces its own samples
};

// Index into `running` of the sequence a waiting request (priority, request id) may preempt:
// the lowest-ranked eligible one; -1 when none is, or margin <= 0 (priority preemption off).
int pick_priority_victim(const std::vector<RunningView>& running, int32_t waiting_priority, uint64_t waiting_request,
                         int32_t margin, double min_run_ms);

}  // namespace ubatch::sched
