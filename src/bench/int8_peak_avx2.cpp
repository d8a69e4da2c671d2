// AVX2 int8 peak loop: vpmaddubsw → vpmaddwd → vpaddd (compiled with the AVX2 flags; see
// int8_peak_loops.h).
#include <immintrin.h>

#include "bench/int8_peak_loops.h"

namespace ubatch::bench::avx2 {

namespace {

// One chain step: acc += Σ pairs of (u8 a · s8 b) widened to int32. The empty asm makes `a`
// opaque (no instruction), so the compiler cannot share one vpmaddubsw between chains.
inline __m256i step(__m256i acc, __m256i& a, __m256i b, __m256i ones) {
  __asm__ volatile("" : "+x"(a));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
}

}  // namespace

int32_t maddubs_loop(int64_t n_iter, int32_t seed) {
  __m256i a = _mm256_set1_epi32(seed | 0x01010101);
  const __m256i b = _mm256_set1_epi32(0x01fe01fe ^ seed);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
  for (int64_t i = 0; i < n_iter; ++i) {
    c0 = step(c0, a, b, ones);
    c1 = step(c1, a, b, ones);
    c2 = step(c2, a, b, ones);
    c3 = step(c3, a, b, ones);
  }
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3));
  const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  const __m128i q = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  return _mm_cvtsi128_si32(_mm_add_epi32(q, _mm_shuffle_epi32(q, 0xb1)));
}

}  // namespace ubatch::bench::avx2
