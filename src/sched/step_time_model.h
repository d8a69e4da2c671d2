// The scheduler's measured step-time model: ms ≈ a + b·tokens + c·rows for one engine step,
// where tokens are the batch's tokens (decode, prefill and draft tokens alike) and rows the
// rows that want logits (each is sampled). It is the simulator's cost model (sim.h, with
// sequences counted as logits rows), fitted online: exponentially weighted least squares on
// relative error (each step divided by its measured time, as sim::fit_cost_model) over the
// steps the scheduler runs, with non-negative coefficients.
//
// A prior keeps the fit defined before the steps vary: three pseudo-steps at (1, 1), (16, 16)
// and (128, 1) tokens/rows timed by the prior, which is first rescaled so that it predicts the
// first measured step exactly (only the prior's *shape* a : b : c matters). While a server runs
// only single-token decodes, the slopes b and c stay the prior's; once steps of other sizes
// run, the measurements decide.
//
// Single-threaded (the engine thread).
#pragma once

#include <array>
#include <cstdint>

namespace ubatch::sched {

struct StepCost {
  double a_ms = 0;           // per step
  double b_ms_per_token = 0; // per batch token
  double c_ms_per_row = 0;   // per logits row
  double ms(double tokens, double rows) const { return a_ms + b_ms_per_token * tokens + c_ms_per_row * rows; }
};

class StepTimeModel {
 public:
  // forget: weight kept by older steps at each new one (0.98: about the last 50 steps);
  // prior_weight: weight of each of the three pseudo-steps.
  explicit StepTimeModel(const StepCost& prior, double forget = 0.98, double prior_weight = 0.25);

  void observe(int64_t tokens, int64_t rows, double ms);
  double predict(double tokens, double rows) const { return cost_.ms(tokens, rows); }
  const StepCost& cost() const { return cost_; }
  int64_t n_observed() const { return n_observed_; }

 private:
  void refit();

  StepCost prior_;
  double forget_, prior_weight_;
  std::array<std::array<double, 3>, 3> xtx_{};  // Σ w·x·xᵀ over measured steps (x = (1, tokens, rows) / ms)
  std::array<double, 3> xty_{};                 // Σ w·x·1
  double yty_ = 0;                              // Σ w
  StepCost cost_;
  int64_t n_observed_ = 0;
};

}  // namespace ubatch::sched
