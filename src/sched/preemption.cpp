#include "sched/preemption.h"

namespace ubatch::sched {

int pick_priority_victim(const std::vector<RunningView>& running, int32_t waiting_priority, uint64_t waiting_request,
                         int32_t margin, double min_run_ms) {
  if (margin <= 0) return -1;
  int victim = -1;
  for (size_t i = 0; i < running.size(); ++i) {
    const RunningView& r = running[i];
    if (r.request == waiting_request) continue;
    if (static_cast<double>(waiting_priority) < r.key.rank + margin) continue;
    if (r.run_ms < min_run_ms) continue;
    if (victim < 0 || ranks_above(running[static_cast<size_t>(victim)].key, r.key)) victim = static_cast<int>(i);
  }
  return victim;
}

}  // namespace ubatch::sched
