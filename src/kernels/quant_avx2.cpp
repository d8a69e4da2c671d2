// AVX2 dequantization for the types the model reads rows of (embeddings, KV): the same
// arithmetic, in the same order, as the scalar reference in quant.cpp, so the bits agree.
//
// This file is compiled with -mavx2 -mfma -mf16c and is only called when the CPU has them.
// It keeps to raw pointers and intrinsics (no std templates), so no AVX2-compiled inline
// function can be picked by the linker for code that runs on other CPUs.
#include <immintrin.h>

#include <cstring>

#include "kernels/quant_blocks.h"

namespace ubatch::kernels::detail {

namespace {

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// 16 nibbles -> 32 bytes: low nibbles of q[0..15] then high nibbles.
inline __m256i unpack_nibbles(const uint8_t* q) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(v, m);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

// y[0..31] = float(int8 bytes of v (signed)) * d
inline void store_scaled_i8(__m256i v, __m256 d, float* y) {
  const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
  const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
  const __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
  const __m256 f2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
  const __m256 f3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
  _mm256_storeu_ps(y, _mm256_mul_ps(f0, d));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(f1, d));
  _mm256_storeu_ps(y + 16, _mm256_mul_ps(f2, d));
  _mm256_storeu_ps(y + 24, _mm256_mul_ps(f3, d));
}

// y[0..31] = dl * float(bytes of v (unsigned, < 128)) - ml
inline void store_scaled_u8_min(__m256i v, __m256 dl, __m256 ml, float* y) {
  const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
  const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
  const __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
  const __m256 f2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
  const __m256 f3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
  _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(dl, f0), ml));
  _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(dl, f1), ml));
  _mm256_storeu_ps(y + 16, _mm256_sub_ps(_mm256_mul_ps(dl, f2), ml));
  _mm256_storeu_ps(y + 24, _mm256_sub_ps(_mm256_mul_ps(dl, f3), ml));
}

void dq_f16(const uint16_t* s, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) y[i] = half_to_float(s[i]);
}

void dq_bf16(const uint16_t* s, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
  }
  for (; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(s[i]) << 16;
    std::memcpy(y + i, &u, 4);
  }
}

void dq_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK)
    store_scaled_i8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs)),
                    _mm256_set1_ps(half_to_float(b[i].d)), y);
}

void dq_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  const __m256i eight = _mm256_set1_epi8(8);
  for (int64_t i = 0; i < nb; ++i, y += kQK)
    store_scaled_i8(_mm256_sub_epi8(unpack_nibbles(b[i].qs), eight),
                    _mm256_set1_ps(half_to_float(b[i].d)), y);
}

// The 32 fifth bits of a Q5 block as 0x10 / 0x00 bytes, element order.
inline __m256i q5_high_bits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  // Byte i gets bits 8*(i/8) .. 8*(i/8)+7 of h; select bit i % 8 of it.
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)), shuf);
  v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

void dq_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  const __m256i sixteen = _mm256_set1_epi8(16);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const __m256i q = _mm256_or_si256(unpack_nibbles(b[i].qs), q5_high_bits(b[i].qh));
    store_scaled_i8(_mm256_sub_epi8(q, sixteen), _mm256_set1_ps(half_to_float(b[i].d)), y);
  }
}

void dq_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = half_to_float(b[i].d), dmin = half_to_float(b[i].dmin);
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * j));
      for (int s = 0; s < 2; ++s) {
        uint8_t sc, mn;
        k4_scale_min(b[i].scales, 2 * j + s, sc, mn);
        const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(mn);
        const __m256i v = _mm256_and_si256(s ? _mm256_srli_epi16(q, 4) : q, m4);
        store_scaled_u8_min(v, _mm256_set1_ps(dl), _mm256_set1_ps(ml), y);
        y += 32;
      }
    }
  }
}

void dq_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  const __m256i off = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = half_to_float(b[i].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh + 32 * h));
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      for (int c = 0; c < 4; ++c) {
        const __m256i lsrc = (c & 1) ? l1 : l0;
        const __m256i low = _mm256_and_si256(c < 2 ? lsrc : _mm256_srli_epi16(lsrc, 4), m4);
        const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), m2);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), off);
        // 32 values, sub-blocks of 16 with their own scale: two halves.
        const float dl0 = d * static_cast<float>(b[i].scales[8 * h + 2 * c]);
        const float dl1 = d * static_cast<float>(b[i].scales[8 * h + 2 * c + 1]);
        const __m128i q0 = _mm256_castsi256_si128(q), q1 = _mm256_extracti128_si256(q, 1);
        const __m256 d0 = _mm256_set1_ps(dl0), d1 = _mm256_set1_ps(dl1);
        _mm256_storeu_ps(y, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q0))));
        _mm256_storeu_ps(y + 8, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q0, 8)))));
        _mm256_storeu_ps(y + 16, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q1))));
        _mm256_storeu_ps(y + 24, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q1, 8)))));
        y += 32;
      }
    }
  }
}

}  // namespace

bool dequantize_row_avx2_supports(TensorType t) {
  switch (t) {
    case TensorType::F16: case TensorType::BF16: case TensorType::Q8_0: case TensorType::Q4_0:
    case TensorType::Q5_0: case TensorType::Q4_K: case TensorType::Q6_K:
      return true;
    default:
      return false;
  }
}

void dequantize_row_avx2(TensorType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case TensorType::F16: return dq_f16(static_cast<const uint16_t*>(src), dst, n);
    case TensorType::BF16: return dq_bf16(static_cast<const uint16_t*>(src), dst, n);
    case TensorType::Q8_0: return dq_q8_0(static_cast<const BlockQ8_0*>(src), dst, n / kQK);
    case TensorType::Q4_0: return dq_q4_0(static_cast<const BlockQ4_0*>(src), dst, n / kQK);
    case TensorType::Q5_0: return dq_q5_0(static_cast<const BlockQ5_0*>(src), dst, n / kQK);
    case TensorType::Q4_K: return dq_q4_k(static_cast<const BlockQ4_K*>(src), dst, n / kQK_K);
    case TensorType::Q6_K: return dq_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / kQK_K);
    default: return dequantize_row_scalar(t, src, dst, n);
  }
}

void quantize_row_f16_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

}  // namespace ubatch::kernels::detail
