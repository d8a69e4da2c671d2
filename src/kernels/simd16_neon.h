// The 16-lane vocabulary of simd16.h on AArch64 NEON (ARMv8.0 Advanced SIMD, the baseline of
// every 64-bit ARM Linux CPU): four 128-bit registers per F (lanes 0-3, 4-7, 8-11, 12-15).
// Include only from translation units of aarch64 builds (*_neon.cpp).
//
// Where NEON's own instruction differs from the contract, the contract wins:
//   max/min   FMAX/FMIN return NaN when either operand is NaN; the contract is x86's
//             "a > b ? a : b", so both are a compare and a bit select.
//   exp2i     2^n from the bits, with the scalar reference's handling of n outside
//             [-126, 127] (k = INT32_MIN there), not FCVTZS's saturation.
//   reductions  the fixed tree (lane i + lane i+8, then +4, +2, +1); FADDP/FADDV pair lanes in
//             another order, so they are not used for sums of floats.
// Everything else is one IEEE operation per lane (FADD, FMUL, FDIV, FMLA/FMLS fused, FRINTN
// ties to even, FRINTM, FCVT half→single exact), so results equal simd16_scalar.h bit for bit
// under the default FPCR (round to nearest, no flush to zero: Linux's default for user code).
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "kernels/simd16.h"

#define UBATCH_SIMD16_INLINE inline __attribute__((always_inline))

namespace ubatch::kernels::neon {

struct Simd16 {
  struct F {
    float32x4_t v[4];
  };
  struct D {
    float64x2_t v[8];  // lanes 2k, 2k+1 in v[k]
  };
  struct M {
    uint32x4_t v[4];  // all-ones lanes where true
  };
  // Blocking hints (simd16.h): logical accumulators per register block (32 q registers, four
  // per F).
  static constexpr int kScoreRegs = 4;
  static constexpr int kAccRegs = 4;

