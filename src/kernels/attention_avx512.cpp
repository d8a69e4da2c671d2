// AVX-512 attention over listed KV cells (contract in attention.h).
//
// The query heads that share a KV head (up to kMaxHeads of them) go through the listed cells
// together, kChunk cells at a time, so each K and V row is read from memory once per pass
// rather than once per query head. Per head and chunk: scores q·K (vectorized over
// head_dim), then an online softmax step (Milakov & Gimelshein 2018; as in FlashAttention):
// the running maximum m, the running sum l (double) and the output accumulator out are
// rescaled by e^(m_old − m_new) when a chunk raises the maximum; then out += Σ_j p_j·V_j in
// the listed order; finally out /= l. Each head's arithmetic depends only on its query, the
// cells and their contents (chunk boundaries are fixed multiples of kChunk from the first
// listed cell), never on which heads share the pass: a head computed alone or in any head
// range gives the same bits.
//
// GCC 12 warns (-Wuninitialized, bug 105593) inside _mm512_castps512_ps256 and friends,
// whose headers use _mm256_undefined_*: low halves are taken with _mm512_extractf32x8_ps(v, 0).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/attention.h"

namespace ubatch::kernels::avx512 {

double exp_shift_sum(float* x, int64_t n, float shift);  // ops_avx512.cpp

namespace {

constexpr size_t kQ8Block = 34;  // Q8_0: {f16 d; int8 qs[32]}
constexpr int kChunk = 64;       // cells per online-softmax step (fixed: part of the rounding)
constexpr int kMaxHeads = 8;     // query heads per pass over the cells

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m512 load_i8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Horizontal reductions, in a fixed order (upper half onto lower half, repeatedly).
inline float hsum16(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}
inline float hmax16(__m512 v) {
  const __m256 m8 = _mm256_max_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  return _mm_cvtss_f32(m4);
}

inline __mmask16 tail_mask(int rest) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(rest)) - 1u);
}

// 16 values of type T (F32 or F16) starting at element i of a KV head at p.
template <TensorType T>
inline __m512 load16(const uint8_t* p, int i) {
  if constexpr (T == TensorType::F32)
    return _mm512_loadu_ps(reinterpret_cast<const float*>(p) + i);
  else
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i)));
}

// The values under mask m from element i, zeros elsewhere.
template <TensorType T>
inline __m512 load16_masked(const uint8_t* p, int i, __mmask16 m) {
  if constexpr (T == TensorType::F32)
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(p) + i);
  else
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * i));
}

// q · k over n elements; k of type T (a KV head's values).
template <TensorType T>
float dot(const float* q, const uint8_t* k, int n) {
  if constexpr (T == TensorType::Q8_0) {
    __m512 acc = _mm512_setzero_ps();
    for (int b = 0; b < n / 32; ++b) {
      const uint8_t* blk = k + b * kQ8Block;
      const float* qb = q + b * 32;
      __m512 s = _mm512_mul_ps(_mm512_loadu_ps(qb), load_i8x16(blk + 2));
      s = _mm512_fmadd_ps(_mm512_loadu_ps(qb + 16), load_i8x16(blk + 18), s);
      acc = _mm512_fmadd_ps(s, _mm512_set1_ps(half_at(blk)), acc);
    }
    return hsum16(acc);
  } else {
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
      acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16<T>(k, i), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), load16<T>(k, i + 16), acc1);
    }
    if (i + 16 <= n) {
      acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16<T>(k, i), acc0);
      i += 16;
    }
    if (i < n) {
      const __mmask16 m = tail_mask(n - i);
      acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), load16_masked<T>(k, i, m), acc1);
    }
    return hsum16(_mm512_add_ps(acc0, acc1));
  }
}

float max_of(const float* x, int n) {
  __m512 m = _mm512_set1_ps(x[0]);
  int i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
  if (i < n) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(m, tail_mask(n - i), x + i));
  return hmax16(m);
}

void scale_row(float* o, int n, float f) {
  const __m512 vf = _mm512_set1_ps(f);
  int i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_loadu_ps(o + i), vf));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, o + i), vf));
  }
}

