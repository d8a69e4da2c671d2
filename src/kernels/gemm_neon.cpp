// Baseline aarch64 level of the packed GEMM (ARMv8.0 NEON, e.g. the Cortex-A72 of the
// Raspberry Pi 4), and the NEON activation quantizer and unpacker both aarch64 levels use.
// The driver and float steps are in gemm_neon_inl.h; this file has the integer dot.
//
// Integer dot without dot-product instructions: per step k (4 elements × 16 rows = 64 bytes,
// four 16-byte vectors of 4 rows each) and token, SMULL/SMULL2 multiply each vector's bytes by
// the token's 4 activation bytes (repeated) into 8 int16 products per 2 rows; SMLAL/SMLAL2 add
// the products of the next steps of a group in int16, then SADALP adds adjacent int16 pairs
// into int32 (2 lanes per row); at the segment's end ADDP joins each row's two lanes. Groups
// are sized so the int16 sums cannot overflow: |u·x| <= 63 · 127 for every format but Q8_0
// (4 steps: 32 004 < 32 767), and |q·x| <= 128 · 127 for Q8_0 (2 steps: 32 512). All exact, so
// the result is gemm_internal.h's integer.
#include <arm_neon.h>

#include <cstring>

#include "kernels/gemm_neon_inl.h"

namespace ubatch::kernels::detail {

namespace {

struct NeonDot {
  // One token per tile: 8 int16 + 8 int32 partial sums, 4 float accumulators and the step's
  // 4 weight vectors already fill most of the 32 registers.
  static constexpr int kNR = 1;

  template <int NR, int S, bool SIGNED>
  static UBATCH_NEON_INLINE void segment(const uint8_t* ws, const uint8_t* x, int64_t xstride,
                                         int64_t init_off, int64_t s, int seg, int32x4_t (&ia)[NR][4]) {
    constexpr int G = SIGNED ? 2 : 4;  // steps per int16 group (see the file comment)
    static_assert(S % G == 0);
    const int8x16_t flip = vdupq_n_s8(static_cast<int8_t>(0x80));
    for (int t = 0; t < NR; ++t) {
      const uint8_t* xq = x + t * xstride + s * seg;
      int32x4_t pair[8];  // [2j]: rows 4j, 4j+1; [2j+1]: rows 4j+2, 4j+3 (two lanes per row)
      for (int i = 0; i < 8; ++i) pair[i] = vdupq_n_s32(0);
      for (int g = 0; g < S; g += G) {
        int16x8_t p16[8];
        for (int kk = 0; kk < G; ++kk) {
          const int k = g + kk;
          const int8x16_t xx = vreinterpretq_s8_s32(vdupq_n_s32(load_i32(xq + 4 * k)));
          for (int j = 0; j < 4; ++j) {
            int8x16_t wv = vld1q_s8(reinterpret_cast<const int8_t*>(ws + 64 * k + 16 * j));
            if constexpr (SIGNED) wv = veorq_s8(wv, flip);
            if (kk == 0) {
              p16[2 * j] = vmull_s8(vget_low_s8(wv), vget_low_s8(xx));
              p16[2 * j + 1] = vmull_high_s8(wv, xx);
            } else {
              p16[2 * j] = vmlal_s8(p16[2 * j], vget_low_s8(wv), vget_low_s8(xx));
              p16[2 * j + 1] = vmlal_high_s8(p16[2 * j + 1], wv, xx);
            }
          }
        }
        for (int i = 0; i < 8; ++i) pair[i] = vpadalq_s16(pair[i], p16[i]);
      }
      const int32x4_t init = vdupq_n_s32(SIGNED ? 0 : load_i32(x + t * xstride + init_off + 4 * s));
      for (int j = 0; j < 4; ++j) ia[t][j] = vaddq_s32(init, vpaddq_s32(pair[2 * j], pair[2 * j + 1]));
    }
  }
};

}  // namespace

void pack_acts_neon(const PackedFormat& f, const ActLayout& a, const float* x, int64_t t0,
                    int64_t t1, uint8_t* x_packed) {
  const int64_t n_in = a.n_in;
  const int blk = a.act_block;  // 32 or 256: whole vectors of 16
  for (int64_t t = t0; t < t1; ++t) {
    const float* xr = x + t * n_in;
    uint8_t* row = x_packed + t * a.stride;
    auto* init = reinterpret_cast<int32_t*>(row + a.init_off);
    auto* dx = reinterpret_cast<float*>(row + a.dx_off);
    auto* xsv = reinterpret_cast<float*>(row + a.xs_off);    // block types with a min
    auto* bsum = reinterpret_cast<int16_t*>(row + a.xs_off);  // K-quants with a min
    const bool kq_min = f.has_min && f.k_quant, blk_min = f.has_min && !f.k_quant;
    for (int64_t b0 = 0; b0 < n_in; b0 += blk) {
      // The scalar quantize_act_row, lane by lane: amax (a NaN never replaces the running max,
      // as there, so the lanes' max in any order is the same), d = amax / 127,
      // q = rint(x · 127 / amax) clamped to ±127.
      float32x4_t mx = vdupq_n_f32(0.0f);
      for (int i = 0; i < blk; i += 4) {
        const float32x4_t v = vabsq_f32(vld1q_f32(xr + b0 + i));
        mx = vbslq_f32(vcgtq_f32(v, mx), v, mx);
      }
      const float amax = vmaxvq_f32(mx);
      const float d = amax / 127.0f;
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
      const float32x4_t vid = vdupq_n_f32(id), hi = vdupq_n_f32(127.0f), lo = vdupq_n_f32(-127.0f);
      for (int i = 0; i < blk; i += 16) {
        int16x4_t h[4];
        for (int c = 0; c < 4; ++c) {
          float32x4_t v = vrndnq_f32(vmulq_f32(vld1q_f32(xr + b0 + i + 4 * c), vid));
          v = vbslq_f32(vcgtq_f32(v, hi), hi, v);
          v = vbslq_f32(vcltq_f32(v, lo), lo, v);
          h[c] = vmovn_s32(vcvtq_s32_f32(v));
        }
        const int8x16_t q = vcombine_s8(vmovn_s16(vcombine_s16(h[0], h[1])), vmovn_s16(vcombine_s16(h[2], h[3])));
        vst1q_s8(reinterpret_cast<int8_t*>(row + b0 + i), q);
      }
      // Segment sums, exact (|sum| <= 32 · 127 fits int16).
      for (int64_t s = b0 / a.seg; s < (b0 + blk) / a.seg; ++s) {
        int32_t total = 0;
        for (int i = 0; i < a.seg; i += 16)
          total += vaddlvq_s8(vld1q_s8(reinterpret_cast<const int8_t*>(row + s * a.seg + i)));
        init[s] = -f.offset * total;
        dx[s] = d;
        if (kq_min) bsum[s] = static_cast<int16_t>(total);
        else if (blk_min) xsv[s] = d * static_cast<float>(total);
      }
    }
    std::memset(row + n_in, 0, static_cast<size_t>(a.init_off - n_in));
  }
}

void unpack_panel_neon(const PackedWeight& w, int64_t p, uint8_t* out) { neon_unpacker(w.fmt)(w, p, out); }

void gemm_panels_neon(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                      int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                      uint8_t* scratch) {
  neon_gemm_panels<NeonDot>(w, a, x_packed, n_tokens, y, ldy, p0, p1, scratch);
}

}  // namespace ubatch::kernels::detail
