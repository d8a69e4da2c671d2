// Block formats: dequantize and quantize rows of every supported tensor type.
//
// Layouts are those of the GGUF format's ggml block types (see common/tensor_type.h for the
// block sizes). A "row" is n consecutive elements, n a multiple of the type's block size.
// Every function here has a scalar reference; SIMD variants, where present, give results
// identical to it for dequantization (exact arithmetic on each block's scales).
#pragma once

#include <cstdint>

#include "common/tensor_type.h"

namespace ubatch::kernels {

// True for the types dequantize_row supports: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4.
bool can_dequantize(TensorType t);

// MXFP4 (GGUF type 39; OCP Microscaling Formats (MX) v1.0, 2023, with the block layout of the
// GGUF files): blocks of 32 weights, 17 bytes: byte 0 = e, an E8M0 exponent; bytes 1..16 = qs.
// Weight j (0..15) is the low nibble of qs[j], weight j + 16 the high nibble. A nibble n means
// mxfp4_code(n) = {0, 1, 2, 3, 4, 6, 8, 12, 0, −1, −2, −3, −4, −6, −8, −12}[n] (twice the FP4
// E2M1 value; bit 3 is the sign) and the weight is mxfp4_code(n) · 2^(e − 128), computed
// exactly in f32 (denormal for e <= 2; e >= 253 can overflow to ±inf, e = 255 is not read as
// NaN). dequantize_row is that definition.
inline int mxfp4_code(unsigned nibble) {
  static constexpr int8_t k[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  return k[nibble & 15];
}

// mxfp4_code(n) + 12 for every nibble n: the unsigned bytes (0..24, offset 12) the matmul
// kernels multiply (packed_weight.h B4T, matmul_unpack.h).
inline constexpr uint8_t kMxfp4U[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

// True when an MXFP4 block scale (mxfp4_block_scale) is exactly an f16: 0 or 2^k, k in [−24, 15].
inline bool mxfp4_scale_fits_f16(float d) { return d == 0.0f || (d >= 0x1p-24f && d <= 0x1p15f); }

// The scale of one MXFP4 block (17 bytes at `block`) as the kernels use it: 2^(e − 128), or 0
// when every code of the block is zero (its values are 0 whatever e says). Exact in f32.
float mxfp4_block_scale(const uint8_t* block);

// True when every block of n MXFP4 weights (n % 32 == 0) has a scale (mxfp4_block_scale) that
// an f16 holds exactly: 0 or 2^k with k in [−24, 15]. The packed layout (packed_weight.h)
// stores scales as f16, so only such weights are packed; the model keeps others as F32.
bool mxfp4_scales_fit_f16(const void* src, int64_t n);

// dst[0..n) = values of the n elements stored at src (type t). n % block_size(t) == 0.
void dequantize_row(TensorType t, const void* src, float* dst, int64_t n);

// True for the types quantize_row supports: F32, F16, BF16, Q8_0, Q8_K (the activation
// formats matmul uses and the KV cache storage types).
bool can_quantize(TensorType t);

// Encodes src[0..n) as type t at dst (tensor_row_bytes(t, n) bytes). n % block_size(t) == 0.
void quantize_row(TensorType t, const float* src, void* dst, int64_t n);

// IEEE half and bfloat16 conversions (round to nearest even).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace ubatch::kernels
