#include "kernels/recurrent.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ubatch::kernels {

void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size) {
  const int n_prev = k_size - 1;
  for (int64_t c = 0; c < n_ch; ++c) {
    const float* wc = w + c * k_size;
    const float cur = in[c];
    float acc = 0.0f;
    for (int j = 0; j < n_prev; ++j) acc += wc[j] * state[int64_t{j} * n_ch + c];
    acc += wc[n_prev] * cur;
    // Shift the window: row j takes row j + 1, the last row takes this input.
    for (int j = 0; j + 1 < n_prev; ++j) state[int64_t{j} * n_ch + c] = state[int64_t{j + 1} * n_ch + c];
    if (n_prev > 0) state[int64_t{n_prev - 1} * n_ch + c] = cur;
    out[c] = acc;
  }
}

void l2_normalize(float* x, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float norm = static_cast<float>(std::sqrt(ss));
  const float inv = 1.0f / std::max(norm, eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void delta_rule_step(float* S, const float* q, const float* k, const float* v, float decay, float beta,
                     float* o, int d_k, int d_v) {
  // u_j = β (v_j − Σ_i decay·S[i][j] k_i); the decay is applied while reading S once.
  float* u = o;  // o is written last; use it as the [d_v] accumulator of Sᵀk
  for (int j = 0; j < d_v; ++j) u[j] = 0.0f;
  for (int i = 0; i < d_k; ++i) {
    float* row = S + static_cast<int64_t>(i) * d_v;
    const float ki = k[i];
    for (int j = 0; j < d_v; ++j) {
      row[j] *= decay;
      u[j] += row[j] * ki;
    }
  }
  for (int j = 0; j < d_v; ++j) u[j] = beta * (v[j] - u[j]);
  // S += k uᵀ, and o = Sᵀq over the updated rows in the same pass. u lives in o, so keep a copy.
  float ubuf[512];
  float* uc = d_v <= 512 ? ubuf : nullptr;
  float* heap = nullptr;
  if (!uc) uc = heap = new float[static_cast<size_t>(d_v)];
  std::memcpy(uc, u, sizeof(float) * static_cast<size_t>(d_v));
  for (int j = 0; j < d_v; ++j) o[j] = 0.0f;
  for (int i = 0; i < d_k; ++i) {
    float* row = S + static_cast<int64_t>(i) * d_v;
    const float ki = k[i], qi = q[i];
    for (int j = 0; j < d_v; ++j) {
      row[j] += ki * uc[j];
      o[j] += row[j] * qi;
    }
  }
  delete[] heap;
}

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace ubatch::kernels
