// The per-row operations of ops.h written once over the 16-lane vocabulary (simd16.h);
// ops.cpp (scalar, the reference), ops_avx2.cpp and ops_avx512.cpp instantiate them, so every
// level computes the same bits. Also the exponential and tanh that attention_inl.h uses.
//
// Row layout: a row of n elements is read as 16-lane slices x[16k .. 16k+15]; the last slice
// is padded (zeros, or the neutral element of a reduction). A reduction keeps one accumulator
// lane per position i mod 16, adds the slices in order, and ends with the fixed tree of the
// vocabulary (lane i + lane i+8, then +4, +2, +1). Element-wise results depend on the element
// only, never on its index or the row length.
//
// Accuracy:
// - exp: n = round(x·log2 e), r = x − n·ln2 (Cody–Waite, two constants, fused), e^r by its
//   degree-7 Taylor polynomial in Horner form with fma (truncation < 6e-9 relative for
//   |r| <= ln2/2), times 2^n applied as two exact power-of-two factors so that n = 128 (results
//   near FLT_MAX) and subnormal results come out right. About 1 ulp over the float range;
//   x is clamped to [-104, 89] first (e^89 > FLT_MAX: +inf; e^-104 rounds to 0), NaN stays NaN.
// - tanh(x) = m / (m + 2), m = e^(2x) − 1; for |2x| < 1/4 m comes from the series of e^t − 1
//   (no cancellation), otherwise from exp; x clamped to [-9, 9] (tanh = ±1 in float beyond).
//   A few ulps.
// - rms_norm sums x² in double lanes (products of floats are exact in double) and takes the
//   row's scale 1/sqrt(mean + eps) in double, rounded once to float.
// - softmax sums the exponentials in double lanes.
// - gelu_tanh uses 0.5·(1 + tanh(u)) = 1 / (1 + e^(−2u)): gelu(x) = x / (1 + e^(−2u)),
//   u = √(2/π)(x + 0.044715x³) — the tanh form without its cancellation for negative x.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/simd16.h"

namespace ubatch::kernels::simd16 {

template <class V>
inline typename V::F exp(typename V::F x) {
  using F = typename V::F;
  x = V::max(V::set1(-104.0f), V::min(V::set1(89.0f), x));
  const F n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  F r = V::fnma(n, V::set1(0.693359375f), x);
  r = V::fnma(n, V::set1(-2.12194440e-4f), r);
  F p = V::set1(1.0f / 5040.0f);
  p = V::fma(p, r, V::set1(1.0f / 720.0f));
  p = V::fma(p, r, V::set1(1.0f / 120.0f));
  p = V::fma(p, r, V::set1(1.0f / 24.0f));
  p = V::fma(p, r, V::set1(1.0f / 6.0f));
  p = V::fma(p, r, V::set1(0.5f));
  p = V::fma(p, r, V::set1(1.0f));
  p = V::fma(p, r, V::set1(1.0f));
  const F n1 = V::floor(V::mul(n, V::set1(0.5f)));  // n in [-150, 128]: n1, n2 in [-75, 64]
  const F n2 = V::sub(n, n1);
  return V::mul(V::mul(p, V::exp2i(n1)), V::exp2i(n2));
}

// e^x of one float, by the same vector code (lane 0).
template <class V>
inline float exp1(float x) {
  return V::lane0(exp<V>(V::set1(x)));
}

template <class V>
inline typename V::F tanh(typename V::F x) {
  using F = typename V::F;
  x = V::max(V::set1(-9.0f), V::min(V::set1(9.0f), x));
  const F t = V::add(x, x);
  F s = V::set1(1.0f / 5040.0f);  // e^t − 1 = t·(1 + t/2 + t²/6 + …), |t| < 1/4
  s = V::fma(s, t, V::set1(1.0f / 720.0f));
  s = V::fma(s, t, V::set1(1.0f / 120.0f));
  s = V::fma(s, t, V::set1(1.0f / 24.0f));
  s = V::fma(s, t, V::set1(1.0f / 6.0f));
  s = V::fma(s, t, V::set1(0.5f));
  s = V::fma(s, t, V::set1(1.0f));
  s = V::mul(s, t);
  const F big = V::sub(exp<V>(t), V::set1(1.0f));
  const F m = V::select(V::lt(V::abs(t), V::set1(0.25f)), s, big);
  return V::div(m, V::add(m, V::set1(2.0f)));
}

template <class V>
inline typename V::F gelu(typename V::F v) {
  using F = typename V::F;
  const F v3 = V::mul(V::mul(v, v), v);
  const F u = V::mul(V::set1(0.7978845608028654f), V::add(v, V::mul(V::set1(0.044715f), v3)));
  const F e = exp<V>(V::mul(V::set1(-2.0f), u));
  return V::div(v, V::add(V::set1(1.0f), e));
}

template <class V>
inline typename V::F silu(typename V::F v) {
  const typename V::F e = exp<V>(V::sub(V::zero(), v));
  return V::div(v, V::add(V::set1(1.0f), e));
}

// y[i] = f(x[i]) slice by slice; the last slice is padded with zeros (its extra lanes are
// computed and dropped).
template <class V, class Fn>
inline void map(const float* x, float* y, int64_t n, Fn f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) V::store(y + i, f(V::load(x + i)));
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    V::store_n(y + i, f(V::load_n(x + i, rest)), rest);
  }
}

