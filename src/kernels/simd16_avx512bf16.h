// The AVX-512 vocabulary (simd16_avx512.h) with AVX512_BF16's conversion: store_bf16 in one
// vcvtneps2bf16 instead of the integer rounding. The instruction's rule — to nearest even,
// subnormal inputs to a signed zero, NaN quieted — is the rule simd16.h defines for every level,
// so kernels instantiated with it compute the same bits as with the others. Include it only from
// *_avx512bf16.cpp units (their flags add -mavx512bf16), which run only where
// cpu_features().avx512_bf16.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/simd16_avx512.h"

namespace ubatch::kernels::avx512bf16 {

struct Simd16 : avx512::Simd16 {
  static UBATCH_SIMD16_INLINE __m256i bf16_bits(F a) {
    const __m256bh h = _mm512_cvtneps_pbh(a);
    __m256i r;
    std::memcpy(&r, &h, sizeof r);
    return r;
  }
  static UBATCH_SIMD16_INLINE void store_bf16(uint16_t* p, F a) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_bits(a));
  }
  static UBATCH_SIMD16_INLINE void store_bf16_n(uint16_t* p, F a, int n) {
    _mm256_mask_storeu_epi16(p, first(n), bf16_bits(a));
  }
};

}  // namespace ubatch::kernels::avx512bf16
