// Hyper-parameters of a decoder-only transformer, read from GGUF metadata
// (`<arch>.embedding_length`, `<arch>.attention.head_count`, …; key names from the GGUF spec,
// https://github.com/ggml-org/ggml/blob/master/docs/gguf.md#llm), plus the per-architecture
// choices that shape the forward pass. One forward pass serves every architecture; an
// architecture is a set of these choices (see arch_llama.cpp, arch_gemma3.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/arch.h"

namespace ubatch {

struct HParams {
  std::string arch;          // general.architecture: "llama", "qwen2", "gemma3", … (arch.h)
  int32_t n_vocab = 0;       // rows of token_embd
  int32_t n_ctx_train = 0;   // <arch>.context_length
  int32_t n_embd = 0;        // <arch>.embedding_length
  int32_t n_layer = 0;       // <arch>.block_count
  int32_t n_ff = 0;          // <arch>.feed_forward_length (dense FFN; optional for MoE, read there only as
                             // the default width of qwen35moe's shared expert)
  int32_t n_head = 0;        // <arch>.attention.head_count
  int32_t n_kv_head = 0;     // <arch>.attention.head_count_kv (default n_head)
  int32_t head_dim_k = 0;    // <arch>.attention.key_length (default n_embd / n_head)
  int32_t head_dim_v = 0;    // <arch>.attention.value_length (default head_dim_k)
  int32_t n_rot = 0;         // <arch>.rope.dimension_count (default head_dim_k)
  float rms_eps = 1e-5f;     // <arch>.attention.layer_norm_rms_epsilon
  float rope_base = 10000.0f;      // <arch>.rope.freq_base
  float rope_base_swa = 10000.0f;  // <arch>.rope.freq_base_swa (sliding-window layers)
  float rope_freq_scale = 1.0f;    // 1 / <arch>.rope.scaling.factor for linear scaling
  float rope_freq_scale_swa = 1.0f;  // the same on sliding-window layers (Gemma 3: never scaled)
  kernels::RopeStyle rope_style = kernels::RopeStyle::Normal;
  float attn_scale = 0.0f;         // query scale; 1/sqrt(head_dim_k) by default
  int32_t sliding_window = 0;      // <arch>.attention.sliding_window (0: none)
  std::vector<bool> layer_is_swa;  // [n_layer] true where the layer uses the sliding window
  std::vector<bool> layer_use_rope;  // [n_layer] false on NoPE layers (SmolLM3)
  // LongRoPE (Phi-3): the original training context; a context of more tokens per sequence
  // takes the long factors, otherwise the short ones (as the format's reference chooses).
  int32_t n_ctx_orig = 0;          // <arch>.rope.scaling.original_context_length
  float rope_attn_factor = 1.0f;   // <arch>.rope.scaling.attn_factor: multiplies cos and sin
  // YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language
  // Models"; gpt-oss): per-pair frequency divisors [n_rot / 2] blending θ and θ / factor by a
  // ramp over the pairs (β_fast 32, β_slow 1), and rope_attn_factor × (1 + 0.1 ln factor) on
  // cos and sin. Empty: no YaRN. Applied at every position (not switched on by context length).
  std::vector<float> rope_yarn_factors;
  float rope_yarn_scale = 0.0f;    // <arch>.rope.scaling.factor under YaRN (0: no YaRN)
  float attn_softcap = 0.0f;       // <arch>.attn_logit_softcapping (0: none)
  float final_softcap = 0.0f;      // <arch>.final_logit_softcapping (0: none)
  // <arch>.pooling_type, as the GGUF spec numbers it: -1 absent, 0 none, 1 mean, 2 cls,
  // 3 last. Set (> 0) in an embedding model's file; other values are refused at load.
  int32_t pooling_type = -1;

  // Architecture choices.
  bool embd_scale_sqrt = false;    // multiply embeddings by sqrt(n_embd) (Gemma)
  bool qk_norm = false;            // RMSNorm on each head of Q and K (Gemma 3)
  bool post_norms = false;         // RMSNorm after attention and after the FFN (Gemma 2/3)
  bool fused_qkv = false;          // attn_qkv holds Q | K | V (Phi-3)
  bool fused_gate_up = false;      // ffn_up holds gate | up (Phi-3)
  bool long_rope = false;          // rope_factors_short / rope_factors_long tensors (Phi-3)
  FfnActivation ffn_act = FfnActivation::SiLU;
  std::string ffn_norm_name = "ffn_norm";        // tensor blk.N.<name>.weight of the pre-FFN norm
  std::string output_norm_name = "output_norm";  // tensor <name>.weight of the final norm

