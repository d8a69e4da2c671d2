// The float-weight dot product of matmul (F32, F16 and BF16 weights, f32 activations),
// written once over the 16-lane vocabulary of simd16.h: the reference (matmul.cpp, scalar
// vocabulary) and the AVX2 / AVX-512 rows_float kernels instantiate it, so every level gives
// the same bits.
//
//   acc = 16 lanes of +0
//   for each slice k of 16 inputs (the last one zero-padded): acc = fma(w[16k..], x[16k..], acc)
//   y[t][o] = the fixed tree of simd16.h over acc
//
// F16/BF16 weights are widened to f32 first (exact). TT tokens share each weight slice; each
// keeps its own accumulator, so y[t][o] does not depend on TT or on the other tokens.
#pragma once

#include <cstdint>

#include "kernels/simd16.h"

namespace ubatch::kernels::simd16 {

// y[t * ystride] = w · x_t for t < TT; w: [n_in] f32, x: [TT][n_in] f32.
template <class V, int TT>
inline void float_dot_tile(const float* w, int64_t n_in, const float* x, float* y,
                           int64_t ystride) {
  using F = typename V::F;
  F acc[TT];
  for (int t = 0; t < TT; ++t) acc[t] = V::zero();
  int64_t i = 0;
  for (; i + 16 <= n_in; i += 16) {
    const F wv = V::load(w + i);
    for (int t = 0; t < TT; ++t) acc[t] = V::fma(wv, V::load(x + t * n_in + i), acc[t]);
  }
  if (i < n_in) {
    const int n = static_cast<int>(n_in - i);
    const F wv = V::load_n(w + i, n);
    for (int t = 0; t < TT; ++t) acc[t] = V::fma(wv, V::load_n(x + t * n_in + i, n), acc[t]);
  }
  for (int t = 0; t < TT; ++t) y[t * ystride] = V::hsum(acc[t]);
}

// float_dot_tile for tt in [1, TMAX] tokens.
template <class V, int TMAX>
inline void float_dot_tile_any(int tt, const float* w, int64_t n_in, const float* x, float* y,
                               int64_t ystride) {
  if constexpr (TMAX > 1) {
    if (tt < TMAX) return float_dot_tile_any<V, TMAX - 1>(tt, w, n_in, x, y, ystride);
  }
  float_dot_tile<V, TMAX>(w, n_in, x, y, ystride);
}

}  // namespace ubatch::kernels::simd16
