// The order of sequences (docs/SCHEDULER.md, "Rank"): which decode first, which are preempted
// first. A sequence's rank is its request's priority plus the aging levels it earned while
// waiting (queued or preempted); it is fixed while the sequence runs, so a request that
// waited its way up keeps the place it earned.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace ubatch::sched {

struct RankKey {
  double rank = 0;                                                // priority + aging levels
  double deadline_abs_ms = std::numeric_limits<double>::infinity();  // on the runner clock; +inf: none
  double arrival_ms = 0;
  int32_t index = 0;                                              // sample index within the request
};

// True when a ranks above b: higher rank, then earlier deadline, then earlier arrival, then
// lower sample index.
inline bool ranks_above(const RankKey& a, const RankKey& b) {
  if (a.rank != b.rank) return a.rank > b.rank;
  if (a.deadline_abs_ms != b.deadline_abs_ms) return a.deadline_abs_ms < b.deadline_abs_ms;
  if (a.arrival_ms != b.arrival_ms) return a.arrival_ms < b.arrival_ms;
  return a.index < b.index;
}

// Aging: every aging_ms of waiting is one level, floor(waited_ms / aging_ms); none when
// aging_ms <= 0.
inline double aging_levels(double waited_ms, double aging_ms) {
  return aging_ms > 0 ? std::floor(std::max(0.0, waited_ms) / aging_ms) : 0.0;
}

}  // namespace ubatch::sched
