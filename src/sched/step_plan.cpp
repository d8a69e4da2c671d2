#include "sched/step_plan.h"

namespace ubatch::sched {

StepResult run_step(Runner& runner, const StepPlan& plan) {
  StepResult result;
  result.rows = plan.rows;
  result.start_ms = runner.now_ms();
  result.decode = runner.run(plan.batch, result.rows);
  result.end_ms = runner.now_ms();
  return result;
}

}  // namespace ubatch::sched
