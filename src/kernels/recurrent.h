// Kernels of recurrent sequence mixers: one token's step of a causal depthwise convolution with
// its rolling input state, and one token's step of the gated delta rule. They know nothing of
// models; model/block_deltanet.cpp and model/block_shortconv.cpp compose them.
//
// Sources: Gated Delta Networks (Yang, Kautz, Hatamizadeh, ICLR 2025) for the delta rule with a
// scalar decay per head; the short causal convolution of Mamba (Gu & Dao 2023) and of LFM2's
// gated short-convolution block (Liquid AI 2025).
//
// Every function is plain scalar C++ with a fixed summation order, so results are identical at
// every SIMD level and for every batch composition (a sequence's state only ever sees its own
// tokens, one at a time).
#pragma once

#include <cstdint>

namespace ubatch::kernels {

// One step of a causal depthwise convolution over n_ch channels with kernel size k_size.
//   in:    [n_ch]             this token's input
//   state: [k_size - 1, n_ch] the previous k_size − 1 inputs, oldest first (zeros at the start);
//                             updated in place: shifted by one, `in` appended
//   w:     [n_ch, k_size]     taps per channel, tap k_size − 1 multiplies the current input
//   out:   [n_ch]             Σ_j w[c][j] · window[j][c], window = state rows then `in`
// out may alias in. k_size >= 1.
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size);

// x ← x / max(‖x‖₂, eps) over n elements (the L2 normalisation of Gated DeltaNet's q and k).
void l2_normalize(float* x, int64_t n, float eps);

// One token of the gated delta rule for one head, state S [d_k, d_v] (row i = key index i):
//   S ← decay · S;  u = β · (v − Sᵀk);  S ← S + k uᵀ;  o = Sᵀq
// q, k: [d_k]; v, o: [d_v]. decay = exp(g) in (0, 1]; β in (0, 1).
void delta_rule_step(float* S, const float* q, const float* k, const float* v, float decay, float beta,
                     float* o, int d_k, int d_v);

// softplus(x) = ln(1 + eˣ), and x itself above 20 (where the two agree in float).
float softplus(float x);
// 1 / (1 + e⁻ˣ)
float sigmoid(float x);

}  // namespace ubatch::kernels
