// AVX2 + FMA + F16C attention over listed KV cells (contract in attention.h).
//
// Same method as attention_avx512.cpp, with 8-float vectors: the query heads sharing a KV head
// (up to kMaxHeads) go through the cells together, kChunk cells per online-softmax step
// (running max, running sum in double, output rescaled when the max rises), so each K/V row
// is read once per pass. A head's arithmetic depends only on its query, the listed cells (in
// order) and their contents — never on which other heads share the pass.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/attention.h"

namespace ubatch::kernels::avx2 {

double exp_shift_sum(float* x, int64_t n, float shift);  // ops_avx2.cpp

namespace {

constexpr size_t kQ8Block = 34;  // Q8_0: {f16 d; int8 qs[32]}
constexpr int kChunk = 64;       // cells per online-softmax step (fixed: part of the rounding)
constexpr int kMaxHeads = 8;     // query heads per pass over the cells

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256 load_f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256 load_i8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// Element i of a KV head at p, type T (F32 or F16).
template <TensorType T>
inline float value_at(const uint8_t* p, int i) {
  if constexpr (T == TensorType::F32) {
    float x;
    std::memcpy(&x, p + 4 * i, 4);
    return x;
  } else {
    return half_at(p + 2 * i);
  }
}

template <TensorType T>
inline __m256 load8(const uint8_t* p, int i) {
  if constexpr (T == TensorType::F32)
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + i);
  else
    return load_f16x8(p + 2 * i);
}

// q · k over n elements; k of type T (a KV head's values).
template <TensorType T>
float dot(const float* q, const uint8_t* k, int n) {
  if constexpr (T == TensorType::Q8_0) {
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < n / 32; ++b) {
      const uint8_t* blk = k + b * kQ8Block;
      const float* qb = q + b * 32;
      __m256 s0 = _mm256_mul_ps(_mm256_loadu_ps(qb), load_i8x8(blk + 2));
      __m256 s1 = _mm256_mul_ps(_mm256_loadu_ps(qb + 8), load_i8x8(blk + 10));
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qb + 16), load_i8x8(blk + 18), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(qb + 24), load_i8x8(blk + 26), s1);
      acc = _mm256_fmadd_ps(_mm256_add_ps(s0, s1), _mm256_set1_ps(half_at(blk)), acc);
    }
    return hsum(acc);
  } else {
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8<T>(k, i), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8<T>(k, i + 8), acc1);
    }
    if (i + 8 <= n) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8<T>(k, i), acc0);
      i += 8;
    }
    float s = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; ++i) s += q[i] * value_at<T>(k, i);
    return s;
  }
}

float max_of(const float* x, int n) {
  int i = 0;
  float mx = x[0];
  if (n >= 8) {
    __m256 m = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    mx = hmax(m);
  }
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  return mx;
}

void scale_row(float* o, int n, float f) {
  const __m256 vf = _mm256_set1_ps(f);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(o + i), vf));
  for (; i < n; ++i) o[i] *= f;
}

// o[c0, c0 + 8·NV) += Σ_j p[j] · V[cells[j]][c0 ...], NV accumulators in registers.
template <TensorType T, int NV>
void accumulate_chunk(const uint8_t* v_head, size_t row_bytes, const int32_t* cells, int n_cells,
                      const float* p, int c0, float* o) {
  __m256 acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = _mm256_loadu_ps(o + c0 + 8 * v);
  for (int j = 0; j < n_cells; ++j) {
    const uint8_t* row = v_head + static_cast<size_t>(cells[j]) * row_bytes;
    if constexpr (T == TensorType::Q8_0) {
      static_assert(NV % 4 == 0);
      for (int b = 0; b < NV / 4; ++b) {
        const uint8_t* blk = row + static_cast<size_t>(c0 / 32 + b) * kQ8Block;
        const __m256 pd = _mm256_set1_ps(p[j] * half_at(blk));
        for (int v = 0; v < 4; ++v)
          acc[4 * b + v] = _mm256_fmadd_ps(pd, load_i8x8(blk + 2 + 8 * v), acc[4 * b + v]);
      }
    } else {
      const __m256 pj = _mm256_set1_ps(p[j]);
      for (int v = 0; v < NV; ++v) acc[v] = _mm256_fmadd_ps(pj, load8<T>(row, c0 + 8 * v), acc[v]);
    }
  }
  for (int v = 0; v < NV; ++v) _mm256_storeu_ps(o + c0 + 8 * v, acc[v]);
}

template <TensorType T>
void accumulate(const uint8_t* v_head, size_t row_bytes, const int32_t* cells, int n_cells,
                const float* p, int head_dim, float* o) {
  constexpr int kDims = 64;  // 8 accumulators
  const int n_vec_dims = head_dim - head_dim % 8;
  for (int c0 = 0; c0 < n_vec_dims; c0 += kDims) {
    const int nv = (n_vec_dims - c0 >= kDims) ? 8 : (n_vec_dims - c0) / 8;
    if constexpr (T == TensorType::Q8_0) {
      // head_dim % 32 == 0: chunks hold whole blocks.
      if (nv == 8) accumulate_chunk<T, 8>(v_head, row_bytes, cells, n_cells, p, c0, o);
      else accumulate_chunk<T, 4>(v_head, row_bytes, cells, n_cells, p, c0, o);
    } else {
      switch (nv) {
        case 8: accumulate_chunk<T, 8>(v_head, row_bytes, cells, n_cells, p, c0, o); break;
        case 7: accumulate_chunk<T, 7>(v_head, row_bytes, cells, n_cells, p, c0, o); break;
        case 6: accumulate_chunk<T, 6>(v_head, row_bytes, cells, n_cells, p, c0, o); break;
        case 5: accumulate_chunk<T, 5>(v_head, row_bytes, cells, n_cells, p, c0, o); break;
        case 4: accumulate_chunk<T, 4>(v_head, row_bytes, cells, n_cells, p, c0, o); break;
        case 3: accumulate_chunk<T, 3>(v_head, row_bytes, cells, n_cells, p, c0, o); break;
        case 2: accumulate_chunk<T, 2>(v_head, row_bytes, cells, n_cells, p, c0, o); break;
        default: accumulate_chunk<T, 1>(v_head, row_bytes, cells, n_cells, p, c0, o); break;
      }
    }
  }
  if constexpr (T != TensorType::Q8_0) {
    for (int d = n_vec_dims; d < head_dim; ++d) {
      float acc = o[d];
      for (int j = 0; j < n_cells; ++j)
        acc += p[j] * value_at<T>(v_head + static_cast<size_t>(cells[j]) * row_bytes, d);
      o[d] = acc;
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
  alignas(32) float p[kMaxHeads][kChunk];
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

}  // namespace ubatch::kernels::avx2
