// One request through the scheduler on the calling thread, for the single-process tools
// (`ubatch run`, `ubatch batched`): the same planning, sampling, speculative decoding and
// streaming as `ubatch serve`, without the engine thread.
#pragma once

#include <functional>

#include "context/context.h"
#include "sched/engine.h"
#include "sched/metrics.h"
#include "sched/request.h"
#include "tokenizer/tokenizer.h"

namespace ubatch::tools {

struct Generated {
  sched::MetricsSnapshot metrics;
  double wall_ms = 0;        // submit → Done
  std::string error;         // refused at submit (validation); empty on success
};

// Runs `request` to completion with `config` (the caller sets n_parallel, n_batch and the
// speculation fields); on_event sees every event of its stream as it is produced, with the
// milliseconds since submit.
Generated generate(Context& ctx, const Tokenizer& tok, const sched::EngineConfig& config, sched::Request request,
                   const std::function<void(const sched::Event&, double ms)>& on_event);

}  // namespace ubatch::tools