  static UBATCH_SIMD16_INLINE F zero() { return set1(0.0f); }
  static UBATCH_SIMD16_INLINE F set1(float x) {
    const float32x4_t v = vdupq_n_f32(x);
    return {{v, v, v, v}};
  }
  static UBATCH_SIMD16_INLINE F load(const float* p) {
    return {{vld1q_f32(p), vld1q_f32(p + 4), vld1q_f32(p + 8), vld1q_f32(p + 12)}};
  }
  // Lanes >= n are never read (a row may end at the end of a page).
  static UBATCH_SIMD16_INLINE F load_n(const float* p, int n, float fill = 0.0f) {
    float buf[16];
    for (int i = 0; i < 16; ++i) buf[i] = fill;
    std::memcpy(buf, p, sizeof(float) * static_cast<size_t>(clamp16(n)));
    return load(buf);
  }
  static UBATCH_SIMD16_INLINE void store(float* p, const F& a) {
    vst1q_f32(p, a.v[0]);
    vst1q_f32(p + 4, a.v[1]);
    vst1q_f32(p + 8, a.v[2]);
    vst1q_f32(p + 12, a.v[3]);
  }
  static UBATCH_SIMD16_INLINE void store_n(float* p, const F& a, int n) {
    float buf[16];
    store(buf, a);
    std::memcpy(p, buf, sizeof(float) * static_cast<size_t>(clamp16(n)));
  }
  static UBATCH_SIMD16_INLINE float32x4_t cvt_f16x4(uint16x4_t h) {
    return vcvt_f32_f16(vreinterpret_f16_u16(h));
  }
  static UBATCH_SIMD16_INLINE float f16_to_f32(uint16_t h) {
    return vgetq_lane_f32(cvt_f16x4(vdup_n_u16(h)), 0);
  }
  static UBATCH_SIMD16_INLINE F load_f16(const uint16_t* p) {
    const uint16x8_t a = vld1q_u16(p), b = vld1q_u16(p + 8);
    return {{cvt_f16x4(vget_low_u16(a)), cvt_f16x4(vget_high_u16(a)), cvt_f16x4(vget_low_u16(b)),
             cvt_f16x4(vget_high_u16(b))}};
  }
  static UBATCH_SIMD16_INLINE F load_f16_n(const uint16_t* p, int n) {
    uint16_t buf[16] = {};
    std::memcpy(buf, p, sizeof(uint16_t) * static_cast<size_t>(clamp16(n)));
    return load_f16(buf);
  }
  static UBATCH_SIMD16_INLINE float32x4_t bf16x4(uint16x4_t h) {
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
  }
  static UBATCH_SIMD16_INLINE F load_bf16(const uint16_t* p) {
    const uint16x8_t a = vld1q_u16(p), b = vld1q_u16(p + 8);
    return {{bf16x4(vget_low_u16(a)), bf16x4(vget_high_u16(a)), bf16x4(vget_low_u16(b)),
             bf16x4(vget_high_u16(b))}};
  }
  static UBATCH_SIMD16_INLINE F load_bf16_n(const uint16_t* p, int n) {
    uint16_t buf[16] = {};
    std::memcpy(buf, p, sizeof(uint16_t) * static_cast<size_t>(clamp16(n)));
    return load_bf16(buf);
  }
  // float → bfloat16 (simd16.h: to nearest even, subnormals to a signed zero, NaN quieted), in
  // integer arithmetic.
  static UBATCH_SIMD16_INLINE uint16x4_t bf16_bits4(float32x4_t a) {
    const uint32x4_t x = vreinterpretq_u32_f32(a);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
    uint16x4_t r = vshrn_n_u32(vaddq_u32(vaddq_u32(x, vdupq_n_u32(0x7FFF)), lsb), 16);
    const uint16x4_t hi = vshrn_n_u32(x, 16);
    const uint16x4_t sub = vmovn_u32(vceqq_u32(vandq_u32(x, vdupq_n_u32(0x7F800000)), vdupq_n_u32(0)));
    r = vbsl_u16(sub, vand_u16(hi, vdup_n_u16(0x8000)), r);
    const uint16x4_t nan = vorr_u16(hi, vdup_n_u16(0x40));
    return vbsl_u16(vmovn_u32(vceqq_f32(a, a)), r, nan);
  }
  static UBATCH_SIMD16_INLINE void store_bf16(uint16_t* p, const F& a) {
    vst1q_u16(p, vcombine_u16(bf16_bits4(a.v[0]), bf16_bits4(a.v[1])));
    vst1q_u16(p + 8, vcombine_u16(bf16_bits4(a.v[2]), bf16_bits4(a.v[3])));
  }
  static UBATCH_SIMD16_INLINE void store_bf16_n(uint16_t* p, const F& a, int n) {
    uint16_t buf[16];
    store_bf16(buf, a);
    std::memcpy(p, buf, sizeof(uint16_t) * static_cast<size_t>(clamp16(n)));
  }
  static UBATCH_SIMD16_INLINE F load_i8(const int8_t* p) {
    const int8x16_t q = vld1q_s8(p);
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    return {{vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), vcvtq_f32_s32(vmovl_high_s16(lo)),
             vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), vcvtq_f32_s32(vmovl_high_s16(hi))}};
  }

  static UBATCH_SIMD16_INLINE F add(const F& a, const F& b) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = vaddq_f32(a.v[k], b.v[k]);
    return r;
  }
  static UBATCH_SIMD16_INLINE F sub(const F& a, const F& b) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = vsubq_f32(a.v[k], b.v[k]);
    return r;
  }
  static UBATCH_SIMD16_INLINE F mul(const F& a, const F& b) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = vmulq_f32(a.v[k], b.v[k]);
    return r;
  }
  static UBATCH_SIMD16_INLINE F div(const F& a, const F& b) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = vdivq_f32(a.v[k], b.v[k]);
    return r;
  }
  static UBATCH_SIMD16_INLINE F fma(const F& a, const F& b, const F& c) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = vfmaq_f32(c.v[k], a.v[k], b.v[k]);
    return r;
  }
  static UBATCH_SIMD16_INLINE F fnma(const F& a, const F& b, const F& c) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = vfmsq_f32(c.v[k], a.v[k], b.v[k]);
    return r;
  }
  static UBATCH_SIMD16_INLINE F max(const F& a, const F& b) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = vbslq_f32(vcgtq_f32(a.v[k], b.v[k]), a.v[k], b.v[k]);
    return r;
  }
  static UBATCH_SIMD16_INLINE F min(const F& a, const F& b) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = vbslq_f32(vcltq_f32(a.v[k], b.v[k]), a.v[k], b.v[k]);
    return r;
  }
  static UBATCH_SIMD16_INLINE F abs(const F& a) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = vabsq_f32(a.v[k]);
    return r;
  }
  static UBATCH_SIMD16_INLINE F round(const F& a) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = vrndnq_f32(a.v[k]);
    return r;
  }
  static UBATCH_SIMD16_INLINE F floor(const F& a) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = vrndmq_f32(a.v[k]);
    return r;
  }
  static UBATCH_SIMD16_INLINE float32x4_t exp2i4(float32x4_t n) {
    const uint32x4_t in_range = vandq_u32(vcgeq_f32(n, vdupq_n_f32(-126.0f)), vcleq_f32(n, vdupq_n_f32(127.0f)));
    const int32x4_t k = vbslq_s32(in_range, vcvtq_s32_f32(n), vdupq_n_s32(INT32_MIN));
    const uint32x4_t bits = vshlq_n_u32(vaddq_u32(vreinterpretq_u32_s32(k), vdupq_n_u32(127)), 23);
    return vreinterpretq_f32_u32(bits);
  }
  static UBATCH_SIMD16_INLINE F exp2i(const F& n) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = exp2i4(n.v[k]);
    return r;
  }
  static UBATCH_SIMD16_INLINE M lt(const F& a, const F& b) {
    M m;
    for (int k = 0; k < 4; ++k) m.v[k] = vcltq_f32(a.v[k], b.v[k]);
    return m;
  }
  static UBATCH_SIMD16_INLINE F select(const M& m, const F& a, const F& b) {
    F r;
    for (int k = 0; k < 4; ++k) r.v[k] = vbslq_f32(m.v[k], a.v[k], b.v[k]);
    return r;
  }

  // The first two steps of the tree (i + i+8, then i + i+4): lanes 0-3 of the result.
  static UBATCH_SIMD16_INLINE float32x4_t fold8(const F& a) {
    return vaddq_f32(vaddq_f32(a.v[0], a.v[2]), vaddq_f32(a.v[1], a.v[3]));
  }
  static UBATCH_SIMD16_INLINE float hsum(const F& a) {
    const float32x4_t s4 = fold8(a);
    const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));  // i + i+2
    return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
  }
  // out[k] = hsum(a[k]) for 16 vectors: the last two steps on 4 × 4 transposed blocks.
  static UBATCH_SIMD16_INLINE void hsum16(const F* a, float* out) {
    for (int g = 0; g < 16; g += 4) {
      const float32x4_t r0 = fold8(a[g]), r1 = fold8(a[g + 1]), r2 = fold8(a[g + 2]), r3 = fold8(a[g + 3]);
      // Transpose: c_j lane k = lane j of r_k.
      const float32x4_t t0 = vtrn1q_f32(r0, r1), t1 = vtrn2q_f32(r0, r1);
      const float32x4_t t2 = vtrn1q_f32(r2, r3), t3 = vtrn2q_f32(r2, r3);
      const float64x2_t u0 = vreinterpretq_f64_f32(t0), u1 = vreinterpretq_f64_f32(t1);
      const float64x2_t u2 = vreinterpretq_f64_f32(t2), u3 = vreinterpretq_f64_f32(t3);
      const float32x4_t c0 = vreinterpretq_f32_f64(vzip1q_f64(u0, u2));
      const float32x4_t c1 = vreinterpretq_f32_f64(vzip1q_f64(u1, u3));
      const float32x4_t c2 = vreinterpretq_f32_f64(vzip2q_f64(u0, u2));
      const float32x4_t c3 = vreinterpretq_f32_f64(vzip2q_f64(u1, u3));
      vst1q_f32(out + g, vaddq_f32(vaddq_f32(c0, c2), vaddq_f32(c1, c3)));  // i + i+2, then + i+1
    }
  }
  static UBATCH_SIMD16_INLINE float32x4_t max4(float32x4_t a, float32x4_t b) {
    return vbslq_f32(vcgtq_f32(a, b), a, b);
  }
  static UBATCH_SIMD16_INLINE float hmax(const F& a) {
    const float32x4_t m4 = max4(max4(a.v[0], a.v[2]), max4(a.v[1], a.v[3]));
    const float32x2_t lo = vget_low_f32(m4), hi = vget_high_f32(m4);
    const float32x2_t m2 = vbsl_f32(vcgt_f32(lo, hi), lo, hi);
    const float x = vget_lane_f32(m2, 0), y = vget_lane_f32(m2, 1);
    return x > y ? x : y;
  }
  static UBATCH_SIMD16_INLINE float lane0(const F& a) { return vgetq_lane_f32(a.v[0], 0); }

  static UBATCH_SIMD16_INLINE D dzero() {
    D d;
    for (int k = 0; k < 8; ++k) d.v[k] = vdupq_n_f64(0.0);
    return d;
  }
  static UBATCH_SIMD16_INLINE void dadd(D& d, const F& a) {
    for (int k = 0; k < 4; ++k) {
      d.v[2 * k] = vaddq_f64(d.v[2 * k], vcvt_f64_f32(vget_low_f32(a.v[k])));
      d.v[2 * k + 1] = vaddq_f64(d.v[2 * k + 1], vcvt_high_f64_f32(a.v[k]));
    }
  }
  static UBATCH_SIMD16_INLINE void dadd_sq(D& d, const F& a) {
    for (int k = 0; k < 4; ++k) {
      const float64x2_t x0 = vcvt_f64_f32(vget_low_f32(a.v[k])), x1 = vcvt_high_f64_f32(a.v[k]);
      d.v[2 * k] = vaddq_f64(d.v[2 * k], vmulq_f64(x0, x0));  // the product is exact in double
      d.v[2 * k + 1] = vaddq_f64(d.v[2 * k + 1], vmulq_f64(x1, x1));
    }
  }
  static UBATCH_SIMD16_INLINE double dhsum(const D& d) {
    float64x2_t t[4];
    for (int k = 0; k < 4; ++k) t[k] = vaddq_f64(d.v[k], d.v[k + 4]);  // i + i+8
    const float64x2_t u0 = vaddq_f64(t[0], t[2]), u1 = vaddq_f64(t[1], t[3]);  // i + i+4
    const float64x2_t w = vaddq_f64(u0, u1);                                    // i + i+2
    return vgetq_lane_f64(w, 0) + vgetq_lane_f64(w, 1);                         // i + i+1
  }

  static UBATCH_SIMD16_INLINE int clamp16(int n) { return n < 0 ? 0 : (n > 16 ? 16 : n); }
};

}  // namespace ubatch::kernels::neon
