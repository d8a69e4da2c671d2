// Private to gemm_neon.cpp and gemm_dotprod.cpp: the parts of the aarch64 packed GEMM both
// levels share — the NEON unpacker, the register-blocked driver and its float steps — written
// once as templates over the integer dot (gemm_internal.h has the arithmetic, packed_weight.h
// the layout).
//
// Per panel (16 rows): unpack to step-interleaved bytes + f32 scales in the per-thread scratch
// (L1/L2-resident), then for each tile of NR tokens run the micro-kernel: per segment, the
// level's Dot forms ia[t][j] (int32x4: rows 4j .. 4j+3 of token t, exact), then per
// accumulator, for the block types one cvt + mul + fma (+ fma for the min) into NR × 4
// float32x4 accumulators that live for the whole row; for the K-quants one cvt + fma with the
// segment's float(sc) into a super-block accumulator, and per super-block a mul + fma (+ the
// min's int16 multiply-accumulate, cvt, mul + fma) into the row's — the canonical order, lane
// by lane, so the bits are those of gemm_panels_scalar.
//
// A Dot policy provides
//   static constexpr int kNR;    tokens per tile (the registers its integer dot needs)
//   template <int NR, int S, bool SIGNED>
//   static void segment(const uint8_t* ws, const uint8_t* x, int64_t xstride, int64_t init_off,
//                       int64_t s, int seg, int32x4_t (&ia)[NR][4]);
// with ws the segment's unpacked bytes (S steps × 64), x the tile's first packed activation row;
// ia[t][j] lane i = init[t][s] + Σ_k Σ_b u[k][4(4j+i)+b] · xq[t][4k+b]. SIGNED (Q8_0, bytes
// u = q + 128): Σ q·x instead, with no init — the same integer (gemm_internal.h).
//
// The functions here have internal linkage: each level's translation unit (the dot-product one
// is compiled for ARMv8.2-A + dotprod) keeps its own copy, so no instruction of the higher
// level can reach code that runs on the baseline.
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "kernels/gemm_internal.h"

#define UBATCH_NEON_INLINE inline __attribute__((always_inline))

namespace ubatch::kernels::detail {

namespace {

constexpr int64_t kNeonPrefetchBytes = 4096;  // how far ahead the packed stream is prefetched

UBATCH_NEON_INLINE uint8x16_t shr_u8(uint8x16_t v, int n) { return vshlq_u8(v, vdupq_n_s8(static_cast<int8_t>(-n))); }

// Step-interleaved quants of one segment record (S steps × 64 bytes) -> out.
template <PackedBits B, int S>
UBATCH_NEON_INLINE void unpack_quants_neon(const uint8_t* q, uint8_t* out) {
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  for (int c = 0; c < 4; ++c) {  // 16-byte columns: rows 4c .. 4c+3 of every step
    if constexpr (B == PackedBits::B8) {
      for (int k = 0; k < S; ++k) vst1q_u8(out + 64 * k + 16 * c, vld1q_u8(q + 64 * k + 16 * c));
    } else if constexpr (B == PackedBits::B2) {
      const uint8x16_t v = vld1q_u8(q + 16 * c);
      for (int k = 0; k < S; ++k) vst1q_u8(out + 64 * k + 16 * c, vandq_u8(shr_u8(v, 2 * k), vdupq_n_u8(3)));
    } else {
      constexpr int H = S / 2;
      uint8x16_t u[S];
      for (int j = 0; j < H; ++j) {
        const uint8x16_t v = vld1q_u8(q + 64 * j + 16 * c);
        u[j] = vandq_u8(v, m4);
        u[j + H] = vshrq_n_u8(v, 4);
      }
      if constexpr (B == PackedBits::B4T) {
        const uint8x16_t lut = vld1q_u8(kMxfp4U);
        for (int k = 0; k < S; ++k) u[k] = vqtbl1q_u8(lut, u[k]);
      }
      if constexpr (B == PackedBits::B5 || B == PackedBits::B6) {
        const uint8x16_t hi = vld1q_u8(q + 64 * H + 16 * c);
        constexpr int width = B == PackedBits::B5 ? 1 : 2;
        const uint8x16_t mask = vdupq_n_u8(B == PackedBits::B5 ? 1 : 3);
        for (int k = 0; k < S; ++k)
          u[k] = vorrq_u8(u[k], vshlq_n_u8(vandq_u8(shr_u8(hi, width * k), mask), 4));
      }
      for (int k = 0; k < S; ++k) vst1q_u8(out + 64 * k + 16 * c, u[k]);
    }
  }
}

UBATCH_NEON_INLINE float32x4_t f16x4_to_f32(const uint8_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))));
}

