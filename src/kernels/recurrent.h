// Kernels of recurrent sequence mixers: one token's step of a causal depthwise convolution with
// its rolling input state, and the gated delta rule step by step or in chunks of 16 tokens. They
// know nothing of models; model/block_deltanet.cpp and model/block_shortconv.cpp compose them.
//
// Sources: Gated Delta Networks (Yang, Kautz, Hatamizadeh, ICLR 2025) for the delta rule with a
// scalar decay per head; the short causal convolution of Mamba (Gu & Dao 2023) and of LFM2's
// gated short-convolution block (Liquid AI 2025).
//
// Results are identical at every SIMD level (l2_normalize is plain scalar code; conv1d_step,
// delta_rule_tokens and delta_rule_chunks are written once over the 16-lane vocabulary,
// recurrent_inl.h, and dispatched like the other float kernels) and for every batch composition
// (a sequence's state only ever sees its own tokens). Which tokens of a sequence go chunk-wise is
// the caller's rule (model/block_deltanet.cpp): the two forms agree within float rounding, not
// bit for bit, so that choice must depend on the sequence alone.
#pragma once

#include <cstdint>

namespace ubatch::kernels {

// One step of a causal depthwise convolution over n_ch channels with kernel size k_size.
//   in:    [n_ch]             this token's input
//   state: [k_size - 1, n_ch] the previous k_size − 1 inputs, oldest first (zeros at the start);
//                             updated in place: shifted by one, `in` appended
//   w:     [k_size, n_ch]     taps, tap-major (tap j of channel c at w[j·n_ch + c]); tap k_size − 1
//                             multiplies the current input (GGUF stores [n_ch, k_size]: transpose once)
//   out:   [n_ch]             Σ_j w[j][c] · window[j][c] in order of j, window = state rows then `in`
// out may alias in. k_size >= 1. Per channel a product then an add for each tap (no fused
// multiply-add), so the SIMD levels (16 channels at a time, recurrent_inl.h) give the scalar
// reference's bits.
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size);

// x ← x / max(‖x‖₂, eps) over n elements (the L2 normalisation of Gated DeltaNet's q and k).
void l2_normalize(float* x, int64_t n, float eps);

// Tokens of one sequence through the gated delta rule for one head, state S [d_k, d_v] (row i =
// key index i), in order; per token:
//   S ← decay · S;  u = β · (v − Sᵀk);  S ← S + k uᵀ;  o = Sᵀq
// Token r reads row rows[r] (r itself when rows is null) of q, k ([d_k] at row·qk_stride), v
// ([d_v] at row·v_stride), decay and β (at row·gate_stride; decay = e^g in (0, 1], β in (0, 1)),
// and writes o ([d_v] at row·o_stride). snapshots: null, or per token null or a [d_k, d_v]
// buffer that receives S as it stands after that token. Computed as u = β (v − decay·(Sᵀk)),
// S ← decay·S + k uᵀ (one fma per element), o = Sᵀq; the sums over i keep four partial sums
// (i mod 4) of fused multiply-adds, added as (s0 + s1) + (s2 + s3) (recurrent_inl.h).
//
// The state is stored either in F32 (S, snapshots) or in BF16 (S_bf16, snapshots_bf16; exactly
// one of S and S_bf16 is set). A BF16 state is read as exact floats and rounded to nearest even
// each time it is stored — after every token here, after every chunk in delta_rule_chunks —
// while the outputs use the unrounded floats, so the results still depend only on the tokens
// and on which of them run chunk-wise, not on how they are grouped into calls; a BF16 state
// halves the bytes a decode step moves per (sequence, head), as vLLM's bfloat16 SSM cache does.
struct DeltaRuleArgs {
  float* S = nullptr;
  uint16_t* S_bf16 = nullptr;
  int d_k = 0, d_v = 0;
  int n_tokens = 0;
  const int32_t* rows = nullptr;
  const float* q = nullptr;
  const float* k = nullptr;
  int64_t qk_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  const float* decay = nullptr;
  const float* beta = nullptr;
  int64_t gate_stride = 0;
  float* o = nullptr;
  int64_t o_stride = 0;
  float* const* snapshots = nullptr;
  uint16_t* const* snapshots_bf16 = nullptr;  // with S_bf16: BF16 [d_k, d_v] buffers
  // Optional: the state [d_k, d_v] the caller runs next (in S's storage type), prefetched into L2
  // while this one runs (decode reads and writes one state per (sequence, head), each once per
  // step: without it every state starts on a cold miss). Prefetch only: no effect on any result.
  const void* prefetch = nullptr;
};
void delta_rule_tokens(const DeltaRuleArgs& args);

// Tokens per chunk of delta_rule_chunks.
constexpr int kDeltaChunk = 16;

// The same recurrence over n_tokens, a multiple of kDeltaChunk, chunk by chunk in the chunked
// form of the gated delta rule (Yang et al., "Parallelizing Linear Transformers with the Delta
// Rule over Sequence Length", NeurIPS 2024, with the per-token decay of Gated DeltaNet): per
// chunk, the products that read the state S [d_k, d_v] — Sᵀk and Sᵀq for every token of the
// chunk, then the chunk's rank-16 update — run as [16, d_k] × [d_k, 16 columns] tiles, so S is
// read and written once per chunk instead of once per token. Arguments as delta_rule_tokens;
// snapshots may be set only at a chunk's last token (an always-on check), where S is the state
// after the chunk. The outputs and the state agree with delta_rule_tokens over the same tokens
// to float rounding (tests/test_kernels_recurrent.cpp measures it), and are the same bits at
// every SIMD level and however a sequence's chunks are grouped into calls.
void delta_rule_chunks(const DeltaRuleArgs& args);

// The rounding a BF16 state's stores apply (DeltaRuleArgs::S_bf16), to n floats: to nearest
// even, subnormal inputs to a signed zero, NaN quieted (x >> 16 | 0x40) — AVX512_BF16's
// vcvtneps2bf16 rule, the same bits at every level. out: [n].
void round_state_bf16(const float* x, uint16_t* out, int64_t n);

// One token (the same arithmetic as delta_rule_tokens with n_tokens 1): q, k [d_k]; v, o [d_v].
void delta_rule_step(float* S, const float* q, const float* k, const float* v, float decay, float beta,
                     float* o, int d_k, int d_v);

// softplus(x) = ln(1 + eˣ), and x itself above 20 (where the two agree in float).
float softplus(float x);
// 1 / (1 + e⁻ˣ)
float sigmoid(float x);

namespace ref {
// The scalar instantiations of delta_rule_tokens and delta_rule_chunks (the references of the
// SIMD levels).
void delta_rule_tokens(const DeltaRuleArgs& args);
void delta_rule_chunks(const DeltaRuleArgs& args);
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size);
void round_state_bf16(const float* x, uint16_t* out, int64_t n);
}  // namespace ref

}  // namespace ubatch::kernels
