// The 16-lane vocabulary of simd16.h on AVX-512 (F, BW, VL, DQ): one zmm register per F.
// Include only from translation units compiled with the AVX-512 flags (*_avx512.cpp).
//
// GCC 12 warns (-Wuninitialized, bug 105593) inside _mm512_castps512_ps256 and friends, whose
// headers use _mm256_undefined_*: low halves are taken with _mm512_extractf32x8_ps(v, 0).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/simd16.h"

#define UBATCH_SIMD16_INLINE inline __attribute__((always_inline))

namespace ubatch::kernels::avx512 {

struct Simd16 {
  using F = __m512;
  struct D {
    __m512d lo, hi;  // lanes 0-7, 8-15
  };
  using M = __mmask16;
  // Blocking hints (simd16.h): logical accumulators per register block (32 zmm).
  static constexpr int kScoreRegs = 16;
  static constexpr int kAccRegs = 16;

  static UBATCH_SIMD16_INLINE __mmask16 first(int n) {
    return static_cast<__mmask16>(n >= 16 ? 0xFFFFu : (1u << (n < 0 ? 0 : n)) - 1u);
  }

  static UBATCH_SIMD16_INLINE F zero() { return _mm512_setzero_ps(); }
  static UBATCH_SIMD16_INLINE F set1(float x) { return _mm512_set1_ps(x); }
  static UBATCH_SIMD16_INLINE F load(const float* p) { return _mm512_loadu_ps(p); }
  static UBATCH_SIMD16_INLINE F load_n(const float* p, int n, float fill = 0.0f) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), first(n), p);
  }
  static UBATCH_SIMD16_INLINE void store(float* p, F a) { _mm512_storeu_ps(p, a); }
  static UBATCH_SIMD16_INLINE void store_n(float* p, F a, int n) {
    _mm512_mask_storeu_ps(p, first(n), a);
  }
  static UBATCH_SIMD16_INLINE float f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
  static UBATCH_SIMD16_INLINE F load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static UBATCH_SIMD16_INLINE F load_f16_n(const uint16_t* p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first(n), p));
  }
  static UBATCH_SIMD16_INLINE F load_bf16(const uint16_t* p) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
  static UBATCH_SIMD16_INLINE F load_bf16_n(const uint16_t* p, int n) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(first(n), p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
  // float → bfloat16 (simd16.h: to nearest even, subnormals to a signed zero, NaN quieted), in
  // integer arithmetic; avx512bf16::Simd16 (simd16_avx512bf16.h) has the one-instruction form.
  static UBATCH_SIMD16_INLINE __m256i bf16_bits(F a) {
    const __m512i x = _mm512_castps_si512(a);
    const __m512i hi = _mm512_srli_epi32(x, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __mmask16 sub = _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7F800000));
    r = _mm512_mask_and_epi32(r, sub, hi, _mm512_set1_epi32(0x8000));
    r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), hi, _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
  }
  static UBATCH_SIMD16_INLINE void store_bf16(uint16_t* p, F a) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_bits(a));
  }
  static UBATCH_SIMD16_INLINE void store_bf16_n(uint16_t* p, F a, int n) {
    _mm256_mask_storeu_epi16(p, first(n), bf16_bits(a));
  }
  static UBATCH_SIMD16_INLINE F load_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }

  static UBATCH_SIMD16_INLINE F add(F a, F b) { return _mm512_add_ps(a, b); }
  static UBATCH_SIMD16_INLINE F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static UBATCH_SIMD16_INLINE F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static UBATCH_SIMD16_INLINE F div(F a, F b) { return _mm512_div_ps(a, b); }
  static UBATCH_SIMD16_INLINE F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static UBATCH_SIMD16_INLINE F fnma(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static UBATCH_SIMD16_INLINE F max(F a, F b) { return _mm512_max_ps(a, b); }
  static UBATCH_SIMD16_INLINE F min(F a, F b) { return _mm512_min_ps(a, b); }
  static UBATCH_SIMD16_INLINE F abs(F a) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7FFFFFFF)));
  }
  static UBATCH_SIMD16_INLINE F round(F a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static UBATCH_SIMD16_INLINE F floor(F a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  }
  static UBATCH_SIMD16_INLINE F exp2i(F n) {
    const __m512i k = _mm512_cvtps_epi32(n);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k, _mm512_set1_epi32(127)), 23));
  }
  static UBATCH_SIMD16_INLINE M lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static UBATCH_SIMD16_INLINE F select(M m, F a, F b) { return _mm512_mask_blend_ps(m, b, a); }

  static UBATCH_SIMD16_INLINE float hsum(F a) {
    const __m256 s8 = _mm256_add_ps(_mm512_extractf32x8_ps(a, 0), _mm512_extractf32x8_ps(a, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    return _mm_cvtss_f32(s4);
  }
  // out[k] = hsum(a[k]) for 16 vectors at once: the same tree, lane for lane (each step adds
  // the same two partial sums; shuffles only gather them from several vectors).
  static UBATCH_SIMD16_INLINE void hsum16(const F* a, float* out) {
    __m512 t[8], u[4];
    for (int k = 0; k < 8; ++k)  // lane i + lane i+8: a[2k] in lanes 0-7, a[2k+1] in 8-15
      t[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44),
                           _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE));
    for (int m = 0; m < 4; ++m)  // i + i+4: 128-bit lane c of u[m] holds a[4m + c]
      u[m] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * m], t[2 * m + 1], 0x88),
                           _mm512_shuffle_f32x4(t[2 * m], t[2 * m + 1], 0xDD));
    __m512 v[2];
    for (int r = 0; r < 2; ++r) {  // i + i+2
      const __m512d w = _mm512_castps_pd(u[2 * r]), y = _mm512_castps_pd(u[2 * r + 1]);
      v[r] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(w, y)),
                           _mm512_castpd_ps(_mm512_unpackhi_pd(w, y)));
    }
    // i + i+1: lane 4c + e of r holds a[4e + c]; transpose back.
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(idx, r));
  }
  static UBATCH_SIMD16_INLINE float hmax(F a) {
    const __m256 m8 = _mm256_max_ps(_mm512_extractf32x8_ps(a, 0), _mm512_extractf32x8_ps(a, 1));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
  }
  static UBATCH_SIMD16_INLINE float lane0(F a) { return _mm512_cvtss_f32(a); }

  static UBATCH_SIMD16_INLINE D dzero() { return {_mm512_setzero_pd(), _mm512_setzero_pd()}; }
  static UBATCH_SIMD16_INLINE void dadd(D& d, F a) {
    d.lo = _mm512_add_pd(d.lo, _mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 0)));
    d.hi = _mm512_add_pd(d.hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1)));
  }
  static UBATCH_SIMD16_INLINE void dadd_sq(D& d, F a) {
    const __m512d lo = _mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 0));
    const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1));
    d.lo = _mm512_fmadd_pd(lo, lo, d.lo);  // the product is exact: same as mul + add
    d.hi = _mm512_fmadd_pd(hi, hi, d.hi);
  }
  static UBATCH_SIMD16_INLINE double dhsum(const D& d) {
    const __m512d s8 = _mm512_add_pd(d.lo, d.hi);
    const __m256d s4 = _mm256_add_pd(_mm256_castps_pd(_mm512_extractf32x8_ps(_mm512_castpd_ps(s8), 0)),
                                     _mm256_castps_pd(_mm512_extractf32x8_ps(_mm512_castpd_ps(s8), 1)));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
  }
};

}  // namespace ubatch::kernels::avx512
