// Matrix multiplication of a ubatch of activations by a (possibly quantized) weight.
//
//   y[t][o] = sum_i x[t][i] * W[o][i]      x: [n_tokens, n_in] f32, W: [n_out, n_in] of w.type,
//                                          y: [n_tokens, n_out] f32 (row-major, dense)
//
// Quantized weights are multiplied with activations quantized per row to the weight's dot
// type (Q8_0 for the 32-element block types, Q8_K for the K-quants), as the GGUF block
// formats are designed for; F32/F16/BF16 weights use f32 activations.
//
// Batch invariance: y[t][o] depends only on x[t] and W[o] — it is computed with the same
// sequence of floating-point operations whatever n_tokens, the tiling, the thread count, the
// SIMD level (scalar, AVX2, AVX-512, AMX), or which other rows share the call: quantized
// weights by the canonical order of gemm_internal.h, float weights by the 16-lane float dot
// of matmul_float_inl.h. Quantized weights are read from their packed copy
// (packed_weight.h); errors (bad view, unsupported type) are internal checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor_type.h"
#include "kernels/cpu_features.h"
#include "kernels/level_plan.h"
#include "kernels/thread_pool.h"

namespace ubatch::kernels {

struct PackedWeight;  // kernels/packed_weight.h

struct WeightView {
  TensorType type = TensorType::F32;
  const void* data = nullptr;  // [n_out] rows of row_bytes bytes each
  int64_t n_in = 0;            // elements per row (ne0 in GGUF)
  int64_t n_out = 0;           // rows (ne1 in GGUF)
  size_t row_bytes = 0;        // tensor_row_bytes(type, n_in)
  // The same weight repacked for the kernels (packed_weight.h), or null. When set, matmul
  // reads only it (data may then be released); matmul_reference still reads data.
  const PackedWeight* packed = nullptr;
};

// True when matmul supports weights of type t (every type dequantize_row supports; MXFP4 only
// with scales an f16 holds: quant.h mxfp4_scales_fit_f16, checked when the weight is packed).
bool can_matmul(TensorType t);

// The highest SIMD level matmul may run at on this machine: simd_level(), lowered to AVX2 when
// AVX-512 lacks VNNI and to AVX-512 when the AMX self-check fails (gemm_internal.h); `why`
// (when given) receives the reason for such a lowering, or "". Decided once per process. Each
// call runs at the level matmul_levels() plans for its shape, at most this one.
SimdLevel matmul_simd_level(std::string* why = nullptr);

// The level matmul runs at per shape class (level_plan.h: decode 1-2 rows, small batch 3-64,
// prefill 65+), decided once per process, on first use:
//   - the fastest of the usable levels up to matmul_simd_level(), each having passed its
//     self-check (bit-identical to the scalar level on the probe products), as measured by
//     level_probe.cpp on this CPU model; the timings are cached in a small file
//     (level_cache_path: $XDG_CACHE_HOME/ubatch/, else ~/.cache/ubatch/) and measured again
//     only when it is missing, for another CPU model or build, or lacks a usable level;
//   - matmul_simd_level() for every class when only one level is usable, or when the
//     environment sets UBATCH_KERNEL_TUNE=off (UBATCH_KERNEL_TUNE=measure ignores the cache
//     and measures again; other values: a warning, then the default).
// All levels give the same bits, so the plan changes speed only.
struct MatmulLevels {
  SimdLevel ceiling = SimdLevel::Scalar;  // matmul_simd_level()
  LevelPlan plan;
  std::string source;                // how the plan was decided, for logs ("measured now in 31 ms, cached in ...")
  std::vector<LevelTiming> timings;  // what the choice was made from; empty when nothing was measured
};
const MatmulLevels& matmul_levels();

// "decode avx2, small-batch avx2, prefill avx2 (measured earlier on this CPU model (PATH))".
std::string describe_matmul_levels();

// True when the AMX tile path may run on this machine: amx_available() and the start-up
// self-check (a forked child bit-compares AMX with AVX-512) passed; otherwise why gets the
// reason. Independent of UBATCH_SIMD. Decided once per process.
bool amx_matmul_usable(std::string* why = nullptr);

// y = x · Wᵀ as above, split over the pool's threads by output rows.
void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// Several products of the same activations, y_i = x · W_iᵀ for i < n (n <= 4, every W_i with
// the same n_in), in one hand-off to the pool instead of n (Q/K/V, gate/up). Each y_i is
// bit-identical to matmul(W_i, x, n_tokens, y_i, pool). Weights without a packed copy are
// multiplied one after the other.
void matmul_multi(const WeightView* const* ws, float* const* ys, int n, const float* x,
                  int64_t n_tokens, ThreadPool& pool);

// One item of matmul_grouped: y_i = x · W_iᵀ for i < n (n <= 4, every W_i with the same n_in),
// x: [n_tokens, n_in] f32, y_i: [n_tokens, W_i.n_out] f32 (row-major, dense).
struct MatmulGroupItem {
  const WeightView* ws[4] = {};
  float* ys[4] = {};
  int n = 0;
  const float* x = nullptr;
  int64_t n_tokens = 0;
};

// Many independent products in two hand-offs to the pool — one quantizes every item's
// activations, one runs every item's panels, dealt to the threads as one list — instead of two
// per item (a mixture-of-experts layer: one item per expert with the tokens routed to it). Each
// y_i is bit-identical to matmul_multi on its item alone (which the fallback runs, item after
// item, when a weight has no packed copy). Items may differ in n_in and n_tokens; n_tokens 0
// is skipped.
void matmul_grouped(const MatmulGroupItem* items, int64_t n_items, ThreadPool& pool);

// The scalar reference, from the GGUF blocks (not the packed copy): every level gives its
// bits exactly (tests/test_kernels_gemm.cpp, test_kernels_matmul_float.cpp).
void matmul_reference(const WeightView& w, const float* x, int64_t n_tokens, float* y);

}  // namespace ubatch::kernels
