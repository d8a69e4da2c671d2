// The 16-lane vocabulary of simd16.h on AVX2 + FMA + F16C: two ymm registers per F (lanes
// 0-7 in lo, 8-15 in hi). Include only from translation units compiled with the AVX2 flags
// (*_avx2.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/simd16.h"

#define UBATCH_SIMD16_INLINE inline __attribute__((always_inline))

namespace ubatch::kernels::avx2 {

struct Simd16 {
  struct F {
    __m256 lo, hi;
  };
  struct D {
    __m256d d0, d1, d2, d3;  // lanes 0-3, 4-7, 8-11, 12-15
  };
  struct M {
    __m256 lo, hi;  // all-ones lanes where true
  };
  // Blocking hints (simd16.h): logical accumulators per register block (16 ymm, two each).
  static constexpr int kScoreRegs = 4;
  static constexpr int kAccRegs = 4;

  static UBATCH_SIMD16_INLINE __m256i lanes_below(int n, int base) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n - base), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }

  static UBATCH_SIMD16_INLINE F zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static UBATCH_SIMD16_INLINE F set1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
  static UBATCH_SIMD16_INLINE F load(const float* p) {
    return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
  }
  static UBATCH_SIMD16_INLINE F load_n(const float* p, int n, float fill = 0.0f) {
    const __m256i m0 = lanes_below(n, 0), m1 = lanes_below(n, 8);
    const __m256 f = _mm256_set1_ps(fill);
    return {_mm256_blendv_ps(f, _mm256_maskload_ps(p, m0), _mm256_castsi256_ps(m0)),
            _mm256_blendv_ps(f, _mm256_maskload_ps(p + 8, m1), _mm256_castsi256_ps(m1))};
  }
  static UBATCH_SIMD16_INLINE void store(float* p, const F& a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
  }
  static UBATCH_SIMD16_INLINE void store_n(float* p, const F& a, int n) {
    _mm256_maskstore_ps(p, lanes_below(n, 0), a.lo);
    _mm256_maskstore_ps(p + 8, lanes_below(n, 8), a.hi);
  }
  static UBATCH_SIMD16_INLINE float f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
  static UBATCH_SIMD16_INLINE F load_f16(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static UBATCH_SIMD16_INLINE F load_f16_n(const uint16_t* p, int n) {
    alignas(32) uint16_t buf[16] = {};
    std::memcpy(buf, p, sizeof(uint16_t) * static_cast<size_t>(n < 16 ? n : 16));
    return load_f16(buf);
  }
  static UBATCH_SIMD16_INLINE F load_bf16(const uint16_t* p) {
    const __m256i a = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(a, 16)), _mm256_castsi256_ps(_mm256_slli_epi32(b, 16))};
  }
  static UBATCH_SIMD16_INLINE F load_bf16_n(const uint16_t* p, int n) {
    alignas(32) uint16_t buf[16] = {};
    std::memcpy(buf, p, sizeof(uint16_t) * static_cast<size_t>(n < 16 ? n : 16));
    return load_bf16(buf);
  }
  // float → bfloat16 (simd16.h: to nearest even, subnormals to a signed zero, NaN quieted), in
  // integer arithmetic.
  static UBATCH_SIMD16_INLINE __m256i bf16_bits8(__m256 a) {
    const __m256i x = _mm256_castps_si256(a);
    const __m256i hi = _mm256_srli_epi32(x, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    const __m256i sub = _mm256_cmpeq_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7F800000)), _mm256_setzero_si256());
    r = _mm256_blendv_epi8(r, _mm256_and_si256(hi, _mm256_set1_epi32(0x8000)), sub);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  }
  static UBATCH_SIMD16_INLINE void store_bf16(uint16_t* p, const F& a) {
    // packus interleaves the 128-bit halves (lo 0-3, hi 0-3, lo 4-7, hi 4-7); the permute restores lane order.
    const __m256i w = _mm256_packus_epi32(bf16_bits8(a.lo), bf16_bits8(a.hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(w, 0xD8));
  }
  static UBATCH_SIMD16_INLINE void store_bf16_n(uint16_t* p, const F& a, int n) {
    alignas(32) uint16_t buf[16];
    store_bf16(buf, a);
    std::memcpy(p, buf, sizeof(uint16_t) * static_cast<size_t>(n < 0 ? 0 : n < 16 ? n : 16));
  }
  static UBATCH_SIMD16_INLINE F load_i8(const int8_t* p) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)),
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)))};
  }

  static UBATCH_SIMD16_INLINE F add(const F& a, const F& b) {
    return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
  }
  static UBATCH_SIMD16_INLINE F sub(const F& a, const F& b) {
    return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)};
  }
  static UBATCH_SIMD16_INLINE F mul(const F& a, const F& b) {
    return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
  }
  static UBATCH_SIMD16_INLINE F div(const F& a, const F& b) {
    return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)};
  }
  static UBATCH_SIMD16_INLINE F fma(const F& a, const F& b, const F& c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static UBATCH_SIMD16_INLINE F fnma(const F& a, const F& b, const F& c) {
    return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)};
  }
  static UBATCH_SIMD16_INLINE F max(const F& a, const F& b) {
    return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)};
  }
  static UBATCH_SIMD16_INLINE F min(const F& a, const F& b) {
    return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)};
  }
  static UBATCH_SIMD16_INLINE F abs(const F& a) {
    const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    return {_mm256_and_ps(a.lo, m), _mm256_and_ps(a.hi, m)};
  }
  static UBATCH_SIMD16_INLINE F round(const F& a) {
    constexpr int kMode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return {_mm256_round_ps(a.lo, kMode), _mm256_round_ps(a.hi, kMode)};
  }
  static UBATCH_SIMD16_INLINE F floor(const F& a) {
    constexpr int kMode = _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC;
    return {_mm256_round_ps(a.lo, kMode), _mm256_round_ps(a.hi, kMode)};
  }
  static UBATCH_SIMD16_INLINE __m256 exp2i8(__m256 n) {
    const __m256i k = _mm256_cvtps_epi32(n);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
  }
  static UBATCH_SIMD16_INLINE F exp2i(const F& n) { return {exp2i8(n.lo), exp2i8(n.hi)}; }
  static UBATCH_SIMD16_INLINE M lt(const F& a, const F& b) {
    return {_mm256_cmp_ps(a.lo, b.lo, _CMP_LT_OQ), _mm256_cmp_ps(a.hi, b.hi, _CMP_LT_OQ)};
  }
  static UBATCH_SIMD16_INLINE F select(const M& m, const F& a, const F& b) {
    return {_mm256_blendv_ps(b.lo, a.lo, m.lo), _mm256_blendv_ps(b.hi, a.hi, m.hi)};
  }

  static UBATCH_SIMD16_INLINE float hsum(const F& a) {
    const __m256 s8 = _mm256_add_ps(a.lo, a.hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    return _mm_cvtss_f32(s4);
  }
  // out[k] = hsum(a[k]) for 16 vectors.
  static UBATCH_SIMD16_INLINE void hsum16(const F* a, float* out) {
    for (int k = 0; k < 16; ++k) out[k] = hsum(a[k]);
  }
  static UBATCH_SIMD16_INLINE float hmax(const F& a) {
    const __m256 m8 = _mm256_max_ps(a.lo, a.hi);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
  }
  static UBATCH_SIMD16_INLINE float lane0(const F& a) { return _mm256_cvtss_f32(a.lo); }

  static UBATCH_SIMD16_INLINE D dzero() {
    return {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  }
  static UBATCH_SIMD16_INLINE void dadd(D& d, const F& a) {
    d.d0 = _mm256_add_pd(d.d0, _mm256_cvtps_pd(_mm256_castps256_ps128(a.lo)));
    d.d1 = _mm256_add_pd(d.d1, _mm256_cvtps_pd(_mm256_extractf128_ps(a.lo, 1)));
    d.d2 = _mm256_add_pd(d.d2, _mm256_cvtps_pd(_mm256_castps256_ps128(a.hi)));
    d.d3 = _mm256_add_pd(d.d3, _mm256_cvtps_pd(_mm256_extractf128_ps(a.hi, 1)));
  }
  static UBATCH_SIMD16_INLINE void dadd_sq(D& d, const F& a) {
    const __m256d x0 = _mm256_cvtps_pd(_mm256_castps256_ps128(a.lo));
    const __m256d x1 = _mm256_cvtps_pd(_mm256_extractf128_ps(a.lo, 1));
    const __m256d x2 = _mm256_cvtps_pd(_mm256_castps256_ps128(a.hi));
    const __m256d x3 = _mm256_cvtps_pd(_mm256_extractf128_ps(a.hi, 1));
    d.d0 = _mm256_fmadd_pd(x0, x0, d.d0);  // the product is exact: same as mul + add
    d.d1 = _mm256_fmadd_pd(x1, x1, d.d1);
    d.d2 = _mm256_fmadd_pd(x2, x2, d.d2);
    d.d3 = _mm256_fmadd_pd(x3, x3, d.d3);
  }
  static UBATCH_SIMD16_INLINE double dhsum(const D& d) {
    const __m256d s4 = _mm256_add_pd(_mm256_add_pd(d.d0, d.d2), _mm256_add_pd(d.d1, d.d3));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
  }
};

}  // namespace ubatch::kernels::avx2
