// Private: the GGUF (ggml) block structs and the per-level dequantize entry points.
//
// Layouts are those of the ggml block types as the GGUF spec defines them
// (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md, ggml-common.h). All fields are
// little-endian; f16 fields are IEEE half bit patterns. Sizes are checked against
// common/tensor_type.cpp by static_assert and by tests.
#pragma once

#include <cstdint>

#include "common/tensor_type.h"

namespace ubatch::kernels::detail {

constexpr int kQK = 32;    // elements per block of the 32-element types
constexpr int kQK_K = 256; // elements per super-block of the K-quants

// value = d * (q - 8), q the 4-bit nibble; element j (< 16) in the low nibble of qs[j],
// element j + 16 in the high nibble.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// value = d * q + m, nibbles as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
// value = d * (q - 16), q = nibble (as Q4_0) | (bit i of qh) << 4 for element i.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// value = d * q + m, q as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// value = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// Super-block of 256 in 16 sub-blocks of 16. scales[j]: low nibble = scale, high nibble = min.
// Element 128h + 32j + l (h < 2, j < 4, l < 32) = (qs[32h + l] >> 2j) & 3 in sub-block
// 8h + 2j + l/16; value = d * scale * q - dmin * min.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
// Super-block of 256 in 16 sub-blocks of 16 with 6-bit signed scales (stored + 32, packed in
// 12 bytes). Element 128h + 32j + l: low 2 bits (qs[32h + l] >> 2j) & 3, high bit
// hmask[l] bit (4h + j), in sub-block 8h + 2j + l/16;
// value = d * (scale - 32) * (low - (high bit set ? 0 : 4)).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
// Super-block of 256 in 8 sub-blocks of 32, 6-bit scales and mins packed in 12 bytes.
// Element 64j + l (l < 32) = qs[32j + l] & 15 (sub-block 2j), 64j + 32 + l = qs[32j + l] >> 4
// (sub-block 2j + 1); value = d * scale * q - dmin * min.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
// As Q4_K with a fifth bit: element 64j + l gets qh[l] bit 2j, 64j + 32 + l gets bit 2j + 1.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// Super-block of 256 in 16 sub-blocks of 16, int8 scales. In half h (128 elements, ql + 64h,
// qh + 32h), for l < 32: element 32c + l (c < 4) has low 4 bits from ql[l + 32 (c & 1)]
// (low nibble for c < 2, high for c >= 2) and high 2 bits (qh[l] >> 2c) & 3;
// value = d * scales[8h + 2c + l / 16] * (q - 32).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
// Activation type for the K-quants: value = d * qs[i]; bsums[j] = sum of qs[16j .. 16j + 15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// Helpers below are `static`: SIMD translation units include this header, and an inline
// function with external linkage compiled there could be the copy the linker keeps for all.

// Unpacks the 6-bit scale and min of sub-block j (< 8) of a Q4_K / Q5_K super-block.
static inline void k4_scale_min(const uint8_t* scales, int j, uint8_t& sc, uint8_t& mn) {
  if (j < 4) {
    sc = scales[j] & 63;
    mn = scales[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
    mn = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// The signed scale (-32 .. 31) of sub-block j (< 16) of a Q3_K super-block.
static inline int q3k_scale(const uint8_t* scales, int j) {
  const int low = j < 8 ? (scales[j] & 0x0F) : (scales[j - 8] >> 4);
  const int high = (scales[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
  return (low | (high << 4)) - 32;
}

// Per-level dequantize entry points (exact: every level gives the scalar's bits).
void dequantize_row_scalar(TensorType t, const void* src, float* dst, int64_t n);
// True when the AVX2 level has its own code for t (else it falls back to the scalar code).
bool dequantize_row_avx2_supports(TensorType t);
void dequantize_row_avx2(TensorType t, const void* src, float* dst, int64_t n);
// F16C conversion of n floats to binary16, round to nearest even: the bits of fp32_to_fp16.
void quantize_row_f16_avx2(const float* src, uint16_t* dst, int64_t n);

}  // namespace ubatch::kernels::detail
