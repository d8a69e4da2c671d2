// Element-wise and per-row operations of transformer forward passes, on f32 rows.
//
// Each has a scalar reference (namespace ref) and a dispatched version that may use SIMD. The
// SIMD versions compute the same bits as the reference: one arithmetic for every level
// (ops_inl.h over the 16-lane vocabularies of simd16.h), tested byte for byte. None of them
// reduces across rows, and each row's reduction order is fixed, so they are batch invariant
// and give the same results whatever the instruction set.
#pragma once

#include <cstdint>

namespace ubatch::kernels {

// RMSNorm (Zhang & Sennrich 2019): y[i] = x[i] / sqrt(mean(x²) + eps) * w[i].
// x, y: [n]; w: [n] or nullptr (no scale). y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

// RoPE (Su et al. 2021, "RoFormer") applied in place to x: [n_head, head_dim] for one token at
// position pos. The first n_rot dims of each head rotate with theta_i = pos * base^(-2i/n_rot).
// Pairs: Normal style rotates (x[2i], x[2i+1]) (LLaMA in GGUF layout); NeoX style rotates
// (x[i], x[i + n_rot/2]) (Gemma, GPT-NeoX). freq_scale multiplies pos (linear scaling; 1 = none).
enum class RopeStyle { Normal, NeoX };
void rope(float* x, int n_head, int head_dim, int n_rot, int32_t pos, float base, float freq_scale,
          RopeStyle style);
// rope() in two parts, so a forward pass computes each position's angles once for all layers
// and heads: rope_angles fills cos[i], sin[i] (i < n_rot / 2, f32) for pos; rope_apply rotates
// with them. rope(x, …) == rope_apply(x, …, cos, sin) after rope_angles(pos, …), bit for bit.
// Extensions of the angle (both default to plain RoPE):
//  - freq_factors: [n_rot / 2] divisors of each pair's frequency, theta_i = pos·base^(-2i/n_rot)
//    / freq_factors[i] — Llama 3.1's `rope_freqs` (Meta, "The Llama 3 Herd of Models", 2024)
//    and Phi-3's LongRoPE short/long factors (Ding et al. 2024, "LongRoPE"); nullptr: none.
//  - mscale: multiplies cos and sin, hence Q·K by mscale² (LongRoPE's attention factor).
void rope_angles(int32_t pos, int n_rot, float base, float freq_scale, float* cos, float* sin,
                 const float* freq_factors = nullptr, float mscale = 1.0f);
void rope_apply(float* x, int n_head, int head_dim, int n_rot, const float* cos, const float* sin,
                RopeStyle style);

// Softmax in place over x[0..n): numerically stable (subtracts the max).
void softmax(float* x, int64_t n);

// GELU, tanh approximation (Hendrycks & Gimpel 2016): 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))).
void gelu_tanh(const float* x, float* y, int64_t n);
// SiLU (Elfwing et al. 2017): x · sigmoid(x).
void silu(const float* x, float* y, int64_t n);
// Soft-capping (Gemma 2, Gemma Team 2024): y = cap · tanh(x / cap), cap > 0; bounds logits to
// (−cap, cap). x, y: [n]; y may alias x.
void softcap(const float* x, float* y, int64_t n, float cap);

// y[i] = a[i] * b[i]; y[i] = a[i] + b[i]; y[i] = a[i] * s. y may alias a or b.
void mul(const float* a, const float* b, float* y, int64_t n);
void add(const float* a, const float* b, float* y, int64_t n);
void scale(const float* a, float s, float* y, int64_t n);

namespace ref {
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
void rope(float* x, int n_head, int head_dim, int n_rot, int32_t pos, float base, float freq_scale,
          RopeStyle style);
void softmax(float* x, int64_t n);
void gelu_tanh(const float* x, float* y, int64_t n);
void silu(const float* x, float* y, int64_t n);
void softcap(const float* x, float* y, int64_t n, float cap);
}  // namespace ref

}  // namespace ubatch::kernels
