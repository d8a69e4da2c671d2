#include "tools/generate.h"

#include <chrono>
#include <memory>

#include "sched/context_runner.h"
#include "sched/scheduler.h"

namespace ubatch::tools {

Generated generate(Context& ctx, const Tokenizer& tok, const sched::EngineConfig& config, sched::Request request,
                   const std::function<void(const sched::Event&, double ms)>& on_event) {
  Generated out;
  sched::ContextRunner runner(ctx, tok);
  sched::Scheduler sched(runner, config);
  if (std::optional<sched::SubmitError> e = sched.validate(request)) {
    out.error = e->message;
    return out;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
  auto stream = std::make_shared<sched::Stream>(1);
  if (std::optional<sched::SubmitError> e = sched.submit(1, std::move(request), stream)) {
    out.error = e->message;
    return out;
  }
  sched::Event ev;
  bool done = false;
  while (!done) {
    const bool work = sched.has_work();
    if (work) sched.step();
    bool any = false;
    while (stream->next(ev, std::chrono::milliseconds(0))) {
      any = true;
      on_event(ev, since());
      done = done || ev.kind == sched::Event::Kind::Done;
    }
    if (!work && !any && !done) break;  // nothing to run or read (cannot happen: Done ends every request)
  }
  out.wall_ms = since();
  out.metrics = sched.metrics();
  return out;
}

}  // namespace ubatch::tools
