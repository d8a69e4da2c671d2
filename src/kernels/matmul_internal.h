// Private: the quantized types' integer view, the float-weight backends and the per-level
// entry points (tests call them directly to exercise every level).
//
// Quantized weights: a weight row's elements are unsigned bytes u = q + offset (q the signed
// integer the format stores) with a float scale dw per sub-block (and a float "min" mw for the
// types that have one); activation rows are quantized to int8 with a float scale per
// activation block (32 elements for the 32-element types, 256 = Q8_K for the K-quants). Per
// sub-block, dot = dw · dx · (Σ u·xq − offset · Σ xq) [+ mw · dx · Σ xq] (for the K-quants
// dw = d · sc and mw = −dmin · mn, kept apart as integers sc, mn until one multiply). The kernels
// read the weights repacked (packed_weight.h) and run the one float order of gemm_internal.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor_type.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"

namespace ubatch::kernels::detail {


// How a quantized type meets the integer kernels.
struct QuantInfo {
  int sub_block = 32;    // elements per weight scale (16 or 32)
  int act_block = 32;    // elements per activation scale (32, or 256 for the K-quants)
  int offset = 0;        // u = q + offset
  bool has_min = false;  // a per-sub-block additive term mw * sum(x)
};

// Q8_0 can store u = q ^ 0x80 = q + 128 (VNNI multiplies unsigned by signed bytes) or keep q
// signed (the AVX2 kernel multiplies |q| by sign(x, q)); q8_unsigned selects.
bool quant_info(TensorType t, bool q8_unsigned, QuantInfo& info);

// Rows whose results the float kernels collect before writing them to y (one 64-byte line per
// token); threads get whole multiples of it.
constexpr int kOutRows = 16;

// One SIMD level's float-weight implementation (AVX2, AVX-512 or NEON).
struct Backend {
  // F32/F16/BF16 weights: y rows [r0, r1) for all tokens from f32 x.
  // scratch: float_scratch_bytes(n_in, n_tokens).
  void (*rows_float)(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t r0,
                     int64_t r1, uint8_t* scratch);
};
static inline int64_t float_scratch_bytes(int64_t n_in, int64_t n_tokens) {
  return 4 * n_in + 128 + 4 * kOutRows * n_tokens;
}

const Backend& backend_avx2();
const Backend& backend_avx512();  // needs AVX-512 F/BW/VL/DQ and VNNI
const Backend& backend_neon();    // aarch64 builds: NEON (the Neon and Dotprod levels)

// matmul on a given level. A quantized weight without a packed copy is packed for the call
// (slow; the model packs once at load). Levels above what the CPU offers must not be asked
// for (callers check cpu_features()).
void matmul_at_level(SimdLevel level, const WeightView& w, const float* x, int64_t n_tokens,
                     float* y, ThreadPool& pool);
// matmul of a packed weight on a given level (gemm_internal.h).
void matmul_packed(SimdLevel level, const PackedWeight& w, const float* x, int64_t n_tokens,
                   float* y, ThreadPool& pool);
// n (<= kMaxMulti) packed weights with the same n_in times the same x, in one pool job.
constexpr int kMaxMulti = 4;
void matmul_packed_multi(SimdLevel level, const PackedWeight* const* ws, float* const* ys, int n,
                         const float* x, int64_t n_tokens, ThreadPool& pool);
// The calling thread's scratch for gemm's unpacked panels (at least `bytes`, 64-byte aligned;
// valid until that thread's next call).
uint8_t* thread_gemm_scratch(size_t bytes);
// The level matmul() uses on this machine for a call with n_tokens rows (the plan of
// matmul_levels() in matmul.h).
SimdLevel matmul_level(int64_t n_tokens);

}  // namespace ubatch::kernels::detail
