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

// M strips of 16 columns from column j0; Full: every strip has 16 columns (plain loads and
// stores, no lane masks). The four partial sums are separate variables, the rows unrolled by
// four, so that they stay in registers: row i still goes to part i mod 4, in increasing i.
template <class V, int M, bool Full>
inline void delta_rule_strips(const DeltaRuleArgs& a, int j0) {
  using F = typename V::F;
  static_assert(kDeltaParts == 4, "the unrolled loops below keep four partial sums");
  const int d_k = a.d_k, d_v = a.d_v;
  int n[M];
  for (int m = 0; m < M; ++m) n[m] = std::min(kLanes, d_v - (j0 + m * kLanes));
  auto ld = [&](const float* p, int m) -> F {
    if constexpr (Full) {
      (void)m;
      return V::load(p);
    } else {
      return V::load_n(p, n[m]);
    }
  };
  auto st = [&](float* p, F v, int m) {
    if constexpr (Full) {
      (void)m;
      V::store(p, v);
    } else {
      V::store_n(p, v, n[m]);
    }
  };
  for (int r = 0; r < a.n_tokens; ++r) {
    const int64_t row_index = a.rows ? a.rows[r] : r;
    const float* q = a.q + row_index * a.qk_stride;
    const float* k = a.k + row_index * a.qk_stride;
    const float* v = a.v + row_index * a.v_stride;
    float* o = a.o + row_index * a.o_stride;
    const F vdecay = V::set1(a.decay[row_index * a.gate_stride]);
    float* const S = a.S + j0;
    // Pass 1 (reads S): u = β (v − decay · Sᵀk).
    F p0[M], p1[M], p2[M], p3[M];
    for (int m = 0; m < M; ++m) p0[m] = p1[m] = p2[m] = p3[m] = V::zero();
    int i = 0;
    for (; i + 4 <= d_k; i += 4) {
      const float* s = S + static_cast<int64_t>(i) * d_v;
      const F k0 = V::set1(k[i]), k1 = V::set1(k[i + 1]), k2 = V::set1(k[i + 2]), k3 = V::set1(k[i + 3]);
      for (int m = 0; m < M; ++m) {
        const int c = m * kLanes;
        p0[m] = V::fma(ld(s + c, m), k0, p0[m]);
        p1[m] = V::fma(ld(s + d_v + c, m), k1, p1[m]);
        p2[m] = V::fma(ld(s + 2 * d_v + c, m), k2, p2[m]);
        p3[m] = V::fma(ld(s + 3 * d_v + c, m), k3, p3[m]);
      }
    }
    for (; i < d_k; ++i) {  // d_k not a multiple of 4: rows i ≡ 0, 1, 2 (mod 4) left
      const float* s = S + static_cast<int64_t>(i) * d_v;
      const F ki = V::set1(k[i]);
      for (int m = 0; m < M; ++m) {
        F& acc = i % 4 == 0 ? p0[m] : i % 4 == 1 ? p1[m] : p2[m];
        acc = V::fma(ld(s + m * kLanes, m), ki, acc);
      }
    }
    const F vbeta = V::set1(a.beta[row_index * a.gate_stride]);
    F u[M];
    for (int m = 0; m < M; ++m) {
      const F dot = V::add(V::add(p0[m], p1[m]), V::add(p2[m], p3[m]));
      u[m] = V::mul(vbeta, V::sub(ld(v + j0 + m * kLanes, m), V::mul(vdecay, dot)));
    }
    // Pass 2: S ← decay · S + k uᵀ and o = Sᵀq over the updated rows.
    for (int m = 0; m < M; ++m) p0[m] = p1[m] = p2[m] = p3[m] = V::zero();
    float* const snap = a.snapshots && a.snapshots[r] ? a.snapshots[r] + j0 : nullptr;
    auto update = [&](int row, F& acc, int m) {
      const int64_t off = static_cast<int64_t>(row) * d_v + m * kLanes;
      const F sv = V::fma(V::set1(k[row]), u[m], V::mul(ld(S + off, m), vdecay));
      st(S + off, sv, m);
      if (snap) st(snap + off, sv, m);
      acc = V::fma(sv, V::set1(q[row]), acc);
    };
    for (i = 0; i + 4 <= d_k; i += 4)
      for (int m = 0; m < M; ++m) {
        update(i, p0[m], m);
        update(i + 1, p1[m], m);
        update(i + 2, p2[m], m);
        update(i + 3, p3[m], m);
      }
    for (; i < d_k; ++i)
      for (int m = 0; m < M; ++m) update(i, i % 4 == 0 ? p0[m] : i % 4 == 1 ? p1[m] : p2[m], m);
    for (int m = 0; m < M; ++m)
      st(o + j0 + m * kLanes, V::add(V::add(p0[m], p1[m]), V::add(p2[m], p3[m])), m);
  }
}

// kernels/recurrent.h's delta_rule_tokens. Each strip of value columns runs every token before
// the next strip (the columns of S evolve independently), so the strip stays in L1.
template <class V>
inline void delta_rule_tokens_row(const DeltaRuleArgs& a) {
  int j0 = 0;
  for (; j0 + 2 * kLanes <= a.d_v; j0 += 2 * kLanes) delta_rule_strips<V, 2, true>(a, j0);
  if (j0 + kLanes <= a.d_v) {
    delta_rule_strips<V, 1, true>(a, j0);
    j0 += kLanes;
  }
  if (j0 < a.d_v) delta_rule_strips<V, 1, false>(a, j0);
}

}  // namespace ubatch::kernels::simd16
