// The gated delta rule's step written once over the 16-lane vocabulary (simd16.h);
// recurrent.cpp (scalar, the reference), recurrent_avx2.cpp, recurrent_avx512.cpp and
// recurrent_neon.cpp instantiate it, so every level computes the same bits.
//
// The state S [d_k, d_v] is processed in strips of 16 value columns (the last one padded by
// load_n/store_n): a column of S evolves on its own (u_j, the update of column j and o_j read
// column j only), so a strip runs all the tokens before the next strip, and a column's
// arithmetic — the decay, Sᵀk accumulated over i in order with fma, the update and Sᵀq with fma
// — is the same whatever the vector width. Strips are taken two at a time (more independent fma
// chains in flight, 2 × 16 columns × d_k rows in L1); that changes which columns share a loop,
// not any lane's arithmetic.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/recurrent.h"
#include "kernels/simd16.h"

namespace ubatch::kernels::simd16 {

// Sums over the d_k rows keep kParts partial sums (row i goes to part i mod kParts), added as
// (p0 + p1) + (p2 + p3) at the end: independent fma chains, the same order on every level.
constexpr int kDeltaParts = 4;

template <class V>
inline typename V::F delta_rule_combine(const typename V::F* p) {
  return V::add(V::add(p[0], p[1]), V::add(p[2], p[3]));
}

template <class V, int M>
inline void delta_rule_strips(const DeltaRuleArgs& a, int j0) {
  using F = typename V::F;
  constexpr int P = kDeltaParts;
  const int d_k = a.d_k, d_v = a.d_v;
  int n[M];
  for (int m = 0; m < M; ++m) n[m] = std::min(kLanes, d_v - (j0 + m * kLanes));
  for (int r = 0; r < a.n_tokens; ++r) {
    const int64_t row_index = a.rows ? a.rows[r] : r;
    const float* q = a.q + row_index * a.qk_stride;
    const float* k = a.k + row_index * a.qk_stride;
    const float* v = a.v + row_index * a.v_stride;
    float* o = a.o + row_index * a.o_stride;
    const F vdecay = V::set1(a.decay[row_index * a.gate_stride]);
    // Pass 1 (reads S): u = β (v − decay · Sᵀk).
    F part[M][P];
    for (int m = 0; m < M; ++m)
      for (int p = 0; p < P; ++p) part[m][p] = V::zero();
    auto pass1 = [&](int i, int p) {
      const float* srow = a.S + static_cast<int64_t>(i) * d_v + j0;
      const F ki = V::set1(k[i]);
      for (int m = 0; m < M; ++m) part[m][p] = V::fma(V::load_n(srow + m * kLanes, n[m]), ki, part[m][p]);
    };
    int i = 0;
    for (; i + P <= d_k; i += P)
      for (int p = 0; p < P; ++p) pass1(i + p, p);  // p is i mod P
    for (; i < d_k; ++i) pass1(i, i % P);
    const F vbeta = V::set1(a.beta[row_index * a.gate_stride]);
    F u[M];
    for (int m = 0; m < M; ++m)
      u[m] = V::mul(vbeta, V::sub(V::load_n(v + j0 + m * kLanes, n[m]), V::mul(vdecay, delta_rule_combine<V>(part[m]))));
    // Pass 2: S ← decay · S + k uᵀ and o = Sᵀq over the updated rows.
    for (int m = 0; m < M; ++m)
      for (int p = 0; p < P; ++p) part[m][p] = V::zero();
    float* snap = a.snapshots ? a.snapshots[r] : nullptr;
    auto pass2 = [&](int i, int p) {
      float* srow = a.S + static_cast<int64_t>(i) * d_v + j0;
      const F ki = V::set1(k[i]), qi = V::set1(q[i]);
      for (int m = 0; m < M; ++m) {
        const F sv = V::fma(ki, u[m], V::mul(V::load_n(srow + m * kLanes, n[m]), vdecay));
        V::store_n(srow + m * kLanes, sv, n[m]);
        if (snap) V::store_n(snap + static_cast<int64_t>(i) * d_v + j0 + m * kLanes, sv, n[m]);
        part[m][p] = V::fma(sv, qi, part[m][p]);
      }
    };
    for (i = 0; i + P <= d_k; i += P)
      for (int p = 0; p < P; ++p) pass2(i + p, p);
    for (; i < d_k; ++i) pass2(i, i % P);
    for (int m = 0; m < M; ++m) V::store_n(o + j0 + m * kLanes, delta_rule_combine<V>(part[m]), n[m]);
  }
}

// kernels/recurrent.h's delta_rule_tokens. Each strip of value columns runs every token before
// the next strip (the columns of S evolve independently), so the strip stays in L1.
template <class V>
inline void delta_rule_tokens_row(const DeltaRuleArgs& a) {
  int j0 = 0;
  for (; j0 + 2 * kLanes <= a.d_v; j0 += 2 * kLanes) delta_rule_strips<V, 2>(a, j0);
  for (; j0 < a.d_v; j0 += kLanes) delta_rule_strips<V, 1>(a, j0);
}

}  // namespace ubatch::kernels::simd16
