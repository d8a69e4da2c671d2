// Private: unpacking a quantized weight row to bytes + scales, and quantizing activation
// rows, in natural element order (see matmul_internal.h for what the bytes mean).
//
// Plain loops the compiler vectorizes for each translation unit's ISA. Everything here has
// internal linkage (anonymous namespace) on purpose: each SIMD translation unit gets its own
// copy compiled with its own flags, and the linker can never hand an AVX-512-compiled copy to
// code running on a CPU without it. All operations are exact or IEEE-rounded the same way in
// every copy (no contraction: the build uses -ffp-contract=off), so every copy gives the same
// bits.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <immintrin.h>  // SSE2 everywhere on x86-64; F16C where the translation unit enables it
#elif defined(__ARM_NEON)
#include <arm_neon.h>   // NEON everywhere on aarch64
#endif

#include "common/tensor_type.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"

namespace ubatch::kernels::detail {
namespace {

#if defined(__F16C__)
inline float unpack_half(uint16_t h) { return _cvtsh_ss(h); }
#else
inline float unpack_half(uint16_t h) { return fp16_to_fp32(h); }
#endif

// 16-byte vectors for the block unpackers, on each architecture's baseline (SSE2, NEON) so
// every translation unit can use them, or plain bytes elsewhere. Byte-wise operations only.
#if defined(__SSE2__)
using Bytes16 = __m128i;
inline Bytes16 b16_load(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline void b16_store(void* p, Bytes16 v) { _mm_storeu_si128(static_cast<__m128i*>(p), v); }
inline Bytes16 b16_splat(uint8_t x) { return _mm_set1_epi8(static_cast<char>(x)); }
inline Bytes16 b16_and(Bytes16 a, Bytes16 b) { return _mm_and_si128(a, b); }
inline Bytes16 b16_or(Bytes16 a, Bytes16 b) { return _mm_or_si128(a, b); }
inline Bytes16 b16_xor(Bytes16 a, Bytes16 b) { return _mm_xor_si128(a, b); }
// Byte-wise a == b: 0xFF or 0.
inline Bytes16 b16_eq(Bytes16 a, Bytes16 b) { return _mm_cmpeq_epi8(a, b); }
// (v >> n) & mask per byte (n < 8).
inline Bytes16 shr_bytes(Bytes16 v, int n, int mask) {
  return _mm_and_si128(_mm_srl_epi16(v, _mm_cvtsi32_si128(n)), _mm_set1_epi8(static_cast<char>(mask)));
}
// v << n per byte, for bytes whose shifted bits stay in the byte.
inline Bytes16 shl_small_bytes(Bytes16 v, int n) { return _mm_sll_epi16(v, _mm_cvtsi32_si128(n)); }
inline Bytes16 b16_from_u64(uint64_t lo, uint64_t hi) {
  return _mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo));
}
#elif defined(__ARM_NEON)
using Bytes16 = uint8x16_t;
inline Bytes16 b16_load(const void* p) { return vld1q_u8(static_cast<const uint8_t*>(p)); }
inline void b16_store(void* p, Bytes16 v) { vst1q_u8(static_cast<uint8_t*>(p), v); }
inline Bytes16 b16_splat(uint8_t x) { return vdupq_n_u8(x); }
inline Bytes16 b16_and(Bytes16 a, Bytes16 b) { return vandq_u8(a, b); }
inline Bytes16 b16_or(Bytes16 a, Bytes16 b) { return vorrq_u8(a, b); }
inline Bytes16 b16_xor(Bytes16 a, Bytes16 b) { return veorq_u8(a, b); }
inline Bytes16 b16_eq(Bytes16 a, Bytes16 b) { return vceqq_u8(a, b); }
inline Bytes16 shr_bytes(Bytes16 v, int n, int mask) {
  return vandq_u8(vshlq_u8(v, vdupq_n_s8(static_cast<int8_t>(-n))), vdupq_n_u8(static_cast<uint8_t>(mask)));
}
inline Bytes16 shl_small_bytes(Bytes16 v, int n) { return vshlq_u8(v, vdupq_n_s8(static_cast<int8_t>(n))); }
inline Bytes16 b16_from_u64(uint64_t lo, uint64_t hi) {
  return vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(lo), vcreate_u64(hi)));
}
#else
struct Bytes16 {
  uint8_t b[16];
};
inline Bytes16 b16_load(const void* p) {
  Bytes16 r;
  std::memcpy(r.b, p, 16);
  return r;
}
inline void b16_store(void* p, Bytes16 v) { std::memcpy(p, v.b, 16); }
template <class Op>
inline Bytes16 b16_map(Bytes16 a, Bytes16 b, Op op) {
  Bytes16 r;
  for (int i = 0; i < 16; ++i) r.b[i] = static_cast<uint8_t>(op(a.b[i], b.b[i]));
  return r;
}
inline Bytes16 b16_splat(uint8_t x) {
  Bytes16 r;
  std::memset(r.b, x, 16);
  return r;
}
inline Bytes16 b16_and(Bytes16 a, Bytes16 b) { return b16_map(a, b, [](int x, int y) { return x & y; }); }
inline Bytes16 b16_or(Bytes16 a, Bytes16 b) { return b16_map(a, b, [](int x, int y) { return x | y; }); }
inline Bytes16 b16_xor(Bytes16 a, Bytes16 b) { return b16_map(a, b, [](int x, int y) { return x ^ y; }); }
inline Bytes16 b16_eq(Bytes16 a, Bytes16 b) { return b16_map(a, b, [](int x, int y) { return x == y ? 0xFF : 0; }); }
inline Bytes16 shr_bytes(Bytes16 v, int n, int mask) {
  for (auto& x : v.b) x = static_cast<uint8_t>((x >> n) & mask);
  return v;
}
inline Bytes16 shl_small_bytes(Bytes16 v, int n) {
  for (auto& x : v.b) x = static_cast<uint8_t>(x << n);
  return v;
}
inline Bytes16 b16_from_u64(uint64_t lo, uint64_t hi) {
  Bytes16 r;
  for (int i = 0; i < 8; ++i) {
    r.b[i] = static_cast<uint8_t>(lo >> (8 * i));
    r.b[8 + i] = static_cast<uint8_t>(hi >> (8 * i));
  }
  return r;
}
#endif

