// The architectures ubatch runs, as data: one row per GGUF `general.architecture`, giving the
// switches of the one forward pass (model.h) and the metadata keys each architecture may carry.
// A new architecture adds a row here (and, only where its math truly differs, a switch in
// HParams and a few lines in Model::forward); docs/MODELS.md says how.
//
// Sources: the GGUF spec's LLM keys (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md),
// and each family's paper/model card — LLaMA (Touvron et al. 2023), Llama 3 (Meta 2024),
// Qwen2 (Yang et al. 2024), Qwen3 (Qwen Team 2025), Phi-3 (Abdin et al. 2024) with LongRoPE
// (Ding et al. 2024), Gemma 2 (Gemma Team 2024), Gemma 3 (Gemma Team 2025), SmolLM3
// (Hugging Face 2025).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/ops.h"

namespace ubatch {

enum class FfnActivation { SiLU, GeluTanh };

// The sequence mixer of one layer (model/block.h builds each from its kind).
enum class MixerKind : uint8_t {
  Attention,       // softmax attention over the layer's KV cache (all dense architectures)
  GatedAttention,  // attention whose output is multiplied by sigmoid(gate), the gate rows fused
                   // into attn_q per head (Qwen3.5)
  GatedDeltaNet,   // linear attention with the gated delta rule (Yang et al. 2025; Qwen3.5)
  ShortConv,       // gated short causal convolution (LFM2)
};
// "attention", "gated_attention", "gated_deltanet", "shortconv".
std::string_view mixer_kind_name(MixerKind k);
// Whether a mixer keeps a fixed-size per-sequence state instead of a KV history.
inline bool is_recurrent(MixerKind k) { return k == MixerKind::GatedDeltaNet || k == MixerKind::ShortConv; }

// The feed-forward block of every layer (model/block.h builds it from its kind).
enum class FfnKind : uint8_t {
  Dense,  // one gated FFN (ffn_gate / ffn_up / ffn_down)
  Moe,    // a routed mixture of experts (ffn_gate_inp router, 3-D ffn_*_exps experts)
};
// "dense_ffn", "moe".
std::string_view ffn_kind_name(FfnKind k);

// How a mixture-of-experts layer turns router logits into expert weights (no GGUF key: fixed
// per architecture, as in the format's reference).
enum class MoeGating : uint8_t {
  SoftmaxTopK,  // p = softmax over all experts, the k largest p, divided by their sum (Qwen3-MoE)
  TopKSoftmax,  // the k largest logits, weights = softmax over those k only (gpt-oss)
};

// How a file says which layers attend and which are recurrent.
enum class LayerPattern : uint8_t {
  AllAttention,           // every layer attends
  FullAttentionInterval,  // `<arch>.full_attention_interval` n: layer il attends iff (il + 1) % n == 0
  KvHeadArray,            // `<arch>.attention.head_count_kv` is a per-layer array; 0 marks a recurrent layer
};

// What an architecture's forward pass does differently from LLaMA's.
struct ArchSpec {
  std::string_view name;                   // general.architecture
  kernels::RopeStyle rope_style = kernels::RopeStyle::Normal;
  FfnActivation ffn_act = FfnActivation::SiLU;
  bool embd_scale_sqrt = false;            // embeddings × sqrt(n_embd) (Gemma)
  bool qk_norm = false;                    // per-head RMSNorm of Q and K before RoPE (Gemma 3, Qwen3)
  bool post_norms = false;                 // RMSNorm after attention and after the FFN (Gemma 2/3)
  bool fused_qkv = false;                  // one `attn_qkv` matrix: rows Q | K | V (Phi-3)
  bool fused_gate_up = false;              // `ffn_up` of 2·n_ff rows: gate | up (Phi-3)
  bool long_rope = false;                  // LongRoPE short/long factors (Phi-3)
  int swa_pattern = 0;                     // > 0: layer il is global iff il % pattern == pattern − 1,
                                           // the others use the sliding window (Gemma 2: 2, Gemma 3: 6)
  int swa_default_window = 0;              // window when the file gives none (Gemma 2: 4096)
  bool swa_window_required = false;        // `attention.sliding_window` must be present (gpt-oss)
  bool swa_own_rope_base = false;          // SWA layers use `rope.freq_base_swa` (default 10000; Gemma 3)
  int nope_layer_step = 0;                 // > 0: layer il has no RoPE iff (il + 1) % step == 0 (SmolLM3: 4)
  bool gemma2_attn_scale = false;          // query scale 1/sqrt(n_embd / n_head) for the 46-layer (27B) model
  // Hybrid architectures: which layers are recurrent, and with which mixers.
  LayerPattern layer_pattern = LayerPattern::AllAttention;
  MixerKind attention_kind = MixerKind::Attention;  // mixer of the attention layers
  MixerKind recurrent_kind = MixerKind::Attention;  // mixer of the recurrent layers (hybrids only)
  bool rope_sections = false;              // reads M-RoPE's `rope.dimension_sections` (text positions only)
  // Feed-forward: dense, or a mixture of experts (`expert_count`, `expert_used_count`,
  // `expert_feed_forward_length`).
  FfnKind ffn_kind = FfnKind::Dense;
  MoeGating moe_gating = MoeGating::SoftmaxTopK;
  bool moe_biases = false;                 // router and expert biases (gpt-oss)
  bool moe_clamped_swiglu = false;         // gpt-oss's clamped SwiGLU (α 1.702, limit 7)
  bool moe_shared_expert = false;          // a shared SwiGLU expert beside the routed ones (ffn_*_shexp,
                                           // width expert_shared_feed_forward_length), scaled by
                                           // sigmoid(ffn_gate_inp_shexp · x) (Qwen3.5-MoE)
  bool moe_fused_gate_up = false;          // accepts ffn_gate_up_exps {n_embd, 2·n_ff_exp, n_expert} in place of
                                           // ffn_gate_exps + ffn_up_exps: per expert the gate rows, then
                                           // the up rows (converters' --fuse-gate-up-exps; Qwen3.5-MoE)
  bool attn_sinks = false;                 // `attn_sinks.weight`: one softmax logit per head (gpt-oss)
  bool yarn = false;                       // accepts `rope.scaling.type` "yarn" (Peng et al. 2023)
  std::string_view ffn_norm_name = "ffn_norm";        // the pre-FFN norm (Qwen3.5: post_attention_norm)
  std::string_view output_norm_name = "output_norm";  // the final norm (LFM2: token_embd_norm)
  // Metadata keys under `<arch>.` this architecture reads beyond the common ones (arch.cpp).
  std::vector<std::string_view> extra_keys;
  // Keys under `<arch>.` known to appear in real files and deliberately not applied, each with
  // the reason (e.g. Phi-3's sliding window, which the format's reference also disables).
  std::vector<std::pair<std::string_view, std::string_view>> ignored_keys;
};

// The row for `arch`, or nullptr when ubatch does not run it.
const ArchSpec* find_arch(std::string_view arch);
// "llama, qwen2, …": the supported names, for error messages and docs.
std::string supported_archs();
// Suffixes (after `<arch>.`) every architecture reads: sizes, heads, norms, RoPE base and
// scaling, sliding window.
const std::vector<std::string_view>& common_arch_keys();
// Keys any architecture may carry that ubatch reads as notes only, with the reason.
const std::vector<std::pair<std::string_view, std::string_view>>& common_ignored_keys();

}  // namespace ubatch
