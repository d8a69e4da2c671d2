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
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool can_dequantize(TensorType t);

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