// 16 bits -> 16 bytes, byte j = 0x10 if bit j is set.
inline Bytes16 bits_to_0x10(uint32_t bits16) {
  const uint64_t lo = (bits16 & 0xFF) * 0x0101010101010101ull;
  const uint64_t hi = ((bits16 >> 8) & 0xFF) * 0x0101010101010101ull;
  const Bytes16 sel = b16_from_u64(0x8040201008040201ull, 0x8040201008040201ull);
  const Bytes16 v = b16_and(b16_from_u64(lo, hi), sel);
  return b16_and(b16_eq(v, sel), b16_splat(0x10));
}

// The 32 bytes of a 32-element block with 4-bit nibbles qs and fifth bits qh (none if null).
inline void unpack_q4_block(const uint8_t* qs_src, const uint8_t* qh_src, uint8_t* u) {
  const Bytes16 q = b16_load(qs_src);
  Bytes16 lo = shr_bytes(q, 0, 0x0F), hi = shr_bytes(q, 4, 0x0F);
  if (qh_src) {
    uint32_t qh;
    std::memcpy(&qh, qh_src, 4);
    lo = b16_or(lo, bits_to_0x10(qh & 0xFFFF));
    hi = b16_or(hi, bits_to_0x10(qh >> 16));
  }
  b16_store(u, lo);
  b16_store(u + 16, hi);
}

// Q4_K / Q5_K super-block bytes (qh == nullptr for Q4_K): element 64j + l = nibble 0 of
// qs[32j + l] (+ qh[l] bit 2j), 64j + 32 + l = nibble 1 (+ bit 2j + 1).
inline void unpack_k4_superblock(const uint8_t* qs, const uint8_t* qh, uint8_t* u) {
  for (int j = 0; j < 4; ++j)
    for (int half = 0; half < 2; ++half) {
      const Bytes16 q = b16_load(qs + 32 * j + 16 * half);
      Bytes16 lo = shr_bytes(q, 0, 0x0F), hi = shr_bytes(q, 4, 0x0F);
      if (qh) {
        const Bytes16 h = b16_load(qh + 16 * half);
        lo = b16_or(lo, shl_small_bytes(shr_bytes(h, 2 * j, 1), 4));
        hi = b16_or(hi, shl_small_bytes(shr_bytes(h, 2 * j + 1, 1), 4));
      }
      b16_store(u + 64 * j + 16 * half, lo);
      b16_store(u + 64 * j + 32 + 16 * half, hi);
    }
}

