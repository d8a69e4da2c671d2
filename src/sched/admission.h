// Deadline admission (docs/SCHEDULER.md, "Deadlines"): an estimate of the earliest a new
// request can have its first token, from the measured step time and the work ahead of it.
// A request with a strict deadline that falls before this estimate is refused at once: it
// could only end with nothing. Pure; the scheduler gathers the inputs.
//
// The estimate counts steps: the steps until a slot frees for the request (zero when one is
// free), then its own prompt in chunks of at most n_batch tokens. The slot wait is a lower
// bound: other requests' prefill is not counted, and a running sequence frees its slot as
// early as it could — at its next token unless it must run to max_tokens (end-of-generation
// ignored, no stop strings), or once its minimum run time is over when the request may preempt
// it. The prompt steps ignore prefix-cache hits.
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
  std::vector<int64_t> steps_to_free;  // per running sequence: fewest steps before its slot can be free
  bool group_running = false; // static/grouped: nothing joins before the running group ends
};

// Fewest steps before the request's first token (slot wait + prompt chunks).
int64_t steps_to_first_token(const AdmissionInputs& in);
// steps_to_first_token × step_ms.
double first_token_estimate_ms(const AdmissionInputs& in);

}  // namespace ubatch::sched
