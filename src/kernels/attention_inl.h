// Attention over listed KV cells (contract in attention.h), written once over the 16-lane
// vocabulary of simd16.h: attention.cpp instantiates it with the scalar vocabulary (the
// reference), attention_avx2.cpp and attention_avx512.cpp with theirs — the same bits on
// every level.
//
// The arithmetic of one query head h (KV head g), cells c_0 .. c_{n-1} in the listed order:
//
//   K and V values are read exactly as floats (F16/BF16 widened, Q8_0 as d·q, exact in f32).
//   m = −inf, l = 0 (double), o[0, head_dim) = 0
//   for each chunk of kChunk = 64 consecutive listed cells (the last may be shorter):
//     s_j = dot(q_h, K_j) · scale        dot: 16 lanes, lane i accumulates fma(q[d], K[d], ·)
//                                        over d ≡ i (mod 16) in order (the last slice zero-
//                                        padded), then the fixed tree of simd16.h
//     s_j = softcap · tanh(s_j / softcap)   only when softcap > 0 (tanh of ops_inl.h)
//     cm = max_j s_j                     (16 lanes, padding −inf, fixed tree)
//     f = 1; if cm > m: { if not the first chunk: f = e^(m − cm); m = cm }
//     p_j = e^(s_j − m)                  (exp of ops_inl.h)
//     l = l · f + Σ_j p_j                (Σ in 16 double lanes, j mod 16, fixed tree)
//     o[d] = o[d] · f, then o[d] = fma(p_j, V_j[d], o[d]) for each cell j in order
//   out[d] = o[d] · float(1 / l)
//   With a sink σ > −inf (attention.h): m = σ, l = 1 before the first chunk, and the first
//   chunk rescales l like the later ones (o is still 0 there).
//
// Each head's result depends only on its query, the listed cells and their contents. How
// heads are grouped into a pass, how cells and dimensions are blocked into registers — all
// chosen per vocabulary for speed — never change any of the operations above.
//
// Grouped-query heads: the query heads that share a KV head (up to kMaxHeads per pass) go
// through the cells together, so each K and V row is loaded and converted once per pass and
// serves every head of the group (per-head accumulators).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/tensor_type.h"
#include "kernels/attention.h"
#include "kernels/ops_inl.h"
#include "kernels/simd16.h"

namespace ubatch::kernels::simd16 {

constexpr int kAttnChunk = 64;     // cells per online-softmax step (part of the rounding)
constexpr int kAttnMaxHeads = 8;   // query heads per pass over the cells
constexpr size_t kQ8Block = 34;    // Q8_0: {f16 d; int8 qs[32]}

// Exact float values of one KV head stored as T.
template <class V, TensorType T>
struct KvRow {
  using F = typename V::F;
  // Elements [i, i + 16) (i % 16 == 0).
  static inline F load(const uint8_t* row, int i) {
    if constexpr (T == TensorType::F32) {
      return V::load(reinterpret_cast<const float*>(row) + i);
    } else if constexpr (T == TensorType::F16) {
      return V::load_f16(reinterpret_cast<const uint16_t*>(row) + i);
    } else {
      static_assert(T == TensorType::Q8_0);
      const uint8_t* blk = row + static_cast<size_t>(i / 32) * kQ8Block;
      uint16_t dh;
      std::memcpy(&dh, blk, 2);
      return V::mul(V::load_i8(reinterpret_cast<const int8_t*>(blk + 2 + i % 32)),
                    V::set1(V::f16_to_f32(dh)));
    }
  }
  // Elements [i, i + n), n < 16, zeros after (F32 and F16: Q8_0 rows are whole blocks).
  static inline F load_n(const uint8_t* row, int i, int n) {
    if constexpr (T == TensorType::F32) {
      return V::load_n(reinterpret_cast<const float*>(row) + i, n);
    } else {
      static_assert(T == TensorType::F16);
      return V::load_f16_n(reinterpret_cast<const uint16_t*>(row) + i, n);
    }
  }
};

// Scores of HB heads (q rows hd apart) against CJ cells: s[h * kAttnChunk + c] = dot · scale.
template <class V, TensorType T, int HB, int CJ>
inline void attn_scores(const float* q, int hd, const uint8_t* const* rows, float scale,
                        float* s) {
  using F = typename V::F;
  F acc[HB][CJ];
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < CJ; ++c) acc[h][c] = V::zero();
  int i = 0;
  for (; i + 16 <= hd; i += 16) {
    F k[CJ];
    for (int c = 0; c < CJ; ++c) k[c] = KvRow<V, T>::load(rows[c], i);
    for (int h = 0; h < HB; ++h) {
      const F qv = V::load(q + static_cast<ptrdiff_t>(h) * hd + i);
      for (int c = 0; c < CJ; ++c) acc[h][c] = V::fma(qv, k[c], acc[h][c]);
    }
  }
  if constexpr (T != TensorType::Q8_0) {
    if (i < hd) {
      const int n = hd - i;
      F k[CJ];
      for (int c = 0; c < CJ; ++c) k[c] = KvRow<V, T>::load_n(rows[c], i, n);
      for (int h = 0; h < HB; ++h) {
        const F qv = V::load_n(q + static_cast<ptrdiff_t>(h) * hd + i, n);
        for (int c = 0; c < CJ; ++c) acc[h][c] = V::fma(qv, k[c], acc[h][c]);
      }
    }
  }
  if constexpr (HB * CJ == 16) {
    float sum[16];
    V::hsum16(&acc[0][0], sum);
    for (int h = 0; h < HB; ++h)
      for (int c = 0; c < CJ; ++c) s[h * kAttnChunk + c] = sum[h * CJ + c] * scale;
  } else {
    for (int h = 0; h < HB; ++h)
      for (int c = 0; c < CJ; ++c) s[h * kAttnChunk + c] = V::hsum(acc[h][c]) * scale;
  }
}