// Q2_K / Q3_K super-block bytes: element 128h + 32j + l = (qs[32h + l] >> 2j) & 3, plus
// hmask[l] bit (4h + j) as bit 2 (hmask == nullptr for Q2_K).
inline void unpack_k2_superblock(const uint8_t* qs, const uint8_t* hmask, uint8_t* u) {
  for (int h = 0; h < 2; ++h)
    for (int half = 0; half < 2; ++half) {
      const Bytes16 q = b16_load(qs + 32 * h + 16 * half);
      const Bytes16 hm = hmask ? b16_load(hmask + 16 * half) : b16_splat(0);
      for (int j = 0; j < 4; ++j) {
        Bytes16 v = shr_bytes(q, 2 * j, 3);
        if (hmask) v = b16_or(v, shl_small_bytes(shr_bytes(hm, 4 * h + j, 1), 2));
        b16_store(u + 128 * h + 32 * j + 16 * half, v);
      }
    }
}

// Q6_K super-block bytes (see BlockQ6_K).
inline void unpack_q6_k_superblock(const BlockQ6_K& b, uint8_t* u) {
  for (int h = 0; h < 2; ++h)
    for (int half = 0; half < 2; ++half) {
      const Bytes16 l0 = b16_load(b.ql + 64 * h + 16 * half);
      const Bytes16 l1 = b16_load(b.ql + 64 * h + 32 + 16 * half);
      const Bytes16 qh = b16_load(b.qh + 32 * h + 16 * half);
      for (int c = 0; c < 4; ++c) {
        const Bytes16 low = shr_bytes(c & 1 ? l1 : l0, c < 2 ? 0 : 4, 0x0F);
        const Bytes16 high = shl_small_bytes(shr_bytes(qh, 2 * c, 3), 4);
        b16_store(u + 128 * h + 32 * c + 16 * half, b16_or(low, high));
      }
    }
}

