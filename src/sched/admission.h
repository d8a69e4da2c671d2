// Deadline admission (docs/SCHEDULER.md, "Deadlines"): an estimate of the earliest a new
// request can have its first token, from the measured step time and the work ahead of it.
// A request with a strict deadline that falls before this estimate is refused at once: it
// could only end with nothing. Pure; the scheduler gathers the inputs.
//
// The estimate counts steps and is a lower bound on them: the steps until a slot frees for
// the request (zero when one is free or it may preempt), then its own prompt in chunks of at
// most n_batch tokens; other requests' prefill, prefix-cache hits and early ends are treated
// optimistically (a running sequence that may stop at any token could free its slot next step).
#pragma once

#include <cstdint>
#include <vector>

namespace ubatch::sched {

struct AdmissionInputs {
  double step_ms = 0;         // measured mean step time; 0 (nothing measured yet): never refuse
  int32_t n_batch = 1;        // token budget per step
  int32_t n_prompt = 1;       // the request's prompt tokens
  int32_t free_slots = 0;     // n_parallel − running sequences
  int32_t ahead = 0;          // waiting sequences that rank above the request
  int32_t preemptible = 0;    // running sequences it may displace (priority rule)
  std::vector<int64_t> steps_to_end;  // per other running sequence: fewest steps before it can end
  bool group_running = false; // static/grouped: nothing joins before the running group ends
};

// Fewest steps before the request's first token (slot wait + prompt chunks).
int64_t steps_to_first_token(const AdmissionInputs& in);
// steps_to_first_token × step_ms.
double first_token_estimate_ms(const AdmissionInputs& in);

}  // namespace ubatch::sched
