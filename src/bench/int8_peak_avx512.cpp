// AVX-512 VNNI int8 peak loop (compiled with the AVX-512 + VNNI flags; see int8_peak_loops.h).
#include <immintrin.h>

#include "bench/int8_peak_loops.h"

namespace ubatch::bench::avx512 {

int32_t vnni_loop(int64_t n_iter, int32_t seed) {
  const __m512i a = _mm512_set1_epi32(seed | 0x01010101);
  const __m512i b = _mm512_set1_epi32(0x01fe01fe ^ seed);
  __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
  __m512i c8 = c0, c9 = c0, c10 = c0, c11 = c0, c12 = c0, c13 = c0, c14 = c0, c15 = c0;
  // Each iteration is two asm statements of 8 vpdpbusd (an asm takes at most 30 operands):
  // GCC 12 surrounds 16 chained _mm512_dpbusd_epi32 in a loop with register copies and
  // spills; here the accumulators stay in their registers.
#define UBATCH_DPBUSD8(x0, x1, x2, x3, x4, x5, x6, x7)                                          \
  __asm__ volatile("vpdpbusd %[b], %[a], %[r0]\n\tvpdpbusd %[b], %[a], %[r1]\n\t"              \
                   "vpdpbusd %[b], %[a], %[r2]\n\tvpdpbusd %[b], %[a], %[r3]\n\t"              \
                   "vpdpbusd %[b], %[a], %[r4]\n\tvpdpbusd %[b], %[a], %[r5]\n\t"              \
                   "vpdpbusd %[b], %[a], %[r6]\n\tvpdpbusd %[b], %[a], %[r7]"                    \
                   : [r0] "+v"(x0), [r1] "+v"(x1), [r2] "+v"(x2), [r3] "+v"(x3), [r4] "+v"(x4), \
                     [r5] "+v"(x5), [r6] "+v"(x6), [r7] "+v"(x7)                               \
                   : [a] "v"(a), [b] "v"(b))
  for (int64_t i = 0; i < n_iter; ++i) {
    UBATCH_DPBUSD8(c0, c1, c2, c3, c4, c5, c6, c7);
    UBATCH_DPBUSD8(c8, c9, c10, c11, c12, c13, c14, c15);
  }
#undef UBATCH_DPBUSD8
  const __m512i s0 = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                                      _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7)));
  const __m512i s1 = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)),
                                      _mm512_add_epi32(_mm512_add_epi32(c12, c13), _mm512_add_epi32(c14, c15)));
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, _mm512_add_epi32(s0, s1));
  uint32_t sum = 0;  // wraps: a checksum
  for (int32_t v : lanes) sum += static_cast<uint32_t>(v);
  return static_cast<int32_t>(sum);
}

}  // namespace ubatch::bench::avx512