// Per-head state of a pass over one chunk's V rows.
struct AttnAccumArgs {
  const uint8_t* v_head;  // KV head g of cell 0
  size_t row_bytes;
  const int32_t* cells;   // the chunk's cells
  int nc;                 // cells in the chunk
  const float* p;         // p[h * kAttnChunk + j]
  int hd;
  float* out;             // head h at out + h * hd
  bool first;             // first chunk: o starts at 0
  const float* f;         // [HB] rescale factors of o (1: none)
  const float* post;      // [HB] final factors (1 / l), or null when not the last chunk
};

// o[h][d0, d0 + 16·NV) (the last vector holding only n_last dims when PARTIAL) for HB heads.
template <class V, TensorType T, int HB, int NV, bool PARTIAL>
inline void attn_accumulate(const AttnAccumArgs& a, int d0, int n_last) {
  using F = typename V::F;
  F acc[HB][NV];
  for (int h = 0; h < HB; ++h) {
    float* o = a.out + static_cast<ptrdiff_t>(h) * a.hd + d0;
    for (int v = 0; v < NV; ++v) {
      if (a.first) {
        acc[h][v] = V::zero();
      } else {
        acc[h][v] = PARTIAL && v == NV - 1 ? V::load_n(o + 16 * v, n_last) : V::load(o + 16 * v);
        if (a.f[h] != 1.0f) acc[h][v] = V::mul(acc[h][v], V::set1(a.f[h]));
      }
    }
  }
  for (int j = 0; j < a.nc; ++j) {
    const uint8_t* row = a.v_head + static_cast<size_t>(a.cells[j]) * a.row_bytes;
    F x[NV];
    for (int v = 0; v < NV; ++v) {
      if constexpr (PARTIAL && T != TensorType::Q8_0)
        x[v] = v == NV - 1 ? KvRow<V, T>::load_n(row, d0 + 16 * v, n_last)
                           : KvRow<V, T>::load(row, d0 + 16 * v);
      else
        x[v] = KvRow<V, T>::load(row, d0 + 16 * v);
    }
    for (int h = 0; h < HB; ++h) {
      const F pj = V::set1(a.p[h * kAttnChunk + j]);
      for (int v = 0; v < NV; ++v) acc[h][v] = V::fma(pj, x[v], acc[h][v]);
    }
  }
  for (int h = 0; h < HB; ++h) {
    float* o = a.out + static_cast<ptrdiff_t>(h) * a.hd + d0;
    for (int v = 0; v < NV; ++v) {
      const F r = a.post ? V::mul(acc[h][v], V::set1(a.post[h])) : acc[h][v];
      if (PARTIAL && v == NV - 1)
        V::store_n(o + 16 * v, r, n_last);
      else
        V::store(o + 16 * v, r);
    }
  }
}

// Dimensions [d0, hd) in register blocks of NV vectors, then NV/2, …, 1, then the tail.
template <class V, TensorType T, int HB, int NV>
inline void attn_accumulate_dims(const AttnAccumArgs& a, int d0) {
  for (; a.hd - d0 >= 16 * NV; d0 += 16 * NV) attn_accumulate<V, T, HB, NV, false>(a, d0, 16);
  if constexpr (NV > 1) {
    attn_accumulate_dims<V, T, HB, NV / 2>(a, d0);
  } else if constexpr (T != TensorType::Q8_0) {
    if (d0 < a.hd) attn_accumulate<V, T, HB, 1, true>(a, d0, a.hd - d0);
  }
}

constexpr int attn_min(int a, int b) { return a < b ? a : b; }