template <class V>
void gelu_tanh_row(const float* x, float* y, int64_t n) {
  map<V>(x, y, n, [](typename V::F v) { return gelu<V>(v); });
}

// Soft-capping (Gemma 2): y = cap · tanh(x / cap), with the tanh above.
template <class V>
void softcap_row(const float* x, float* y, int64_t n, float cap) {
  const typename V::F c = V::set1(cap), inv = V::set1(1.0f / cap);
  map<V>(x, y, n, [&](typename V::F v) { return V::mul(c, tanh<V>(V::mul(v, inv))); });
}

template <class V>
void silu_row(const float* x, float* y, int64_t n) {
  map<V>(x, y, n, [](typename V::F v) { return silu<V>(v); });
}

template <class V>
void rms_norm_row(const float* x, const float* w, float* y, int64_t n, float eps) {
  typename V::D acc = V::dzero();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) V::dadd_sq(acc, V::load(x + i));
  if (i < n) V::dadd_sq(acc, V::load_n(x + i, static_cast<int>(n - i)));
  const double sum = V::dhsum(acc);
  const double mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
  const float s = static_cast<float>(1.0 / std::sqrt(mean + static_cast<double>(eps)));
  const typename V::F vs = V::set1(s);
  // y = (x · s) · w, element by element.
  for (i = 0; i + 16 <= n; i += 16) {
    typename V::F v = V::mul(V::load(x + i), vs);
    if (w) v = V::mul(v, V::load(w + i));
    V::store(y + i, v);
  }
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    typename V::F v = V::mul(V::load_n(x + i, rest), vs);
    if (w) v = V::mul(v, V::load_n(w + i, rest));
    V::store_n(y + i, v, rest);
  }
}

// max over x[0, n) (n >= 1), lanes padded with -inf.
template <class V>
inline float row_max(const float* x, int64_t n) {
  typename V::F m = V::set1(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = V::max(m, V::load(x + i));
  if (i < n)
    m = V::max(m, V::load_n(x + i, static_cast<int>(n - i), -std::numeric_limits<float>::infinity()));
  return V::hmax(m);
}

template <class V>
void softmax_row(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = row_max<V>(x, n);
  const typename V::F vm = V::set1(mx);
  typename V::D acc = V::dzero();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const typename V::F e = exp<V>(V::sub(V::load(x + i), vm));
    V::store(x + i, e);
    V::dadd(acc, e);
  }
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    // Padding lanes hold -inf: e^-inf = 0 adds nothing.
    const typename V::F e =
        exp<V>(V::sub(V::load_n(x + i, rest, -std::numeric_limits<float>::infinity()), vm));
    V::store_n(x + i, e, rest);
    V::dadd(acc, e);
  }
  const typename V::F inv = V::set1(static_cast<float>(1.0 / V::dhsum(acc)));
  for (i = 0; i + 16 <= n; i += 16) V::store(x + i, V::mul(V::load(x + i), inv));
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    V::store_n(x + i, V::mul(V::load_n(x + i, rest), inv), rest);
  }
}

}  // namespace ubatch::kernels::simd16