// o[c0, c0 + dims) += Σ_j p[j] · V[cells[j]][c0 ...] with NV vector accumulators in registers
// (the last covering `last` <= 16 dims; fewer than 16 only for F32/F16 tails).
template <TensorType T, int NV>
void accumulate_chunk(const uint8_t* v_head, size_t row_bytes, const int32_t* cells, int n_cells,
                      const float* p, int c0, int last, float* o) {
  const __mmask16 mlast = last == 16 ? static_cast<__mmask16>(0xFFFF) : tail_mask(last);
  __m512 acc[NV];
  for (int v = 0; v + 1 < NV; ++v) acc[v] = _mm512_loadu_ps(o + c0 + 16 * v);
  acc[NV - 1] = _mm512_maskz_loadu_ps(mlast, o + c0 + 16 * (NV - 1));
  for (int j = 0; j < n_cells; ++j) {
    const uint8_t* row = v_head + static_cast<size_t>(cells[j]) * row_bytes;
    if constexpr (T == TensorType::Q8_0) {
      static_assert(NV % 2 == 0);
      for (int b = 0; b < NV / 2; ++b) {
        const uint8_t* blk = row + static_cast<size_t>(c0 / 32 + b) * kQ8Block;
        const __m512 pd = _mm512_set1_ps(p[j] * half_at(blk));
        acc[2 * b] = _mm512_fmadd_ps(pd, load_i8x16(blk + 2), acc[2 * b]);
        acc[2 * b + 1] = _mm512_fmadd_ps(pd, load_i8x16(blk + 18), acc[2 * b + 1]);
      }
    } else {
      const __m512 pj = _mm512_set1_ps(p[j]);
      for (int v = 0; v + 1 < NV; ++v)
        acc[v] = _mm512_fmadd_ps(pj, load16<T>(row, c0 + 16 * v), acc[v]);
      const int il = c0 + 16 * (NV - 1);
      const __m512 x = last == 16 ? load16<T>(row, il) : load16_masked<T>(row, il, mlast);
      acc[NV - 1] = _mm512_fmadd_ps(pj, x, acc[NV - 1]);
    }
  }
  for (int v = 0; v + 1 < NV; ++v) _mm512_storeu_ps(o + c0 + 16 * v, acc[v]);
  _mm512_mask_storeu_ps(o + c0 + 16 * (NV - 1), mlast, acc[NV - 1]);
}

template <TensorType T>
void accumulate(const uint8_t* v_head, size_t row_bytes, const int32_t* cells, int n_cells,
                const float* p, int head_dim, float* o) {
  constexpr int kDims = 128;  // 8 accumulators
  for (int c0 = 0; c0 < head_dim; c0 += kDims) {
    const int dims = head_dim - c0 < kDims ? head_dim - c0 : kDims;
    const int nv = (dims + 15) / 16;
    const int last = dims - 16 * (nv - 1);
    switch (nv) {
      case 8: accumulate_chunk<T, 8>(v_head, row_bytes, cells, n_cells, p, c0, last, o); break;
      case 6: accumulate_chunk<T, 6>(v_head, row_bytes, cells, n_cells, p, c0, last, o); break;
      case 4: accumulate_chunk<T, 4>(v_head, row_bytes, cells, n_cells, p, c0, last, o); break;
      case 2: accumulate_chunk<T, 2>(v_head, row_bytes, cells, n_cells, p, c0, last, o); break;
      default:
        if constexpr (T != TensorType::Q8_0) {  // Q8_0 chunks hold whole 32-value blocks
          switch (nv) {
            case 7: accumulate_chunk<T, 7>(v_head, row_bytes, cells, n_cells, p, c0, last, o); break;
            case 5: accumulate_chunk<T, 5>(v_head, row_bytes, cells, n_cells, p, c0, last, o); break;
            case 3: accumulate_chunk<T, 3>(v_head, row_bytes, cells, n_cells, p, c0, last, o); break;
            default: accumulate_chunk<T, 1>(v_head, row_bytes, cells, n_cells, p, c0, last, o); break;
          }
        }
        break;
    }
  }
}

