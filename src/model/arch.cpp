#include "model/arch.h"

#include <algorithm>
#include <array>

namespace ubatch {

namespace {

using kernels::RopeStyle;

// One row per architecture; fields not named keep LLaMA's choice (ArchSpec's defaults).
const std::vector<ArchSpec>& arch_table() {
  static const std::vector<ArchSpec> table = [] {
    std::vector<ArchSpec> t;
    {  // LLaMA 1/2/3.x, SmolLM/SmolLM2, Mistral-style dense models. Llama 3.1+'s per-pair
       // frequency divisors arrive as the optional `rope_freqs.weight` tensor.
      ArchSpec a;
      a.name = "llama";
      a.extra_keys = {"tensor_data_layout"};  // a note on the original checkpoint layout
      t.push_back(a);
    }
    {  // Qwen2 / Qwen2.5: biases on the Q, K and V projections (tensors, read when present).
      ArchSpec a;
      a.name = "qwen2";
      a.rope_style = RopeStyle::NeoX;
      t.push_back(a);
    }
    {  // Qwen3 (dense): per-head RMSNorm of Q and K before RoPE; head size from key_length.
      ArchSpec a;
      a.name = "qwen3";
      a.rope_style = RopeStyle::NeoX;
      a.qk_norm = true;
      t.push_back(a);
    }
    {  // Phi-3 / 3.5 / 4-mini: fused QKV and gate|up, LongRoPE.
      ArchSpec a;
      a.name = "phi3";
      a.rope_style = RopeStyle::NeoX;
      a.fused_qkv = true;
      a.fused_gate_up = true;
      a.long_rope = true;
      a.extra_keys = {"rope.scaling.original_context_length", "rope.scaling.attn_factor"};
      a.ignored_keys = {{"attention.sliding_window",
                         "Phi-3's converted files mark a window the model does not use as written; the "
                         "format's reference runs every layer with full attention, and so do we"}};
      t.push_back(a);
    }
    {  // Gemma 2: soft-capping, sliding window on alternate layers, post-norms.
      ArchSpec a;
      a.name = "gemma2";
      a.rope_style = RopeStyle::NeoX;
      a.ffn_act = FfnActivation::GeluTanh;
      a.embd_scale_sqrt = true;
      a.post_norms = true;
      a.swa_pattern = 2;
      a.swa_default_window = 4096;
      a.gemma2_attn_scale = true;
      a.extra_keys = {"attention.sliding_window", "attention.sliding_window_pattern",
                      "attn_logit_softcapping", "final_logit_softcapping", "rope.freq_base_swa"};
      t.push_back(a);
    }
    {  // Gemma 3: QK-norm, post-norms, 5 local : 1 global layers, own RoPE base on local layers.
      ArchSpec a;
      a.name = "gemma3";
      a.rope_style = RopeStyle::NeoX;
      a.ffn_act = FfnActivation::GeluTanh;
      a.embd_scale_sqrt = true;
      a.qk_norm = true;
      a.post_norms = true;
      a.swa_pattern = 6;
      a.swa_own_rope_base = true;
      a.extra_keys = {"attention.sliding_window", "attention.sliding_window_pattern", "rope.freq_base_swa",
                      "final_logit_softcapping"};
      t.push_back(a);
    }
    {  // SmolLM3: LLaMA with no RoPE on every 4th layer (NoPE; the step is fixed, no key).
      ArchSpec a;
      a.name = "smollm3";
      a.nope_layer_step = 4;
      t.push_back(a);
    }
    {  // Qwen3.5 (text): three Gated DeltaNet layers to one gated full-attention layer; partial
       // NeoX RoPE (M-RoPE sections, text positions), per-head QK-norm, the pre-FFN norm stored
       // as post_attention_norm. MTP/NextN layers (nextn_predict_layers) are refused by key.
      ArchSpec a;
      a.name = "qwen35";
      a.rope_style = RopeStyle::NeoX;
      a.qk_norm = true;
      a.layer_pattern = LayerPattern::FullAttentionInterval;
      a.attention_kind = MixerKind::GatedAttention;
      a.recurrent_kind = MixerKind::GatedDeltaNet;
      a.rope_sections = true;
      a.ffn_norm_name = "post_attention_norm";
      a.extra_keys = {"full_attention_interval", "rope.dimension_sections", "ssm.conv_kernel", "ssm.state_size",
                      "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size"};
      t.push_back(a);
    }
    {  // LFM2: gated short convolutions and GQA attention layers, marked by a per-layer
       // head_count_kv (0 = convolution); per-head QK-norm; the final norm is token_embd_norm.
      ArchSpec a;
      a.name = "lfm2";
      a.rope_style = RopeStyle::NeoX;
      a.qk_norm = true;
      a.layer_pattern = LayerPattern::KvHeadArray;
      a.recurrent_kind = MixerKind::ShortConv;
      a.output_norm_name = "token_embd_norm";
      a.extra_keys = {"shortconv.l_cache"};
      t.push_back(a);
    }
    {  // Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's QK-norm attention, every FFN a
       // mixture of experts — softmax router over all experts, top expert_used_count, weights
       // renormalised to sum 1 (Qwen Team 2025). Expert width from expert_feed_forward_length.
      ArchSpec a;
      a.name = "qwen3moe";
      a.rope_style = RopeStyle::NeoX;
      a.qk_norm = true;
      a.ffn_kind = FfnKind::Moe;
      a.moe_gating = MoeGating::SoftmaxTopK;
      a.extra_keys = {"expert_count", "expert_used_count", "expert_feed_forward_length"};
      t.push_back(a);
    }
    {  // gpt-oss (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b model card"): Q/K/V/O biases,
       // attention sinks, sliding window (128 in the real models) on even layers, YaRN RoPE;
       // a mixture of experts with a biased router (top-k, then softmax over the k) and biased
       // experts with a clamped SwiGLU; the pre-FFN norm stored as post_attention_norm.
      ArchSpec a;
      a.name = "gpt-oss";
      a.rope_style = RopeStyle::NeoX;
      a.swa_pattern = 2;
      a.swa_window_required = true;
      a.ffn_kind = FfnKind::Moe;
      a.moe_gating = MoeGating::TopKSoftmax;
      a.moe_biases = true;
      a.moe_clamped_swiglu = true;
      a.attn_sinks = true;
      a.yarn = true;
      a.ffn_norm_name = "post_attention_norm";
      a.extra_keys = {"expert_count", "expert_used_count", "expert_feed_forward_length",
                      "attention.sliding_window", "rope.scaling.original_context_length",
                      "rope.scaling.attn_factor"};
      t.push_back(a);
    }
    {  // Qwen3.5-MoE / Qwen3.6-A3B (Qwen3.5-35B-A3B, -122B-A10B, -397B-A17B): the hybrid layers of
       // qwen35 (Gated DeltaNet three layers in four, gated full attention in the fourth) with a
       // mixture of experts in every layer — qwen3moe's routing (softmax over all experts, top
       // expert_used_count renormalised) plus one shared SwiGLU expert scaled by
       // sigmoid(ffn_gate_inp_shexp · x). MTP/NextN layers (nextn_predict_layers) are refused by key.
      ArchSpec a = *std::find_if(t.begin(), t.end(), [](const ArchSpec& s) { return s.name == "qwen35"; });
      a.name = "qwen35moe";
      a.ffn_kind = FfnKind::Moe;
      a.moe_gating = MoeGating::SoftmaxTopK;
      a.moe_shared_expert = true;
      a.moe_fused_gate_up = true;
      a.extra_keys.insert(a.extra_keys.end(), {"expert_count", "expert_used_count", "expert_feed_forward_length",
                                               "expert_shared_feed_forward_length"});
      t.push_back(a);
    }
    return t;
  }();
  return table;
}

}  // namespace

const ArchSpec* find_arch(std::string_view arch) {
  for (const ArchSpec& a : arch_table())
    if (a.name == arch) return &a;
  return nullptr;
}

std::string_view mixer_kind_name(MixerKind k) {
  switch (k) {
    case MixerKind::Attention: return "attention";
    case MixerKind::GatedAttention: return "gated_attention";
    case MixerKind::GatedDeltaNet: return "gated_deltanet";
    case MixerKind::ShortConv: return "shortconv";
  }
  return "?";
}

std::string_view ffn_kind_name(FfnKind k) {
  switch (k) {
    case FfnKind::Dense: return "dense_ffn";
    case FfnKind::Moe: return "moe";
  }
  return "?";
}

std::string supported_archs() {
  std::string out;
  for (const ArchSpec& a : arch_table()) {
    if (!out.empty()) out += ", ";
    out += a.name;
  }
  return out;
}

const std::vector<std::string_view>& common_arch_keys() {
  static const std::vector<std::string_view> keys = {
      "context_length", "embedding_length", "block_count", "feed_forward_length",
      "attention.head_count", "attention.head_count_kv", "attention.key_length", "attention.value_length",
      "attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.dimension_count",
      "rope.scaling.type", "rope.scaling.factor", "rope.scale_linear",
      "vocab_size",  // checked against token_embd.weight at load
      "pooling_type",  // how /v1/embeddings pools the final hidden states (no effect on the forward pass)
  };
  return keys;
}

const std::vector<std::pair<std::string_view, std::string_view>>& common_ignored_keys() {
  static const std::vector<std::pair<std::string_view, std::string_view>> keys = {
      {"rope.scaling.original_context_length",
       "read only by context-extension schemes (YaRN, LongRoPE); linear scaling does not use it"},
      {"rope.scaling.finetuned", "a note on how the model was trained; no effect on the computation"},
  };
  return keys;
}

}  // namespace ubatch
