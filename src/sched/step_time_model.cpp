#include "sched/step_time_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ubatch::sched {

StepTimeModel::StepTimeModel(const StepCost& shape, double forget, double prior_weight)
    : shape_(shape), forget_(forget), prior_weight_(prior_weight), cost_(shape) {
  // Every term of the shape must be positive (it is the scale of its coefficient's prior).
  shape_.a_ms = std::max(shape_.a_ms, 1e-6);
  shape_.b_ms_per_token = std::max(shape_.b_ms_per_token, 1e-6);
  shape_.c_ms_per_row = std::max(shape_.c_ms_per_row, 1e-6);
  cost_ = shape_;
}

void StepTimeModel::observe(int64_t tokens, int64_t rows, double ms) {
  if (!(ms > 0) || !std::isfinite(ms) || tokens <= 0) return;
  ++n_observed_;
  const double t = static_cast<double>(tokens), r = static_cast<double>(rows);
  // Relative error: the sample (x, y) = ((1, tokens, rows), ms) divided by ms.
  const std::array<double, 3> x = {1.0 / ms, t / ms, r / ms};
  for (auto& row : xtx_)
    for (double& v : row) v *= forget_;
  for (double& v : xty_) v *= forget_;
  yty_ *= forget_;
  scale_num_ *= forget_;
  scale_den_ *= forget_;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) xtx_[i][j] += x[i] * x[j];
    xty_[i] += x[i];
  }
  yty_ += 1.0;
  scale_num_ += ms / shape_.ms(t, r);
  scale_den_ += 1.0;
  refit();
}

// Minimizes Σ w(1 − x·β)² + Σ_k λ_k (β_k − β0_k)² with β >= 0, where β0 is the scaled shape
// and λ_k = prior_weight / β0_k². Every subset of free coefficients (the others 0) is solved
// and the feasible one with the least objective wins (3 coefficients: 7 small systems).
void StepTimeModel::refit() {
  const double s = scale_den_ > 0 ? scale_num_ / scale_den_ : 1.0;
  const std::array<double, 3> beta0 = {s * shape_.a_ms, s * shape_.b_ms_per_token, s * shape_.c_ms_per_row};
  std::array<std::array<double, 3>, 3> m = xtx_;
  std::array<double, 3> v = xty_;
  double yy = yty_;
  for (int k = 0; k < 3; ++k) {
    const double lambda = prior_weight_ / (beta0[k] * beta0[k]);
    m[k][k] += lambda;
    v[k] += lambda * beta0[k];
    yy += lambda * beta0[k] * beta0[k];
  }
  double best_obj = std::numeric_limits<double>::infinity();
  std::array<double, 3> best = beta0;
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
      if (!(std::fabs(a[i][i]) > 0)) {
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
    double obj = yy;  // = Σw + Σλβ0² − 2βᵀv + βᵀMβ
    for (int i = 0; i < 3; ++i) {
      obj -= 2 * beta[i] * v[i];
      for (int j = 0; j < 3; ++j) obj += beta[i] * m[i][j] * beta[j];
    }
    if (obj < best_obj) {
      best_obj = obj;
      best = beta;
    }
  }
  cost_ = StepCost{best[0], best[1], best[2]};
}

}  // namespace ubatch::sched
