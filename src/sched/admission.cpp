#include "sched/admission.h"

#include <algorithm>

namespace ubatch::sched {

int64_t steps_to_first_token(const AdmissionInputs& in) {
  std::vector<int64_t> ends = in.steps_to_free;
  std::sort(ends.begin(), ends.end());
  int64_t slot_steps = 0;
  if (in.group_running) {
    slot_steps = ends.empty() ? 0 : ends.back();  // the whole group must end first
  } else {
    // The request needs the (ahead + 1)-th slot: free slots first, then the running
    // sequences' slots in the order they can be free.
    const int64_t need = static_cast<int64_t>(in.ahead) + 1 - in.free_slots;
    if (need > 0 && !ends.empty()) slot_steps = ends[static_cast<size_t>(std::min<int64_t>(need, ends.size()) - 1)];
  }
  const int64_t n_batch = std::max(1, in.n_batch);
  const int64_t prompt_steps = std::max<int64_t>(1, (std::max(1, in.n_prompt) + n_batch - 1) / n_batch);
  return slot_steps + prompt_steps;
}

double first_token_estimate_ms(const AdmissionInputs& in) {
  return in.step_ms > 0 ? static_cast<double>(steps_to_first_token(in)) * in.step_ms : 0.0;
}

}  // namespace ubatch::sched
