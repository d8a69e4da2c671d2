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

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
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

// Weight row -> u[n_in] (= q + offset, natural order), dw[n_in / sub_block],
// mw[n_in / sub_block] (types with a min; value = dw * (u - offset) + mw).
// q8_unsigned: Q8_0 as q + 128 (else the int8 bits unchanged, offset 0).
inline void unpack_row(TensorType t, const void* row, int64_t n_in, bool q8_unsigned, uint8_t* u,
                       float* dw, float* mw) {
  switch (t) {
    case TensorType::Q4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(row);
      for (int64_t i = 0; i < n_in / kQK; ++i, u += kQK) {
        for (int j = 0; j < 16; ++j) {
          u[j] = b[i].qs[j] & 0x0F;
          u[j + 16] = b[i].qs[j] >> 4;
        }
        dw[i] = unpack_half(b[i].d);
      }
      return;
    }
    case TensorType::Q4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(row);
      for (int64_t i = 0; i < n_in / kQK; ++i, u += kQK) {
        for (int j = 0; j < 16; ++j) {
          u[j] = b[i].qs[j] & 0x0F;
          u[j + 16] = b[i].qs[j] >> 4;
        }
        dw[i] = unpack_half(b[i].d);
        mw[i] = unpack_half(b[i].m);
      }
      return;
    }
    case TensorType::Q5_0: {
      const auto* b = static_cast<const BlockQ5_0*>(row);
      for (int64_t i = 0; i < n_in / kQK; ++i, u += kQK) {
        uint32_t qh;
        std::memcpy(&qh, b[i].qh, 4);
        for (int j = 0; j < 16; ++j) {
          u[j] = static_cast<uint8_t>((b[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4));
          u[j + 16] = static_cast<uint8_t>((b[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
        }
        dw[i] = unpack_half(b[i].d);
      }
      return;
    }
    case TensorType::Q5_1: {
      const auto* b = static_cast<const BlockQ5_1*>(row);
      for (int64_t i = 0; i < n_in / kQK; ++i, u += kQK) {
        uint32_t qh;
        std::memcpy(&qh, b[i].qh, 4);
        for (int j = 0; j < 16; ++j) {
          u[j] = static_cast<uint8_t>((b[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4));
          u[j + 16] = static_cast<uint8_t>((b[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
        }
        dw[i] = unpack_half(b[i].d);
        mw[i] = unpack_half(b[i].m);
      }
      return;
    }
    case TensorType::Q8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(row);
      const uint8_t flip = q8_unsigned ? 0x80 : 0x00;
      for (int64_t i = 0; i < n_in / kQK; ++i, u += kQK) {
        uint8_t raw[kQK];
        std::memcpy(raw, b[i].qs, kQK);
        for (int j = 0; j < kQK; ++j) u[j] = raw[j] ^ flip;
        dw[i] = unpack_half(b[i].d);
      }
      return;
    }
    case TensorType::Q2_K: {
      const auto* b = static_cast<const BlockQ2_K*>(row);
      for (int64_t i = 0; i < n_in / kQK_K; ++i, u += kQK_K, dw += 16, mw += 16) {
        const float d = unpack_half(b[i].d), dmin = unpack_half(b[i].dmin);
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 4; ++j)
            for (int l = 0; l < 32; ++l)
              u[128 * h + 32 * j + l] = (b[i].qs[32 * h + l] >> (2 * j)) & 3;
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
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 4; ++j)
            for (int l = 0; l < 32; ++l)
              u[128 * h + 32 * j + l] = static_cast<uint8_t>(
                  ((b[i].qs[32 * h + l] >> (2 * j)) & 3) | (((b[i].hmask[l] >> (4 * h + j)) & 1) << 2));
        for (int s = 0; s < 16; ++s) dw[s] = d * static_cast<float>(q3k_scale(b[i].scales, s));
      }
      return;
    }
    case TensorType::Q4_K: {
      const auto* b = static_cast<const BlockQ4_K*>(row);
      for (int64_t i = 0; i < n_in / kQK_K; ++i, u += kQK_K, dw += 8, mw += 8) {
        const float d = unpack_half(b[i].d), dmin = unpack_half(b[i].dmin);
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l) {
            u[64 * j + l] = b[i].qs[32 * j + l] & 0x0F;
            u[64 * j + 32 + l] = b[i].qs[32 * j + l] >> 4;
          }
        for (int s = 0; s < 8; ++s) {
          uint8_t sc, mn;
          k4_scale_min(b[i].scales, s, sc, mn);
          dw[s] = d * static_cast<float>(sc);
          mw[s] = -(dmin * static_cast<float>(mn));
        }
      }
      return;
    }
    case TensorType::Q5_K: {
      const auto* b = static_cast<const BlockQ5_K*>(row);
      for (int64_t i = 0; i < n_in / kQK_K; ++i, u += kQK_K, dw += 8, mw += 8) {
        const float d = unpack_half(b[i].d), dmin = unpack_half(b[i].dmin);
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l) {
            const uint8_t q = b[i].qs[32 * j + l], h = b[i].qh[l];
            u[64 * j + l] = static_cast<uint8_t>((q & 0x0F) | (((h >> (2 * j)) & 1) << 4));
            u[64 * j + 32 + l] = static_cast<uint8_t>((q >> 4) | (((h >> (2 * j + 1)) & 1) << 4));
          }
        for (int s = 0; s < 8; ++s) {
          uint8_t sc, mn;
          k4_scale_min(b[i].scales, s, sc, mn);
          dw[s] = d * static_cast<float>(sc);
          mw[s] = -(dmin * static_cast<float>(mn));
        }
      }
      return;
    }
    case TensorType::Q6_K: {
      const auto* b = static_cast<const BlockQ6_K*>(row);
      for (int64_t i = 0; i < n_in / kQK_K; ++i, u += kQK_K, dw += 16) {
        const float d = unpack_half(b[i].d);
        for (int h = 0; h < 2; ++h) {
          const uint8_t* ql = b[i].ql + 64 * h;
          const uint8_t* qh = b[i].qh + 32 * h;
          for (int l = 0; l < 32; ++l) {
            u[128 * h + l] = static_cast<uint8_t>((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
            u[128 * h + 32 + l] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
            u[128 * h + 64 + l] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            u[128 * h + 96 + l] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
          }
        }
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
      const float a = std::fabs(x[i]);
      amax = a > amax ? a : amax;
    }
    d[b] = amax / 127.0f;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < block; ++i) {
      float v = std::nearbyint(x[i] * id);
      v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
      q[i] = static_cast<int8_t>(v);
    }
  }
}

}  // namespace
}  // namespace ubatch::kernels::detail