// Attention prefetches each KV head's row it will read into L2: the K rows kAttnPrefetchCells
// ahead of the scores, and a block's V rows while its scores run. A head's rows of consecutive
// cells lie a whole cell apart (all KV heads of a cell are stored together: 8 KiB for
// LLaMA-2-7B's F16 cache), a stride that leaves a 4 KiB page every cell or two, where the
// hardware prefetchers stop. build/bench_attention H KVH 128 CELLS 4 LAYERS T (bench/, F16, 4
// sequences; Zen 4, three or two interleaved rounds, best step): LLaMA-2-7B's heads at 230
// cells, one thread 49.4-52.0 -> 35.7-37.9 ms, two 23.9-24.5 -> 22.3-30.3; 32 heads over 8 KV
// heads at 2,048 cells, two threads 87.5-105.4 -> 64.2-64.4 ms (docs/BENCHMARKS.md, "Attention's
// K and V prefetched"). Into L1 instead, or without the V rows, no gain. Prefetches change no
// result. (Always inlined: as an ordinary inline function, GCC 12 at -O1 and above emitted no
// prefetch instruction for it at all, objdump -d of attention_avx512.cpp.o.)
constexpr int kAttnPrefetchCells = 32;
__attribute__((always_inline)) inline void prefetch_kv_row(const uint8_t* row, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(row + off, 0, 2);
  __builtin_prefetch(row + bytes - 1, 0, 2);
}

// NH query heads (q and out rows hd apart) over one KV head.
template <class V, TensorType T, int NH>
void attn_heads_pass(const AttentionShape& sh, const float* q, const uint8_t* k_head,
                     const uint8_t* v_head, const int32_t* cells, int n_cells, float* out,
                     const float* sinks) {
  using F = typename V::F;
  const int hd = sh.head_dim;
  if (n_cells == 0) {
    std::memset(out, 0, sizeof(float) * static_cast<size_t>(NH) * static_cast<size_t>(hd));
    return;
  }
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // Register blocking: HS heads × CJ cells of scores, HV heads × NV vectors of V sums.
  constexpr int HS = attn_min(NH, V::kScoreRegs);
  constexpr int CJ = V::kScoreRegs / HS;
  constexpr int HV = attn_min(NH, 4);
  constexpr int NV = attn_min(8, V::kAccRegs / HV > 0 ? V::kAccRegs / HV : 1);

  alignas(64) float s[NH * kAttnChunk];
  float m[NH], f[NH], post[NH];
  double l[NH];
  bool sink[NH];
  for (int h = 0; h < NH; ++h) {
    sink[h] = sinks != nullptr && sinks[h] > -kInf;
    m[h] = sink[h] ? sinks[h] : -kInf;
    l[h] = sink[h] ? 1.0 : 0.0;  // e^(σ − m) with m = σ
  }
  const size_t kv_bytes = tensor_row_bytes(T, hd);
  auto prefetch_k = [&](int c) __attribute__((always_inline)) {
    prefetch_kv_row(k_head + static_cast<size_t>(cells[c]) * sh.k_row_bytes, kv_bytes);
  };
  auto prefetch_v = [&](int c) __attribute__((always_inline)) {
    prefetch_kv_row(v_head + static_cast<size_t>(cells[c]) * sh.v_row_bytes, kv_bytes);
  };
  for (int c = 0; c < attn_min(kAttnPrefetchCells, n_cells); ++c) prefetch_k(c);
  for (int c0 = 0; c0 < n_cells; c0 += kAttnChunk) {
    const int nc = attn_min(kAttnChunk, n_cells - c0);
    const int nc16 = (nc + 15) & ~15;
    // Scores: each K row loaded and converted once for HS heads.
    for (int h0 = 0; h0 < NH; h0 += HS) {
      const float* qh = q + static_cast<ptrdiff_t>(h0) * hd;
      float* sh0 = s + h0 * kAttnChunk;
      int j = 0;
      for (; j + CJ <= nc; j += CJ) {
        if (h0 == 0) {  // the K rows kAttnPrefetchCells on, and this block's V rows
          const int ahead = c0 + j + kAttnPrefetchCells;
          for (int c = ahead; c < attn_min(ahead + CJ, n_cells); ++c) prefetch_k(c);
          for (int c = c0 + j; c < c0 + j + CJ; ++c) prefetch_v(c);
        }
        const uint8_t* rows[CJ];
        for (int c = 0; c < CJ; ++c)
          rows[c] = k_head + static_cast<size_t>(cells[c0 + j + c]) * sh.k_row_bytes;
        attn_scores<V, T, HS, CJ>(qh, hd, rows, sh.scale, sh0 + j);
      }
      for (; j < nc; ++j) {
        if (h0 == 0) prefetch_v(c0 + j);
        const uint8_t* row = k_head + static_cast<size_t>(cells[c0 + j]) * sh.k_row_bytes;
        attn_scores<V, T, HS, 1>(qh, hd, &row, sh.scale, sh0 + j);
      }
    }
    // Online softmax step, per head.
    for (int h = 0; h < NH; ++h) {
      float* sh_ = s + h * kAttnChunk;
      if (sh.softcap > 0.0f) {
        const F cap = V::set1(sh.softcap);
        for (int j = 0; j < nc; j += 16) {
          const int n = attn_min(16, nc - j);
          const F x = V::load_n(sh_ + j, n);
          V::store_n(sh_ + j, V::mul(cap, tanh<V>(V::div(x, cap))), n);
        }
      }
      for (int j = nc; j < nc16; ++j) sh_[j] = -kInf;  // e^(−inf − m) = 0
      F vm = V::set1(-kInf);
      for (int j = 0; j < nc16; j += 16) vm = V::max(vm, V::load(sh_ + j));
      const float cm = V::hmax(vm);
      f[h] = 1.0f;
      if (cm > m[h]) {
        if (c0 > 0 || sink[h]) f[h] = exp1<V>(m[h] - cm);
        m[h] = cm;
      }
      const F mv = V::set1(m[h]);
      typename V::D sum = V::dzero();
      for (int j = 0; j < nc16; j += 16) {
        const F e = exp<V>(V::sub(V::load(sh_ + j), mv));
        V::store(sh_ + j, e);
        V::dadd(sum, e);
      }
      l[h] = l[h] * static_cast<double>(f[h]) + V::dhsum(sum);
      post[h] = static_cast<float>(1.0 / l[h]);
    }
    // V rows: each loaded and converted once for HV heads.
    const bool last = c0 + nc == n_cells;
    for (int h0 = 0; h0 < NH; h0 += HV) {
      const AttnAccumArgs a{v_head,
                            sh.v_row_bytes,
                            cells + c0,
                            nc,
                            s + h0 * kAttnChunk,
                            hd,
                            out + static_cast<ptrdiff_t>(h0) * hd,
                            c0 == 0,
                            f + h0,
                            last ? post + h0 : nullptr};
      attn_accumulate_dims<V, T, HV, NV>(a, 0);
    }
  }
}

