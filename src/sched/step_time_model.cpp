#include "sched/step_time_model.h"

#include <cmath>
#include <limits>

namespace ubatch::sched {

namespace {
constexpr std::array<std::array<double, 2>, 3> kPriorPoints = {{{1, 1}, {16, 16}, {128, 1}}};
}

StepTimeModel::StepTimeModel(const StepCost& prior, double forget, double prior_weight)
    : prior_(prior), forget_(forget), prior_weight_(prior_weight), cost_(prior) {}

void StepTimeModel::observe(int64_t tokens, int64_t rows, double ms) {
  if (!(ms > 0) || !std::isfinite(ms) || tokens <= 0) return;
  if (n_observed_ == 0) {
    // Rescale the prior's shape to this machine's first step.
    const double p = prior_.ms(static_cast<double>(tokens), static_cast<double>(rows));
    if (p > 0) {
      const double s = ms / p;
      prior_.a_ms *= s;
      prior_.b_ms_per_token *= s;
      prior_.c_ms_per_row *= s;
    }
  }
  ++n_observed_;
  // Relative error: the sample (x, y) = ((1, tokens, rows), ms) divided by ms.
  const std::array<double, 3> x = {1.0 / ms, static_cast<double>(tokens) / ms, static_cast<double>(rows) / ms};
  for (auto& row : xtx_)
    for (double& v : row) v *= forget_;
  for (double& v : xty_) v *= forget_;
  yty_ *= forget_;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) xtx_[i][j] += x[i] * x[j];
    xty_[i] += x[i];
  }
  yty_ += 1.0;
  refit();
}

// Least squares over the measured and the prior's pseudo-steps with coefficients >= 0: every
// subset of free coefficients (the others 0) is solved, and the feasible one with the least
// residual wins (3 coefficients: 7 small systems).
void StepTimeModel::refit() {
  std::array<std::array<double, 3>, 3> m = xtx_;
  std::array<double, 3> v = xty_;
  double yy = yty_;
  for (const auto& pt : kPriorPoints) {
    const double y = prior_.ms(pt[0], pt[1]);
    if (!(y > 0)) continue;
    const std::array<double, 3> x = {1.0 / y, pt[0] / y, pt[1] / y};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) m[i][j] += prior_weight_ * x[i] * x[j];
      v[i] += prior_weight_ * x[i];
    }
    yy += prior_weight_;
  }
  double best_res = std::numeric_limits<double>::infinity();
  std::array<double, 3> best = {prior_.a_ms, prior_.b_ms_per_token, prior_.c_ms_per_row};
  for (int mask = 1; mask < 8; ++mask) {
    int idx[3];
    int n = 0;
    for (int i = 0; i < 3; ++i)
      if (mask & (1 << i)) idx[n++] = i;
    // Solve the n×n subsystem by Gauss-Jordan with partial pivoting.
    double a[3][4];
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < n; ++c) a[r][c] = m[idx[r]][idx[c]];
      a[r][n] = v[idx[r]];
    }
    bool singular = false;
    for (int i = 0; i < n && !singular; ++i) {
      int p = i;
      for (int r = i + 1; r < n; ++r)
        if (std::fabs(a[r][i]) > std::fabs(a[p][i])) p = r;
      for (int c = 0; c <= n; ++c) std::swap(a[i][c], a[p][c]);
      if (std::fabs(a[i][i]) < 1e-300) {
        singular = true;
        break;
      }
      for (int r = 0; r < n; ++r) {
        if (r == i) continue;
        const double f = a[r][i] / a[i][i];
        for (int c = 0; c <= n; ++c) a[r][c] -= f * a[i][c];
      }
    }
    if (singular) continue;
    std::array<double, 3> beta = {0, 0, 0};
    bool feasible = true;
    for (int r = 0; r < n; ++r) {
      beta[idx[r]] = a[r][n] / a[r][r];
      feasible = feasible && beta[idx[r]] >= 0 && std::isfinite(beta[idx[r]]);
    }
    if (!feasible) continue;
    // Residual Σw(y − xβ)² = yy − 2βᵀv + βᵀMβ (y = 1 after scaling).
    double res = yy;
    for (int i = 0; i < 3; ++i) {
      res -= 2 * beta[i] * v[i];
      for (int j = 0; j < 3; ++j) res += beta[i] * m[i][j] * beta[j];
    }
    if (res < best_res) {
      best_res = res;
      best = beta;
    }
  }
  cost_ = StepCost{best[0], best[1], best[2]};
}

}  // namespace ubatch::sched