// The 8 scales and mins (6 bits each) of a Q4_K / Q5_K super-block, from its 12 scale bytes:
// sc[j] = s[j] & 63, mn[j] = s[j+4] & 63 for j < 4; for j >= 4 the low 4 bits come from
// s[j+4] (low / high nibble) and the top 2 bits from s[j-4] >> 6 / s[j] >> 6.
inline void k4_scales_mins(const uint8_t* scales, uint8_t* sc, uint8_t* mn) {
  uint32_t a[3];
  std::memcpy(a, scales, 12);
  const uint32_t sc_lo = a[0] & 0x3F3F3F3Fu, mn_lo = a[1] & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (a[2] & 0x0F0F0F0Fu) | (((a[0] >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((a[2] >> 4) & 0x0F0F0F0Fu) | (((a[1] >> 6) & 0x03030303u) << 4);
  std::memcpy(sc, &sc_lo, 4);
  std::memcpy(sc + 4, &sc_hi, 4);
  std::memcpy(mn, &mn_lo, 4);
  std::memcpy(mn + 4, &mn_hi, 4);
}

// Weight row -> u[n_in] (= q + offset, natural order), dw[n_in / sub_block],
// mw[n_in / sub_block] (types with a min; value = dw * (u - offset) + mw).
// q8_unsigned: Q8_0 as q + 128 (else the int8 bits unchanged, offset 0).
inline void unpack_row(TensorType t, const void* row, int64_t n_in, bool q8_unsigned, uint8_t* u,
                       float* dw, float* mw) {
  switch (t) {
    case TensorType::Q4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(row);
      for (int64_t i = 0; i < n_in / kQK; ++i, u += kQK) {
        unpack_q4_block(b[i].qs, nullptr, u);
        dw[i] = unpack_half(b[i].d);
      }
      return;
    }
    case TensorType::Q4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(row);
      for (int64_t i = 0; i < n_in / kQK; ++i, u += kQK) {
        unpack_q4_block(b[i].qs, nullptr, u);
        dw[i] = unpack_half(b[i].d);
        mw[i] = unpack_half(b[i].m);
      }
      return;
    }
    case TensorType::Q5_0: {
      const auto* b = static_cast<const BlockQ5_0*>(row);
      for (int64_t i = 0; i < n_in / kQK; ++i, u += kQK) {
        unpack_q4_block(b[i].qs, b[i].qh, u);
        dw[i] = unpack_half(b[i].d);
      }
      return;
    }
    case TensorType::Q5_1: {
      const auto* b = static_cast<const BlockQ5_1*>(row);
      for (int64_t i = 0; i < n_in / kQK; ++i, u += kQK) {
        unpack_q4_block(b[i].qs, b[i].qh, u);
        dw[i] = unpack_half(b[i].d);
        mw[i] = unpack_half(b[i].m);
      }
      return;
    }
    case TensorType::Q8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(row);
      const Bytes16 flip = b16_splat(q8_unsigned ? 0x80 : 0x00);
      for (int64_t i = 0; i < n_in / kQK; ++i, u += kQK) {
        b16_store(u, b16_xor(b16_load(b[i].qs), flip));
        b16_store(u + 16, b16_xor(b16_load(b[i].qs + 16), flip));
        dw[i] = unpack_half(b[i].d);
      }
      return;
    }
    case TensorType::MXFP4: {  // u = kMxfp4U[nibble] (quant.h), dw = mxfp4_block_scale
      const auto* b = static_cast<const uint8_t*>(row);
      for (int64_t i = 0; i < n_in / kQK; ++i, b += 17, u += kQK) {
        for (int j = 0; j < 16; ++j) {
          u[j] = kMxfp4U[b[1 + j] & 0x0F];
          u[j + 16] = kMxfp4U[b[1 + j] >> 4];
        }
        dw[i] = mxfp4_block_scale(b);
      }
      return;
    }
    case TensorType::Q2_K: {
      const auto* b = static_cast<const BlockQ2_K*>(row);
      for (int64_t i = 0; i < n_in / kQK_K; ++i, u += kQK_K, dw += 16, mw += 16) {
        const float d = unpack_half(b[i].d), dmin = unpack_half(b[i].dmin);
        unpack_k2_superblock(b[i].qs, nullptr, u);
        for (int s = 0; s < 16; ++s) {
          dw[s] = d * static_cast<float>(b[i].scales[s] & 0x0F);
          mw[s] = -(dmin * static_cast<float>(b[i].scales[s] >> 4));
        }
      }
      return;
    }
    case TensorType::Q3_K: {
      const auto* b = static_cast<const BlockQ3_K*>(row);
      for (int64_t i = 0; i < n_in / kQK_K; ++i, u += kQK_K, dw += 16) {
        const float d = unpack_half(b[i].d);
        unpack_k2_superblock(b[i].qs, b[i].hmask, u);
        for (int s = 0; s < 16; ++s) dw[s] = d * static_cast<float>(q3k_scale(b[i].scales, s));
      }
      return;
    }
    case TensorType::Q4_K:
    case TensorType::Q5_K: {
      const bool q5 = t == TensorType::Q5_K;
      const size_t bytes = q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
      const auto* base = static_cast<const uint8_t*>(row);
      for (int64_t i = 0; i < n_in / kQK_K; ++i, u += kQK_K, dw += 8, mw += 8) {
        // Q4_K and Q5_K share the leading d, dmin, scales[12]; Q5_K has qh[32] before qs.
        const auto* b = reinterpret_cast<const BlockQ4_K*>(base + i * bytes);
        const auto* b5 = reinterpret_cast<const BlockQ5_K*>(base + i * bytes);
        const float d = unpack_half(b->d), dmin = unpack_half(b->dmin);
        unpack_k4_superblock(q5 ? b5->qs : b->qs, q5 ? b5->qh : nullptr, u);
        uint8_t sc[8], mn[8];
        k4_scales_mins(b->scales, sc, mn);
        for (int s = 0; s < 8; ++s) {
          dw[s] = d * static_cast<float>(sc[s]);
          mw[s] = -(dmin * static_cast<float>(mn[s]));
        }
      }
      return;
    }
    case TensorType::Q6_K: {
      const auto* b = static_cast<const BlockQ6_K*>(row);
      for (int64_t i = 0; i < n_in / kQK_K; ++i, u += kQK_K, dw += 16) {
        const float d = unpack_half(b[i].d);
        unpack_q6_k_superblock(b[i], u);
        for (int s = 0; s < 16; ++s) dw[s] = d * static_cast<float>(b[i].scales[s]);
      }
      return;
    }
    default:
      return;
  }
}

// Activation row -> int8 q[n] and d[n / block]: per block, d = max|x| / 127 and
// q = x * (127 / max|x|) rounded to nearest, ties to even (|q| <= 127).
inline void quantize_act_row(const float* x, int64_t n, int block, int8_t* q, float* d) {
  for (int64_t b = 0; b < n / block; ++b, x += block, q += block) {
    float amax = 0.0f;
    for (int i = 0; i < block; ++i) {
      const float a = __builtin_fabsf(x[i]);
      amax = a > amax ? a : amax;
    }
    d[b] = amax / 127.0f;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < block; ++i) {
      float v = __builtin_nearbyintf(x[i] * id);
      v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
      q[i] = static_cast<int8_t>(v);
    }
  }
}

}  // namespace
}  // namespace ubatch::kernels::detail
