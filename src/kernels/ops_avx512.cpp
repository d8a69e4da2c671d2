// AVX-512 versions of the per-row operations (see ops.cpp for the shared accuracy choices).
//
// The exponential is the same algorithm as ops_avx2.cpp's, operation for operation, so the
// element-wise functions give bit-identical results on both paths. Row tails use masked loads
// and stores through the same vector code (results never depend on an element's index).
// GCC 12 warns (-Wuninitialized, bug 105593) inside _mm512_castps512_ps256 and friends,
// whose headers use _mm256_undefined_*: the low halves are taken with
// _mm512_extractf32x8_ps(v, 0) instead.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace ubatch::kernels::avx512 {
namespace {

// e^x for 16 floats to ~1 ulp; see exp8 in ops_avx2.cpp for the method.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), _mm512_min_ps(_mm512_set1_ps(89.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i n1 = _mm512_srai_epi32(ni, 1);
  const __m512i n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 f1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 f2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  return _mm512_mul_ps(_mm512_mul_ps(p, f1), f2);
}

inline __m512 gelu16(__m512 v) {
  const __m512 v3 = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
  const __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f),
                                 _mm512_add_ps(v, _mm512_mul_ps(_mm512_set1_ps(0.044715f), v3)));
  const __m512 e = exp16(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u));
  return _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

inline __m512 silu16(__m512 v) {
  const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), v));
  return _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// Horizontal reductions, in a fixed order (upper half onto lower half, repeatedly).
inline double hsum8d(__m512d v) {
  const __m256d hi = _mm256_castps_pd(_mm512_extractf32x8_ps(_mm512_castpd_ps(v), 1));
  const __m256d lo = _mm256_castps_pd(_mm512_extractf32x8_ps(_mm512_castpd_ps(v), 0));
  const __m256d s4 = _mm256_add_pd(lo, hi);
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}
inline float hmax16(__m512 v) {
  const __m256 m8 = _mm256_max_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  return _mm_cvtss_f32(m4);
}

inline __mmask16 tail_mask(int64_t rest) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(rest)) - 1u);
}

inline void add_to_double(__m512 v, __m512d& lo, __m512d& hi) {
  lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 0)));
  hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
}

template <typename F>
inline void map16(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace

// x[i] = e^(x[i] − shift) for i < n; returns Σ x[i] (summed in double). Shared with
// attention_avx512.cpp (its softmax over chunks of scores).
double exp_shift_sum(float* x, int64_t n, float shift);

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  __m512d acc0 = _mm512_setzero_pd();
  __m512d acc1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512d lo = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 0));
    const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
    acc0 = _mm512_fmadd_pd(lo, lo, acc0);  // products of floats are exact in double
    acc1 = _mm512_fmadd_pd(hi, hi, acc1);
  }
  double sum = hsum8d(_mm512_add_pd(acc0, acc1));
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const double mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
  const float s = static_cast<float>(1.0 / std::sqrt(mean + static_cast<double>(eps)));
  const __m512 vs = _mm512_set1_ps(s);
  i = 0;
  if (w) {
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vs);
      _mm512_storeu_ps(y + i, _mm512_mul_ps(v, _mm512_loadu_ps(w + i)));
    }
    if (i < n) {
      const __mmask16 m = tail_mask(n - i);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
      _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
    }
  } else {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), vs));
    if (i < n) {
      const __mmask16 m = tail_mask(n - i);
      _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs));
    }
  }
}

double exp_shift_sum(float* x, int64_t n, float shift) {
  const __m512 vs = _mm512_set1_ps(shift);
  __m512d s0 = _mm512_setzero_pd();
  __m512d s1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs));
    _mm512_storeu_ps(x + i, e);
    add_to_double(e, s0, s1);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e =
        _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(vs, m, x + i), vs)));
    _mm512_mask_storeu_ps(x + i, m, e);
    add_to_double(e, s0, s1);
  }
  return hsum8d(_mm512_add_pd(s0, s1));
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  __m512 vm = _mm512_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
  if (i < n) vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(vm, tail_mask(n - i), x + i));
  const float mx = hmax16(vm);

  const double sum = exp_shift_sum(x, n, mx);

  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / sum));
  for (i = 0; i + 16 <= n; i += 16)
    _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
}

void gelu_tanh(const float* x, float* y, int64_t n) { map16(x, y, n, gelu16); }

void silu(const float* x, float* y, int64_t n) { map16(x, y, n, silu16); }

}  // namespace ubatch::kernels::avx512