// Heads [0, nh) of q and out (rows of head_dim) over one KV head (k_head, v_head).
template <TensorType T>
void heads_pass(const AttentionShape& s, const float* q, const uint8_t* k_head,
                const uint8_t* v_head, const int32_t* cells, int n_cells, float* out, int nh) {
  const int hd = s.head_dim;
  float m[kMaxHeads];
  double l[kMaxHeads];
  alignas(64) float p[kMaxHeads][kChunk];
  for (int i = 0; i < nh; ++i) {
    m[i] = -std::numeric_limits<float>::infinity();
    l[i] = 0.0;
    std::memset(out + static_cast<int64_t>(i) * hd, 0, sizeof(float) * static_cast<size_t>(hd));
  }
  if (n_cells == 0) return;
  for (int c0 = 0; c0 < n_cells; c0 += kChunk) {
    const int nc = n_cells - c0 < kChunk ? n_cells - c0 : kChunk;
    for (int j = 0; j < nc; ++j) {
      const uint8_t* krow = k_head + static_cast<size_t>(cells[c0 + j]) * s.k_row_bytes;
      for (int i = 0; i < nh; ++i) {
        float sc = dot<T>(q + static_cast<int64_t>(i) * hd, krow, hd) * s.scale;
        if (s.softcap > 0.0f) sc = s.softcap * std::tanh(sc / s.softcap);
        p[i][j] = sc;
      }
    }
    for (int i = 0; i < nh; ++i) {
      float* oi = out + static_cast<int64_t>(i) * hd;
      const float cm = max_of(p[i], nc);
      if (cm > m[i]) {
        if (l[i] > 0.0) {
          float f = m[i];
          exp_shift_sum(&f, 1, cm);  // e^(m_old − m_new)
          scale_row(oi, hd, f);
          l[i] *= f;
        }
        m[i] = cm;
      }
      l[i] += exp_shift_sum(p[i], nc, m[i]);
      accumulate<T>(v_head, s.v_row_bytes, cells + c0, nc, p[i], hd, oi);
    }
  }
  for (int i = 0; i < nh; ++i)
    scale_row(out + static_cast<int64_t>(i) * hd, hd, static_cast<float>(1.0 / l[i]));
}

template <TensorType T>
void attention_typed(const AttentionShape& s, const float* q, const void* k_cache,
                     const void* v_cache, const int32_t* cells, int n_cells, float* out,
                     int head_begin, int head_end) {
  const int hd = s.head_dim;
  const int group = s.n_head / s.n_kv_head;
  const size_t head_bytes = T == TensorType::F32   ? size_t{4} * hd
                            : T == TensorType::F16 ? size_t{2} * hd
                                                   : kQ8Block * (hd / 32);
  for (int h0 = head_begin; h0 < head_end;) {
    const int g = h0 / group;
    int h1 = (g + 1) * group;
    if (h1 > head_end) h1 = head_end;
    if (h1 > h0 + kMaxHeads) h1 = h0 + kMaxHeads;
    heads_pass<T>(s, q + static_cast<int64_t>(h0) * hd,
                  static_cast<const uint8_t*>(k_cache) + g * head_bytes,
                  static_cast<const uint8_t*>(v_cache) + g * head_bytes, cells, n_cells,
                  out + static_cast<int64_t>(h0) * hd, h1 - h0);
    h0 = h1;
  }
}

}  // namespace

// scratch is not needed: scores live in a per-chunk stack buffer.
void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* /*scratch*/, int head_begin, int head_end) {
  switch (shape.kv_type) {
    case TensorType::F32:
      return attention_typed<TensorType::F32>(shape, q, k_cache, v_cache, cells, n_cells, out,
                                              head_begin, head_end);
    case TensorType::F16:
      return attention_typed<TensorType::F16>(shape, q, k_cache, v_cache, cells, n_cells, out,
                                              head_begin, head_end);
    default:
      return attention_typed<TensorType::Q8_0>(shape, q, k_cache, v_cache, cells, n_cells, out,
                                               head_begin, head_end);
  }
}

}  // namespace ubatch::kernels::avx512