template <class V, TensorType T>
void attention_typed(const AttentionShape& s, const float* q, const void* k_cache,
                     const void* v_cache, const int32_t* cells, int n_cells, float* out,
                     int head_begin, int head_end) {
  const int hd = s.head_dim;
  const int group = s.n_head / s.n_kv_head;
  const size_t head_bytes = tensor_row_bytes(T, hd);
  const auto* kc = static_cast<const uint8_t*>(k_cache);
  const auto* vc = static_cast<const uint8_t*>(v_cache);
  for (int h0 = head_begin; h0 < head_end;) {
    const int g = h0 / group;
    const int h1 = attn_min((g + 1) * group, head_end);
    const int n = h1 - h0;
    const float* qh = q + static_cast<ptrdiff_t>(h0) * hd;
    float* oh = out + static_cast<ptrdiff_t>(h0) * hd;
    const uint8_t* kh = kc + static_cast<size_t>(g) * head_bytes;
    const uint8_t* vh = vc + static_cast<size_t>(g) * head_bytes;
    const float* sk = s.sinks ? s.sinks + h0 : nullptr;
    if (n >= 8) {
      attn_heads_pass<V, T, 8>(s, qh, kh, vh, cells, n_cells, oh, sk);
      h0 += 8;
    } else if (n >= 4) {
      attn_heads_pass<V, T, 4>(s, qh, kh, vh, cells, n_cells, oh, sk);
      h0 += 4;
    } else if (n >= 2) {
      attn_heads_pass<V, T, 2>(s, qh, kh, vh, cells, n_cells, oh, sk);
      h0 += 2;
    } else {
      attn_heads_pass<V, T, 1>(s, qh, kh, vh, cells, n_cells, oh, sk);
      h0 += 1;
    }
  }
}

// The whole contract of attention.h (shape already checked; scratch is not needed).
template <class V>
void attention(const AttentionShape& s, const float* q, const void* k_cache, const void* v_cache,
               const int32_t* cells, int n_cells, float* out, int head_begin, int head_end) {
  switch (s.kv_type) {
    case TensorType::F32:
      return attention_typed<V, TensorType::F32>(s, q, k_cache, v_cache, cells, n_cells, out,
                                                 head_begin, head_end);
    case TensorType::F16:
      return attention_typed<V, TensorType::F16>(s, q, k_cache, v_cache, cells, n_cells, out,
                                                 head_begin, head_end);
    default:
      return attention_typed<V, TensorType::Q8_0>(s, q, k_cache, v_cache, cells, n_cells, out,
                                                  head_begin, head_end);
  }
}

}  // namespace ubatch::kernels::simd16
