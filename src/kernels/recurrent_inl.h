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
#include <type_traits>
#include <vector>

#include "kernels/recurrent.h"
#include "kernels/simd16.h"

namespace ubatch::kernels::simd16 {

// A state's 16-column pieces in its storage type St: float, or uint16_t for BF16 (exact on
// load, rounded to nearest even on store). n: lanes of a partial strip (Full: all 16).
template <class V, class St, bool Full>
struct StateIo {
  using F = typename V::F;
  static inline F ld(const St* p, int n) {
    if constexpr (std::is_same_v<St, float>) {
      if constexpr (Full) return V::load(p);
      else return V::load_n(p, n);
    } else {
      if constexpr (Full) return V::load_bf16(p);
      else return V::load_bf16_n(p, n);
    }
  }
  static inline void st(St* p, F v, int n) {
    if constexpr (std::is_same_v<St, float>) {
      if constexpr (Full) V::store(p, v);
      else V::store_n(p, v, n);
    } else {
      if constexpr (Full) V::store_bf16(p, v);
      else V::store_bf16_n(p, v, n);
    }
  }
};

// The state and the snapshot buffers of the args in storage type St.
template <class St>
inline St* state_of(const DeltaRuleArgs& a) {
  if constexpr (std::is_same_v<St, float>) return a.S;
  else return a.S_bf16;
}
template <class St>
inline St* snapshot_of(const DeltaRuleArgs& a, int r) {
  if constexpr (std::is_same_v<St, float>) return a.snapshots ? a.snapshots[r] : nullptr;
  else return a.snapshots_bf16 ? a.snapshots_bf16[r] : nullptr;
}

// Sums over the d_k rows keep kParts partial sums (row i goes to part i mod kParts), added as
// (p0 + p1) + (p2 + p3) at the end: independent fma chains, the same order on every level.
constexpr int kDeltaParts = 4;

// M strips of 16 columns from column j0; Full: every strip has 16 columns (plain loads and
// stores, no lane masks). The four partial sums are separate variables, the rows unrolled by
// four, so that they stay in registers: row i still goes to part i mod 4, in increasing i.
template <class V, class St, int M, bool Full>
inline void delta_rule_strips(const DeltaRuleArgs& a, int j0) {
  using F = typename V::F;
  using Io = StateIo<V, St, Full>;
  static_assert(kDeltaParts == 4, "the unrolled loops below keep four partial sums");
  const int d_k = a.d_k, d_v = a.d_v;
  int n[M];
  for (int m = 0; m < M; ++m) n[m] = std::min(kLanes, d_v - (j0 + m * kLanes));
  auto ld = [&](const St* p, int m) -> F { return Io::ld(p, n[m]); };
  auto st = [&](St* p, F v, int m) { Io::st(p, v, n[m]); };
  auto ld_f32 = [&](const float* p, int m) -> F { return StateIo<V, float, Full>::ld(p, n[m]); };
  auto st_f32 = [&](float* p, F v, int m) { StateIo<V, float, Full>::st(p, v, n[m]); };
  for (int r = 0; r < a.n_tokens; ++r) {
    const int64_t row_index = a.rows ? a.rows[r] : r;
    const float* q = a.q + row_index * a.qk_stride;
    const float* k = a.k + row_index * a.qk_stride;
    const float* v = a.v + row_index * a.v_stride;
    float* o = a.o + row_index * a.o_stride;
    const F vdecay = V::set1(a.decay[row_index * a.gate_stride]);
    St* const S = state_of<St>(a) + j0;
    // Pass 1 (reads S): u = β (v − decay · Sᵀk).
    F p0[M], p1[M], p2[M], p3[M];
    for (int m = 0; m < M; ++m) p0[m] = p1[m] = p2[m] = p3[m] = V::zero();
    int i = 0;
    // The first token's pass 1 prefetches the next strip's columns of the same rows (rows are
    // d_v floats apart, so the hardware's streams, which stop at pages, do not follow them).
    const bool pf_strip = r == 0 && j0 + M * kLanes < d_v;
    for (; i + 4 <= d_k; i += 4) {
      const St* s = S + static_cast<int64_t>(i) * d_v;
      if (pf_strip)
        for (int rr = 0; rr < 4; ++rr)
          for (int m = 0; m < M; ++m) __builtin_prefetch(s + rr * d_v + (M + m) * kLanes, 1, 2);
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
      const St* s = S + static_cast<int64_t>(i) * d_v;
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
      u[m] = V::mul(vbeta, V::sub(ld_f32(v + j0 + m * kLanes, m), V::mul(vdecay, dot)));
    }
    // Pass 2: S ← decay · S + k uᵀ and o = Sᵀq over the updated rows.
    for (int m = 0; m < M; ++m) p0[m] = p1[m] = p2[m] = p3[m] = V::zero();
    St* const snap0 = snapshot_of<St>(a, r);
    St* const snap = snap0 ? snap0 + j0 : nullptr;
    auto update = [&](int row, F& acc, int m) {
      const int64_t off = static_cast<int64_t>(row) * d_v + m * kLanes;
      const F sv = V::fma(V::set1(k[row]), u[m], V::mul(ld(S + off, m), vdecay));
      st(S + off, sv, m);
      if (snap) st(snap + off, sv, m);
      acc = V::fma(sv, V::set1(q[row]), acc);
    };
    // The first token's pass 2 prefetches the same strip of the next state, so that all of it
    // is on its way by the last strip.
    const St* const next = r == 0 && a.prefetch ? static_cast<const St*>(a.prefetch) + j0 : nullptr;
    for (i = 0; i + 4 <= d_k; i += 4)
      for (int m = 0; m < M; ++m) {
        if (next)
          for (int rr = 0; rr < 4; ++rr) __builtin_prefetch(next + static_cast<int64_t>(i + rr) * d_v + m * kLanes, 1, 2);
        update(i, p0[m], m);
        update(i + 1, p1[m], m);
        update(i + 2, p2[m], m);
        update(i + 3, p3[m], m);
      }
    for (; i < d_k; ++i)
      for (int m = 0; m < M; ++m) update(i, i % 4 == 0 ? p0[m] : i % 4 == 1 ? p1[m] : p2[m], m);
    for (int m = 0; m < M; ++m)
      st_f32(o + j0 + m * kLanes, V::add(V::add(p0[m], p1[m]), V::add(p2[m], p3[m])), m);
  }
}

// kernels/recurrent.h's delta_rule_tokens. Each strip of value columns runs every token before
// the next strip (the columns of S evolve independently), so the strip stays in L1.
template <class V, class St>
inline void delta_rule_tokens_st(const DeltaRuleArgs& a) {
  int j0 = 0;
  for (; j0 + 2 * kLanes <= a.d_v; j0 += 2 * kLanes) delta_rule_strips<V, St, 2, true>(a, j0);
  if (j0 + kLanes <= a.d_v) {
    delta_rule_strips<V, St, 1, true>(a, j0);
    j0 += kLanes;
  }
  if (j0 < a.d_v) delta_rule_strips<V, St, 1, false>(a, j0);
}
template <class V>
inline void delta_rule_tokens_row(const DeltaRuleArgs& a) {
  if (a.S_bf16) delta_rule_tokens_st<V, uint16_t>(a);
  else delta_rule_tokens_st<V, float>(a);
}


// ---- Chunk-wise (kernels/recurrent.h's delta_rule_chunks) ----
//
// Tokens 0..C−1 of a chunk (C = kDeltaChunk = 16 = kLanes), decays a_t, rates β_t, state S₀
// before the chunk. With Γ[t][s] = Π_{s<r≤t} a_r (Γ[t][t] = 1) and γ_t = Π_{r≤t} a_r, the
// step recurrence unrolls to
//   u_t = β_t (v_t − γ_t S₀ᵀk_t) − Σ_{s<t} A[t][s] u_s,   A[t][s] = β_t Γ[t][s] (k_t·k_s)
//   o_t = γ_t S₀ᵀq_t + Σ_{s≤t} M[t][s] u_s,              M[t][s] = Γ[t][s] (q_t·k_s)
//   S_C = γ_{C−1} S₀ + Σ_s Γ[C−1][s] k_s u_sᵀ
// (u_t is the step kernel's u: the forward substitution is the UT transform of Yang et al. 2024
// applied to the right-hand side). Γ is built by products only, never as a ratio of cumulative
// decays, so decays near 0 underflow to 0 instead of dividing by it.
//
// Per chunk: scalar set-up that does not read S (Γ, γ, the C × C dot products as 16-lane rows
// over s, A, M, Kᵀ and Qᵀ and the end-scaled Kᵀ as [d_k, C] tables); then per strip of 16 value
// columns: pass A reads the strip of S once for every token (P_t = S₀ᵀk_t, R_t = S₀ᵀq_t); the
// forward substitution and the outputs work on [C, 16] tiles; pass B writes the strip once.
// Every lane's value is one fixed chain of operations (sums over i in increasing i with fma,
// sums over s in increasing s), so the blocking below (tokens per pass A sweep, rows per pass B
// block) changes no bit, and every level computes the same ones.
struct DeltaChunkWork {
  std::vector<float> kt, qt, kend;  // [d_k, C]: k_s[i], q_t[i], Γ[C−1][s] k_s[i] at i·C + s
  float A[kLanes][kLanes];          // [t][s] for s < t, β_t on the diagonal, zero above
  float M[kLanes][kLanes];          // [t][s], zero for s > t
  float gam[kLanes];                // γ_t
  float P[kLanes][kLanes];          // [t][16 columns] S₀ᵀk_t over the strip
  float R[kLanes][kLanes];          // [t][16 columns] S₀ᵀq_t
  float U[kLanes][kLanes];          // [t][16 columns] u_t
};

template <class V>
inline void delta_chunk_setup(const DeltaRuleArgs& a, const int64_t* row, DeltaChunkWork& w) {
  using F = typename V::F;
  constexpr int C = kLanes;
  const int d_k = a.d_k;
  float dec[C], bet[C];
  for (int t = 0; t < C; ++t) {
    const float* k = a.k + row[t] * a.qk_stride;
    const float* q = a.q + row[t] * a.qk_stride;
    for (int i = 0; i < d_k; ++i) {
      w.kt[static_cast<size_t>(i) * C + t] = k[i];
      w.qt[static_cast<size_t>(i) * C + t] = q[i];
    }
    dec[t] = a.decay[row[t] * a.gate_stride];
    bet[t] = a.beta[row[t] * a.gate_stride];
  }
  // G[t][s] = Γ[t][s] for s ≤ t: from the diagonal down, one product per step.
  float G[C][C];
  for (int t = 0; t < C; ++t) {
    G[t][t] = 1.0f;
    for (int s = t - 1; s >= 0; --s) G[t][s] = G[t][s + 1] * dec[s + 1];
    w.gam[t] = G[t][0] * dec[0];
  }
  // The dot products as rows over s: KK[t] = Σ_i k_t[i] · Kᵀ[i], QK[t] likewise (one fma chain
  // per lane in increasing i; TB tokens at a time for independent chains).
  constexpr int TB = 4;
  static_assert(C % TB == 0);
  for (int t0 = 0; t0 < C; t0 += TB) {
    F kk[TB], qk[TB];
    for (int u = 0; u < TB; ++u) kk[u] = qk[u] = V::zero();
    for (int i = 0; i < d_k; ++i) {
      const float* kt = &w.kt[static_cast<size_t>(i) * C];
      const float* qt = &w.qt[static_cast<size_t>(i) * C];
      const F kti = V::load(kt);
      for (int u = 0; u < TB; ++u) {
        kk[u] = V::fma(V::set1(kt[t0 + u]), kti, kk[u]);
        qk[u] = V::fma(V::set1(qt[t0 + u]), kti, qk[u]);
      }
    }
    for (int u = 0; u < TB; ++u) {
      V::store(w.A[t0 + u], kk[u]);
      V::store(w.M[t0 + u], qk[u]);
    }
  }
  for (int t = 0; t < C; ++t)
    for (int s = 0; s < C; ++s) {
      w.A[t][s] = s < t ? (bet[t] * G[t][s]) * w.A[t][s] : 0.0f;
      w.M[t][s] = s <= t ? G[t][s] * w.M[t][s] : 0.0f;
    }
  const F gend = V::load(G[C - 1]);  // lanes s: Γ[C−1][s]
  for (int i = 0; i < d_k; ++i)
    V::store(&w.kend[static_cast<size_t>(i) * C], V::mul(V::load(&w.kt[static_cast<size_t>(i) * C]), gend));
  for (int t = 0; t < C; ++t) w.A[t][t] = bet[t];  // the diagonal carries β_t (I + A's is 1, never read)
}

// One strip of n ≤ 16 value columns from j0 through one chunk (rows row[0..C)).
template <class V, class St, bool Full>
inline void delta_chunk_strip(const DeltaRuleArgs& a, const int64_t* row, DeltaChunkWork& w, int j0, St* snap) {
  using F = typename V::F;
  constexpr int C = kLanes;
  // Tokens per pass A sweep: 2·TB accumulators (P and R) in registers.
  constexpr int TB = V::kAccRegs >= 16 ? 8 : 2;
  // Rows per pass B block.
  constexpr int RB = V::kAccRegs >= 16 ? 8 : 4;
  const int d_k = a.d_k, d_v = a.d_v;
  const int n = std::min(kLanes, d_v - j0);
  using Io = StateIo<V, St, Full>;
  using IoF = StateIo<V, float, Full>;
  St* const S = state_of<St>(a) + j0;
  // Pass A: P_t = S₀ᵀk_t, R_t = S₀ᵀq_t over the strip, one chain per lane in increasing i.
  for (int t0 = 0; t0 < C; t0 += TB) {
    F p[TB], r[TB];
    for (int u = 0; u < TB; ++u) p[u] = r[u] = V::zero();
    for (int i = 0; i < d_k; ++i) {
      const F s = Io::ld(S + static_cast<int64_t>(i) * d_v, n);
      const float* kt = &w.kt[static_cast<size_t>(i) * C + t0];
      const float* qt = &w.qt[static_cast<size_t>(i) * C + t0];
      for (int u = 0; u < TB; ++u) {
        p[u] = V::fma(s, V::set1(kt[u]), p[u]);
        r[u] = V::fma(s, V::set1(qt[u]), r[u]);
      }
    }
    for (int u = 0; u < TB; ++u) {
      V::store(w.P[t0 + u], p[u]);
      V::store(w.R[t0 + u], r[u]);
    }
  }
  // u_t = β_t (v_t − γ_t P_t), then − A[t][s] u_s for s < t in increasing s; o_t = γ_t R_t, then
  // + M[t][s] u_s for s ≤ t in increasing s.
  for (int t = 0; t < C; ++t) {
    const float* v = a.v + row[t] * a.v_stride + j0;
    F x = V::mul(V::set1(w.A[t][t]), V::sub(IoF::ld(v, n), V::mul(V::set1(w.gam[t]), V::load(w.P[t]))));
    for (int s = 0; s < t; ++s) x = V::fnma(V::set1(w.A[t][s]), V::load(w.U[s]), x);
    V::store(w.U[t], x);
    F y = V::mul(V::set1(w.gam[t]), V::load(w.R[t]));
    for (int s = 0; s <= t; ++s) y = V::fma(V::set1(w.M[t][s]), V::load(w.U[s]), y);
    IoF::st(a.o + row[t] * a.o_stride + j0, y, n);
  }
  // Pass B: S ← γ_{C−1} S₀ + Σ_s Γ[C−1][s] k_s u_sᵀ, each element one chain in increasing s.
  const F gend = V::set1(w.gam[C - 1]);
  int i = 0;
  auto rows_block = [&](int i0, auto nb) {
    constexpr int NB = decltype(nb)::value;
    F acc[NB];
    for (int b = 0; b < NB; ++b) acc[b] = V::mul(Io::ld(S + static_cast<int64_t>(i0 + b) * d_v, n), gend);
    for (int s = 0; s < C; ++s) {
      const F us = V::load(w.U[s]);
      for (int b = 0; b < NB; ++b) acc[b] = V::fma(V::set1(w.kend[static_cast<size_t>(i0 + b) * C + s]), us, acc[b]);
    }
    for (int b = 0; b < NB; ++b) {
      Io::st(S + static_cast<int64_t>(i0 + b) * d_v, acc[b], n);
      if (snap) Io::st(snap + j0 + static_cast<int64_t>(i0 + b) * d_v, acc[b], n);
    }
  };
  for (; i + RB <= d_k; i += RB) rows_block(i, std::integral_constant<int, RB>{});
  for (; i < d_k; ++i) rows_block(i, std::integral_constant<int, 1>{});
}

// kernels/recurrent.h's delta_rule_chunks: chunk by chunk, each chunk's set-up once, then its
// strips of 16 value columns.
template <class V, class St>
inline void delta_rule_chunks_st(const DeltaRuleArgs& a) {
  static_assert(kDeltaChunk == kLanes, "a chunk's C × C tables are rows of 16 lanes");
  constexpr int C = kLanes;
  thread_local DeltaChunkWork w;
  const size_t table = static_cast<size_t>(a.d_k) * C;
  if (w.kt.size() < table) {
    w.kt.resize(table);
    w.qt.resize(table);
    w.kend.resize(table);
  }
  for (int c0 = 0; c0 + C <= a.n_tokens; c0 += C) {
    int64_t row[C];
    for (int t = 0; t < C; ++t) row[t] = a.rows ? a.rows[c0 + t] : c0 + t;
    delta_chunk_setup<V>(a, row, w);
    St* snap = snapshot_of<St>(a, c0 + C - 1);
    int j0 = 0;
    for (; j0 + kLanes <= a.d_v; j0 += kLanes) delta_chunk_strip<V, St, true>(a, row, w, j0, snap);
    if (j0 < a.d_v) delta_chunk_strip<V, St, false>(a, row, w, j0, snap);
  }
}
template <class V>
inline void delta_rule_chunks_row(const DeltaRuleArgs& a) {
  if (a.S_bf16) delta_rule_chunks_st<V, uint16_t>(a);
  else delta_rule_chunks_st<V, float>(a);
}

// ---- The causal convolution's step (kernels/recurrent.h's conv1d_step) ----
//
// Per channel: acc = Σ_j w[j]·state[j] for j < k_size − 1 in increasing j, starting from 0 (a
// product, then an add: no fused multiply-add, so every level computes the same bits as the
// scalar reference), then out = acc + w[k_size − 1]·in; the state rows shift up by one and take
// `in`. Channels are independent: 16 at a time, the last ones through masked loads and stores.
// `in` is read before `out` is written in each group of 16, so out may alias in.
template <class V, bool Full>
inline void conv1d_channels(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size,
                            int64_t c, int n) {
  using F = typename V::F;
  auto ld = [&](const float* p) -> F {
    if constexpr (Full) return V::load(p);
    else return V::load_n(p, n);
  };
  auto st = [&](float* p, F v) {
    if constexpr (Full) V::store(p, v);
    else V::store_n(p, v, n);
  };
  const int n_prev = k_size - 1;
  F acc = V::zero();
  for (int j = 0; j < n_prev; ++j) acc = V::add(acc, V::mul(ld(w + j * n_ch + c), ld(state + j * n_ch + c)));
  const F cur = ld(in + c);
  for (int j = 0; j + 1 < n_prev; ++j) st(state + j * n_ch + c, ld(state + (j + 1) * n_ch + c));
  if (n_prev > 0) st(state + (n_prev - 1) * n_ch + c, cur);
  st(out + c, V::add(acc, V::mul(ld(w + n_prev * n_ch + c), cur)));
}

template <class V>
inline void conv1d_step_row(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size) {
  int64_t c = 0;
  for (; c + kLanes <= n_ch; c += kLanes) conv1d_channels<V, true>(in, state, w, out, n_ch, k_size, c, kLanes);
  if (c < n_ch) conv1d_channels<V, false>(in, state, w, out, n_ch, k_size, c, static_cast<int>(n_ch - c));
}

// kernels/recurrent.h's round_state_bf16: the vocabulary's store_bf16, 16 values at a time.
template <class V>
inline void round_state_bf16_row(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) V::store_bf16(out + i, V::load(x + i));
  if (i < n) V::store_bf16_n(out + i, V::load_n(x + i, static_cast<int>(n - i)), static_cast<int>(n - i));
}

}  // namespace ubatch::kernels::simd16
