// The scheduler's measured step-time model: ms ≈ a + b·tokens + c·rows for one engine step,
// where tokens are the batch's tokens (decode, prefill and draft tokens alike) and rows the
// rows that want logits (each is sampled). It is the simulator's cost model (sim.h, with
// sequences counted as logits rows), fitted online: exponentially weighted least squares on
// relative error (each step divided by its measured time, as sim::fit_cost_model) over the
// steps the scheduler runs, with non-negative coefficients.
//
// A prior keeps the fit defined while the steps do not vary enough to tell the three terms
// apart (a server that has only run one-token decodes and prefills cannot tell a logits row
// from the per-step cost): a ridge penalty pulls each coefficient towards the prior's, with
// the prior's own size as its scale (about "known to within 100%"). Only the prior's shape
// a : b : c is given; its scale follows the measured steps (a running mean of measured /
// predicted-by-the-shape). Where the steps decide a direction, the measurements win.
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
  // shape: the prior's a : b : c (each > 0; only ratios matter). forget: weight kept by older
  // steps at each new one (0.98: about the last 50 steps); prior_weight: the ridge strength,
  // in steps.
  explicit StepTimeModel(const StepCost& shape, double forget = 0.98, double prior_weight = 0.02);

  void observe(int64_t tokens, int64_t rows, double ms);
  double predict(double tokens, double rows) const { return cost_.ms(tokens, rows); }
  // The fitted coefficients (before any step: the shape itself).
  const StepCost& cost() const { return cost_; }
  int64_t n_observed() const { return n_observed_; }

 private:
  void refit();

  StepCost shape_;
  double forget_, prior_weight_;
  std::array<std::array<double, 3>, 3> xtx_{};  // Σ w·x·xᵀ over measured steps (x = (1, tokens, rows) / ms)
  std::array<double, 3> xty_{};                 // Σ w·x
  double yty_ = 0;                              // Σ w
  double scale_num_ = 0, scale_den_ = 0;        // Σ w·ms/shape(x), Σ w: the prior's scale
  StepCost cost_;
  int64_t n_observed_ = 0;
};

}  // namespace ubatch::sched
