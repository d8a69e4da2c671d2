// Dot-product level of the aarch64 packed GEMM (SDOT, ARMv8.2 FEAT_DotProd: Cortex-A76/A78AE
// of the Jetson Orin and Raspberry Pi 5, Neoverse N1/V1 of Graviton 2/3, Apple cores).
// Compiled with -march=armv8.2-a+dotprod; reached only when getauxval reports HWCAP_ASIMDDP.
// The driver, unpacker and float steps are in gemm_neon_inl.h; activations are quantized by
// pack_acts_neon (gemm_neon.cpp).
//
// Integer dot: per step k the panel's 64 bytes are four vectors of 4 rows × 4 bytes — exactly
// SDOT's layout (each int32 lane adds the products of its 4 bytes): one SDOT per vector and
// token, the token's 4 activation bytes taken by lane from a 16-byte load (SDOT by element).
// Weight bytes of every format but Q8_0 are < 64 and multiply as signed bytes; Q8_0's
// u = q + 128 are flipped back to q. Exact, so the result is gemm_internal.h's integer.
#include <arm_neon.h>

#include <utility>

#include "kernels/gemm_neon_inl.h"

namespace ubatch::kernels::detail {

namespace {

struct DotprodDot {
  // Two tokens per tile: 8 int32 and 8 float accumulators, the activations' 4 vectors and a
  // weight vector stay in registers.
  static constexpr int kNR = 2;

  // Step K of the segment for every token and row group (the lane index must be a constant).
  template <int K, int NR, bool SIGNED>
  static UBATCH_NEON_INLINE void step(const uint8_t* ws, const int8x16_t (&xv)[NR][2], int32x4_t (&ia)[NR][4]) {
    for (int j = 0; j < 4; ++j) {
      int8x16_t wv = vld1q_s8(reinterpret_cast<const int8_t*>(ws + 64 * K + 16 * j));
      if constexpr (SIGNED) wv = veorq_s8(wv, vdupq_n_s8(static_cast<int8_t>(0x80)));
      for (int t = 0; t < NR; ++t) ia[t][j] = vdotq_laneq_s32(ia[t][j], wv, xv[t][K / 4], K % 4);
    }
  }

  template <int NR, int S, bool SIGNED, int... K>
  static UBATCH_NEON_INLINE void steps(const uint8_t* ws, const int8x16_t (&xv)[NR][2], int32x4_t (&ia)[NR][4],
                                       std::integer_sequence<int, K...>) {
    (step<K, NR, SIGNED>(ws, xv, ia), ...);
  }

  template <int NR, int S, bool SIGNED>
  static UBATCH_NEON_INLINE void segment(const uint8_t* ws, const uint8_t* x, int64_t xstride,
                                         int64_t init_off, int64_t s, int seg, int32x4_t (&ia)[NR][4]) {
    int8x16_t xv[NR][2];
    for (int t = 0; t < NR; ++t) {
      const auto* xq = reinterpret_cast<const int8_t*>(x + t * xstride + s * seg);
      xv[t][0] = vld1q_s8(xq);
      xv[t][1] = S > 4 ? vld1q_s8(xq + 16) : xv[t][0];
      const int32x4_t init = vdupq_n_s32(SIGNED ? 0 : load_i32(x + t * xstride + init_off + 4 * s));
      for (int j = 0; j < 4; ++j) ia[t][j] = init;
    }
    steps<NR, S, SIGNED>(ws, xv, ia, std::make_integer_sequence<int, S>{});
  }
};

}  // namespace

void gemm_panels_dotprod(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                         int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                         uint8_t* scratch) {
  neon_gemm_panels<DotprodDot>(w, a, x_packed, n_tokens, y, ldy, p0, p1, scratch);
}

}  // namespace ubatch::kernels::detail
