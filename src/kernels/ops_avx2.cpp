// AVX2 + FMA versions of the per-row operations (see ops.cpp for the shared accuracy choices).
//
// Element-wise functions process the tail of a row through the same vector code (via a
// zero-padded 8-float buffer), so each element's result depends on its value only, never on
// its index: an op applied to [n_tokens, n] at once is batch invariant bit for bit.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ubatch::kernels::avx2 {
namespace {

// e^x for 8 floats, accurate to ~1 ulp over the whole float range: n = round(x·log2 e),
// r = x − n·ln2 (Cody–Waite, two constants), e^r by its degree-7 Taylor polynomial
// (truncation < 6e-9 relative for |r| <= ln2/2), times 2^n applied as two exact power-of-two
// factors so that n = 128 (results near FLT_MAX) and subnormal results are handled.
// Overflow gives +inf, underflow 0 (or a subnormal), NaN stays NaN.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-104.0f), _mm256_min_ps(_mm256_set1_ps(89.0f), x));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
}

inline __m256 gelu8(__m256 v) {
  const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
  const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                 _mm256_add_ps(v, _mm256_mul_ps(_mm256_set1_ps(0.044715f), v3)));
  const __m256 e = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
  return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

inline __m256 silu8(__m256 v) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
  return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// Adds the 8 floats of v to the two 4-double accumulators.
inline void add_to_double(__m256 v, __m256d& lo, __m256d& hi) {
  lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

inline double hsum(__m256d v) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

template <typename F>
inline void map8(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const size_t rest = static_cast<size_t>(n - i) * sizeof(float);
    alignas(32) float buf[8] = {};
    std::memcpy(buf, x + i, rest);
    _mm256_store_ps(buf, f(_mm256_load_ps(buf)));
    std::memcpy(y + i, buf, rest);
  }
}

}  // namespace

// x[i] = e^(x[i] − shift) for i < n; returns Σ x[i] (summed in double). Shared with
// attention_avx2.cpp (its softmax over chunks of scores).
double exp_shift_sum(float* x, int64_t n, float shift);

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  __m256d acc0 = _mm256_setzero_pd();
  __m256d acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    acc0 = _mm256_fmadd_pd(lo, lo, acc0);  // products of floats are exact in double
    acc1 = _mm256_fmadd_pd(hi, hi, acc1);
  }
  double sum = hsum(_mm256_add_pd(acc0, acc1));
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const double mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
  const float s = static_cast<float>(1.0 / std::sqrt(mean + static_cast<double>(eps)));
  const __m256 vs = _mm256_set1_ps(s);
  i = 0;
  if (w) {
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
      _mm256_storeu_ps(y + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
    }
    for (; i < n; ++i) y[i] = (x[i] * s) * w[i];
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; ++i) y[i] = x[i] * s;
  }
}

double exp_shift_sum(float* x, int64_t n, float shift) {
  const __m256 vs = _mm256_set1_ps(shift);
  __m256d s0 = _mm256_setzero_pd();
  __m256d s1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
    _mm256_storeu_ps(x + i, e);
    add_to_double(e, s0, s1);
  }
  double sum = hsum(_mm256_add_pd(s0, s1));
  if (i < n) {
    const auto rest = static_cast<size_t>(n - i);
    alignas(32) float buf[8];
    for (size_t j = 0; j < 8; ++j) buf[j] = j < rest ? x[i + static_cast<int64_t>(j)] : shift;
    _mm256_store_ps(buf, exp8(_mm256_sub_ps(_mm256_load_ps(buf), vs)));
    for (size_t j = 0; j < rest; ++j) {
      x[i + static_cast<int64_t>(j)] = buf[j];
      sum += buf[j];
    }
  }
  return sum;
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  int64_t i = 0;
  float mx = x[0];
  if (n >= 8) {
    __m256 vm = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    mx = hmax(vm);
  }
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;

  const double sum = exp_shift_sum(x, n, mx);

  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
  i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  const float inv_s = _mm256_cvtss_f32(inv);
  for (; i < n; ++i) x[i] *= inv_s;
}

void gelu_tanh(const float* x, float* y, int64_t n) { map8(x, y, n, gelu8); }

void silu(const float* x, float* y, int64_t n) { map8(x, y, n, silu8); }

}  // namespace ubatch::kernels::avx2