  // Feed-forward blocks: dense, or a mixture of experts (arch.h).
  FfnKind ffn_kind = FfnKind::Dense;
  MoeGating moe_gating = MoeGating::SoftmaxTopK;
  bool moe_biases = false;          // router and expert biases (gpt-oss)
  bool moe_clamped_swiglu = false;  // min(g, 7)·sigmoid(1.702·min(g, 7))·(clamp(u, −7, 7) + 1) (gpt-oss)
  bool attn_sinks = false;          // blk.N.attn_sinks.weight [n_head] (gpt-oss)
  int32_t n_expert = 0;             // <arch>.expert_count
  int32_t n_expert_used = 0;        // <arch>.expert_used_count: experts per token (1 .. n_expert)
  int32_t n_ff_exp = 0;             // <arch>.expert_feed_forward_length: one expert's hidden width
  // A shared expert every token runs beside its routed ones, scaled by a sigmoid gate (Qwen3.5-MoE).
  bool moe_shared_expert = false;
  int32_t n_ff_shexp = 0;           // <arch>.expert_shared_feed_forward_length (default feed_forward_length)
  bool moe_fused_gate_up = false;   // ffn_gate_up_exps may hold each expert's gate | up rows (arch.h)

  // Layers: the mixer of each, and where the attention layers keep K/V.
  std::vector<MixerKind> layer_mixer;  // [n_layer]
  std::vector<int32_t> kv_layer;       // [n_layer] index among the KV cache's layers, -1 for recurrent layers
  int32_t n_kv_layer = 0;              // layers with a KV history
  // Gated DeltaNet (Qwen3.5: `<arch>.ssm.*`).
  int32_t ssm_conv_kernel = 0;   // ssm.conv_kernel: taps of the causal convolution over q | k | v
  int32_t ssm_state_size = 0;    // ssm.state_size: head size of q, k and v (d_k = d_v)
  int32_t ssm_group_count = 0;   // ssm.group_count: key (and query) heads
  int32_t ssm_time_step_rank = 0;  // ssm.time_step_rank: value heads (each with its own decay and β)
  int32_t ssm_inner_size = 0;    // ssm.inner_size: value heads × state_size
  // Short convolution (LFM2: `<arch>.shortconv.l_cache`): taps of the causal convolution.
  int32_t shortconv_l_cache = 0;
  std::vector<int32_t> rope_sections;  // rope.dimension_sections (M-RoPE), when the file has it

  // Keys present in the file that are known and deliberately not applied, with the reason
  // (shown by `ubatch info` and logged at load).
  std::vector<std::string> ignored_keys;

  int32_t n_embd_k_gqa() const { return n_kv_head * head_dim_k; }  // K row per token
  int32_t n_embd_v_gqa() const { return n_kv_head * head_dim_v; }  // V row per token
  int32_t n_embd_q() const { return n_head * head_dim_k; }
  // Gated DeltaNet widths: q and k of every key head, and the convolved channels q | k | v.
  int32_t ssm_qk_dim() const { return ssm_group_count * ssm_state_size; }
  int32_t ssm_conv_channels() const { return 2 * ssm_qk_dim() + ssm_inner_size; }
  // 4-byte words of recurrent state layer il keeps per sequence (0 for attention layers), with
  // the recurrent matrices stored as state_type (F32, or BF16: two values per word):
  // Gated DeltaNet (conv_kernel − 1) × conv channels (F32) + value heads × state_size² values;
  // short convolution (l_cache − 1) × n_embd (F32 whatever state_type).
  size_t state_floats(int il, TensorType state_type = TensorType::F32) const;
  bool has_recurrent() const;

  // Reads general.architecture and the keys above. Strict: every `<arch>.*` key of the file
  // is either read, or listed as harmless (arch.h), or refused by name — a key that may change
  // the math is never ignored. Errors name the missing, bad or unknown key, an unsupported
  // RoPE scaling type, head counts that do not divide, and unknown architectures.
  static Result<HParams> from_gguf(const gguf::File& file);
};

}  // namespace ubatch