// int8 x16 -> four float32x4 (exact).
UBATCH_NEON_INLINE void s8x16_to_f32(int8x16_t v, float32x4_t* f) {
  const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_high_s8(v);
  f[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
  f[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
  f[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
  f[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
}

template <PackedBits B, int S>
void unpack_panel_neon_t(const PackedWeight& w, int64_t p, uint8_t* out) {
  const PackedFormat& f = w.fmt;
  const uint8_t* panel = w.panel(p);
  const int segs_per_block = f.block_elems / f.seg;
  const int64_t stride = unpacked_seg_stride(f);
  const int64_t area = unpacked_block_area(f);
  uint8_t* const blocks = out + unpacked_block_off(f, w.n_in);
  const uint8_t* pf_end = w.data + w.bytes();
  for (int64_t b = 0; b < w.n_in / f.block_elems; ++b) {
    const uint8_t* block = panel + b * f.block_bytes;
    for (int64_t off = 0; off < f.block_bytes; off += 64) {
      const uint8_t* pf = block + kNeonPrefetchBytes + off;
      if (pf < pf_end) __builtin_prefetch(pf, 0, 3);
    }
    // Header: d[16] f16 (+ m[16] f16), one per row, widened exactly.
    float32x4_t d[4], m[4];
    for (int j = 0; j < 4; ++j) {
      d[j] = f16x4_to_f32(block + 8 * j);
      m[j] = f.has_min ? f16x4_to_f32(block + 32 + 8 * j) : vdupq_n_f32(0.0f);
    }
    for (int s = 0; s < segs_per_block; ++s) {
      uint8_t* o = out + (b * segs_per_block + s) * stride;
      const uint8_t* q = block + f.header_bytes + s * f.seg_bytes;
      unpack_quants_neon<B, S>(q, o);
      auto* dw_out = reinterpret_cast<float*>(o + 64 * S);
      auto* mw_out = reinterpret_cast<float*>(o + 64 * S + 64);
      if (!f.k_quant) {
        for (int j = 0; j < 4; ++j) {
          vst1q_f32(dw_out + 4 * j, d[j]);
          if (f.has_min) vst1q_f32(mw_out + 4 * j, m[j]);
        }
        continue;
      }
      // K-quants: scf = float(sc) of the 16 rows (exact), converted once here for every token.
      float32x4_t sc[4];
      s8x16_to_f32(vld1q_s8(reinterpret_cast<const int8_t*>(q + f.seg_quant_bytes)), sc);
      for (int j = 0; j < 4; ++j) vst1q_f32(dw_out + 4 * j, sc[j]);
    }
    if (!f.k_quant) continue;
    // K-quants: the super-block's area after the segments: d[16] f32, and with a min
    // nd[16] f32 = −dmin and mnp[segs / 2][16][2] i16 (mn of segments 2j, 2j + 1 per row).
    uint8_t* ba = blocks + b * area;
    auto* d_out = reinterpret_cast<float*>(ba);
    for (int j = 0; j < 4; ++j) vst1q_f32(d_out + 4 * j, d[j]);
    if (!f.has_min) continue;
    for (int j = 0; j < 4; ++j) vst1q_f32(d_out + 16 + 4 * j, vnegq_f32(m[j]));
    for (int j = 0; j < segs_per_block / 2; ++j) {
      const uint8_t* q0 = block + f.header_bytes + (2 * j) * f.seg_bytes + f.seg_quant_bytes + 16;
      const uint8x16x2_t z = vzipq_u8(vld1q_u8(q0), vld1q_u8(q0 + f.seg_bytes));  // mn0 mn1 per row
      auto* mp = reinterpret_cast<uint16_t*>(ba + 128 + 64 * j);
      vst1q_u16(mp, vmovl_u8(vget_low_u8(z.val[0])));
      vst1q_u16(mp + 8, vmovl_high_u8(z.val[0]));
      vst1q_u16(mp + 16, vmovl_u8(vget_low_u8(z.val[1])));
      vst1q_u16(mp + 24, vmovl_high_u8(z.val[1]));
    }
  }
}

using NeonUnpackFn = void (*)(const PackedWeight&, int64_t, uint8_t*);

NeonUnpackFn neon_unpacker(const PackedFormat& f) {
  switch (f.bits) {
    case PackedBits::B8: return f.steps == 8 ? &unpack_panel_neon_t<PackedBits::B8, 8> : &unpack_panel_neon_t<PackedBits::B8, 4>;
    case PackedBits::B4: return f.steps == 8 ? &unpack_panel_neon_t<PackedBits::B4, 8> : &unpack_panel_neon_t<PackedBits::B4, 4>;
    case PackedBits::B5: return &unpack_panel_neon_t<PackedBits::B5, 8>;
    case PackedBits::B4T: return &unpack_panel_neon_t<PackedBits::B4T, 8>;
    case PackedBits::B6: return &unpack_panel_neon_t<PackedBits::B6, 4>;
    case PackedBits::B2: return &unpack_panel_neon_t<PackedBits::B2, 4>;
  }
  return nullptr;
}

UBATCH_NEON_INLINE int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
UBATCH_NEON_INLINE float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// The micro-kernel: one unpacked panel (16 rows) × NR tokens, all segments. wp: the unpacked
// panel; x: the first token's packed row; y: y[t * ldy + r] for the panel's first row.
template <class Dot, int NR, int S, bool MIN, bool SIGNED>
void neon_tile(const uint8_t* wp, int64_t n_seg, int64_t wstride, const ActLayout& a,
               const uint8_t* x, float* y, int64_t ldy, int rows) {
  float32x4_t acc[NR][4];
  for (int t = 0; t < NR; ++t)
    for (int j = 0; j < 4; ++j) acc[t][j] = vdupq_n_f32(0.0f);
  const int64_t xs = a.stride;
  for (int64_t s = 0; s < n_seg; ++s) {
    const uint8_t* ws = wp + s * wstride;
    int32x4_t ia[NR][4];
    Dot::template segment<NR, S, SIGNED>(ws, x, xs, a.init_off, s, a.seg, ia);
    const float* sp = reinterpret_cast<const float*>(ws + 64 * S);
    for (int j = 0; j < 4; ++j) {
      const float32x4_t dw = vld1q_f32(sp + 4 * j);
      for (int t = 0; t < NR; ++t) {
        const float32x4_t scale = vmulq_f32(dw, vdupq_n_f32(load_f32(x + t * xs + a.dx_off + 4 * s)));
        acc[t][j] = vfmaq_f32(acc[t][j], vcvtq_f32_s32(ia[t][j]), scale);
      }
      if constexpr (MIN) {
        const float32x4_t mw = vld1q_f32(sp + 16 + 4 * j);
        for (int t = 0; t < NR; ++t)
          acc[t][j] = vfmaq_f32(acc[t][j], mw, vdupq_n_f32(load_f32(x + t * xs + a.xs_off + 4 * s)));
      }
    }
  }
  for (int t = 0; t < NR; ++t) {
    if (rows == kPanelRows) {
      for (int j = 0; j < 4; ++j) vst1q_f32(y + t * ldy + 4 * j, acc[t][j]);
    } else {
      float tmp[16];
      for (int j = 0; j < 4; ++j) vst1q_f32(tmp + 4 * j, acc[t][j]);
      for (int r = 0; r < rows; ++r) y[t * ldy + r] = tmp[r];
    }
  }
}

// The K-quant micro-kernel (Q2_K .. Q6_K): per super-block of SEGS segments, per segment
// bacc = fma(float(ia), scf, bacc); at the super-block's end acc = fma(bacc, d · dx, acc) and,
// with a min, acc = fma(float(msum), nd · dx, acc), msum = Σ mn · bsum formed in int32 by
// SMLAL over the int16 pairs (mn of segments 2j, 2j + 1 against the token's bsum pair) and one
// ADDP per 4 rows. blocks: the unpacked panel's super-block areas (packed_weight.h).
template <class Dot, int NR, int S, bool MIN>
void neon_tile_k(const uint8_t* wp, const uint8_t* blocks, int64_t n_seg, int64_t wstride,
                 int64_t area, const ActLayout& a, const uint8_t* x, float* y, int64_t ldy, int rows) {
  constexpr int SEGS = 256 / (4 * S);  // segments per super-block: 8 (seg 32) or 16 (seg 16)
  float32x4_t acc[NR][4];
  for (int t = 0; t < NR; ++t)
    for (int j = 0; j < 4; ++j) acc[t][j] = vdupq_n_f32(0.0f);
  const int64_t xs = a.stride;
  for (int64_t s0 = 0; s0 < n_seg; s0 += SEGS) {
    float32x4_t bacc[NR][4];
    for (int t = 0; t < NR; ++t)
      for (int j = 0; j < 4; ++j) bacc[t][j] = vdupq_n_f32(0.0f);
    for (int i = 0; i < SEGS; ++i) {
      const int64_t s = s0 + i;
      const uint8_t* ws = wp + s * wstride;
      int32x4_t ia[NR][4];
      Dot::template segment<NR, S, false>(ws, x, xs, a.init_off, s, a.seg, ia);
      const float* sp = reinterpret_cast<const float*>(ws + 64 * S);
      for (int j = 0; j < 4; ++j) {
        const float32x4_t scf = vld1q_f32(sp + 4 * j);
        for (int t = 0; t < NR; ++t) bacc[t][j] = vfmaq_f32(bacc[t][j], vcvtq_f32_s32(ia[t][j]), scf);
      }
    }
    const uint8_t* ba = blocks + (s0 / SEGS) * area;
    const float* dp = reinterpret_cast<const float*>(ba);
    float32x4_t dx[NR];  // the super-block's activation scale (one per 256 elements)
    for (int t = 0; t < NR; ++t) dx[t] = vdupq_n_f32(load_f32(x + t * xs + a.dx_off + 4 * (s0 + SEGS - 1)));
    for (int j = 0; j < 4; ++j) {
      const float32x4_t d = vld1q_f32(dp + 4 * j);
      for (int t = 0; t < NR; ++t) acc[t][j] = vfmaq_f32(acc[t][j], bacc[t][j], vmulq_f32(d, dx[t]));
      if constexpr (MIN) {
        const float32x4_t nd = vld1q_f32(dp + 16 + 4 * j);
        int16x8_t mn[SEGS / 2];  // rows 4j .. 4j+3, (mn[2i], mn[2i+1]) per row
        for (int i = 0; i < SEGS / 2; ++i) mn[i] = vld1q_s16(reinterpret_cast<const int16_t*>(ba + 128 + 64 * i + 16 * j));
        for (int t = 0; t < NR; ++t) {
          const uint8_t* bs = x + t * xs + a.xs_off + 2 * s0;  // bsum pairs of the super-block
          int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);
          for (int i = 0; i < SEGS / 2; ++i) {
            const int16x8_t bv = vreinterpretq_s16_s32(vdupq_n_s32(load_i32(bs + 4 * i)));
            lo = vmlal_s16(lo, vget_low_s16(mn[i]), vget_low_s16(bv));
            hi = vmlal_high_s16(hi, mn[i], bv);
          }
          const int32x4_t msum = vpaddq_s32(lo, hi);  // rows 4j .. 4j+3, exact
          acc[t][j] = vfmaq_f32(acc[t][j], vcvtq_f32_s32(msum), vmulq_f32(nd, dx[t]));
        }
      }
    }
  }
  for (int t = 0; t < NR; ++t) {
    if (rows == kPanelRows) {
      for (int j = 0; j < 4; ++j) vst1q_f32(y + t * ldy + 4 * j, acc[t][j]);
    } else {
      float tmp[16];
      for (int j = 0; j < 4; ++j) vst1q_f32(tmp + 4 * j, acc[t][j]);
      for (int r = 0; r < rows; ++r) y[t * ldy + r] = tmp[r];
    }
  }
}

template <class Dot, int S, bool MIN, bool SIGNED, bool KQ = false>
void neon_gemm_t(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                 int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1, uint8_t* scratch) {
  const NeonUnpackFn unpack = neon_unpacker(w.fmt);
  const int64_t wstride = unpacked_seg_stride(w.fmt);
  const int64_t area = unpacked_block_area(w.fmt);
  const uint8_t* const blocks = scratch + unpacked_block_off(w.fmt, w.n_in);
  constexpr int NR = Dot::kNR;
  auto tile = [&]<int N>(int64_t t, float* yt, int rows) {
    if constexpr (KQ)
      neon_tile_k<Dot, N, S, MIN>(scratch, blocks, a.n_seg, wstride, area, a, x_packed + t * a.stride, yt, ldy, rows);
    else
      neon_tile<Dot, N, S, MIN, SIGNED>(scratch, a.n_seg, wstride, a, x_packed + t * a.stride, yt, ldy, rows);
  };
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t left = w.n_out - p * kPanelRows;
    const int rows = static_cast<int>(left < kPanelRows ? left : kPanelRows);
    unpack(w, p, scratch);
    float* yp = y + p * kPanelRows;
    int64_t t = 0;
    for (; t + NR <= n_tokens; t += NR) tile.template operator()<NR>(t, yp + t * ldy, rows);
    if constexpr (NR > 1) {
      for (; t < n_tokens; ++t) tile.template operator()<1>(t, yp + t * ldy, rows);
    }
  }
}

// The level's GEMM for every packed format.
template <class Dot>
void neon_gemm_panels(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                      int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                      uint8_t* scratch) {
  const PackedFormat& f = w.fmt;
  auto run = [&](auto fn) { fn(w, a, x_packed, n_tokens, y, ldy, p0, p1, scratch); };
  // Q8_0's bytes u = q + 128 exceed int8: multiplied as q = u ^ 0x80 (SIGNED). Every other
  // format's bytes are < 64 and multiply as they are.
  if (f.bits == PackedBits::B8) return run(neon_gemm_t<Dot, 8, false, true>);
  if (f.k_quant) {  // Q4_K, Q5_K (seg 32, min); Q2_K (seg 16, min); Q3_K, Q6_K (seg 16)
    if (f.steps == 8) return run(neon_gemm_t<Dot, 8, true, false, true>);
    return f.has_min ? run(neon_gemm_t<Dot, 4, true, false, true>) : run(neon_gemm_t<Dot, 4, false, false, true>);
  }
  // The other block types (Q4_0, Q4_1, Q5_0, Q5_1, MXFP4) have 32-element segments: 8 steps.
  return f.has_min ? run(neon_gemm_t<Dot, 8, true, false>) : run(neon_gemm_t<Dot, 8, false, false>);
}

}  // namespace

}  // namespace ubatch::kernels::detail
