#include "model/hparams.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <utility>

namespace ubatch {

namespace {

// Reads `<arch>.<suffix>` as an integer; required keys fail with a message naming them.
Status read_int(const gguf::File& f, const std::string& arch, const char* suffix, int32_t& out,
                bool required) {
  const std::string key = arch + "." + suffix;
  std::optional<int64_t> v = f.get_int(key);
  if (!v) {
    if (f.find(key)) return Status::error(fmt::format("model: metadata key '{}' is not an integer", key));
    if (required) return Status::error(fmt::format("model: missing metadata key '{}'", key));
    return Status::ok();
  }
  if (*v < 0 || *v > (int64_t{1} << 30))
    return Status::error(fmt::format("model: metadata key '{}' out of range: {}", key, *v));
  out = static_cast<int32_t>(*v);
  return Status::ok();
}

Status read_float(const gguf::File& f, const std::string& arch, const char* suffix, float& out) {
  const std::string key = arch + "." + suffix;
  if (std::optional<double> v = f.get_float(key)) {
    if (!std::isfinite(*v)) return Status::error(fmt::format("model: metadata key '{}' is not finite", key));
    out = static_cast<float>(*v);
  } else if (f.find(key)) {
    return Status::error(fmt::format("model: metadata key '{}' is not a float", key));
  }
  return Status::ok();
}

// Copies an architecture's switches (arch.cpp) and reads the keys only some architectures have.
Status apply_architecture(const gguf::File& f, const ArchSpec& spec, HParams& hp) {
  hp.rope_style = spec.rope_style;
  hp.ffn_act = spec.ffn_act;
  hp.embd_scale_sqrt = spec.embd_scale_sqrt;
  hp.qk_norm = spec.qk_norm;
  hp.post_norms = spec.post_norms;
  hp.fused_qkv = spec.fused_qkv;
  hp.fused_gate_up = spec.fused_gate_up;
  hp.long_rope = spec.long_rope;
  const std::string& a = hp.arch;
  Status s;

  // Sliding window: `swa_pattern` marks the local layers; the window comes from the file.
  hp.layer_is_swa.assign(hp.n_layer, false);
  if (spec.swa_pattern > 0) {
    if (spec.swa_window_required && !f.find(a + ".attention.sliding_window"))
      return Status::error(fmt::format("model: missing metadata key '{}.attention.sliding_window'", a));
    if (hp.sliding_window == 0 && !f.find(a + ".attention.sliding_window")) hp.sliding_window = spec.swa_default_window;
    int32_t pattern = spec.swa_pattern;
    if (!(s = read_int(f, a, "attention.sliding_window_pattern", pattern, false))) return s;
    if (pattern <= 0) return Status::error(fmt::format("model: {}.attention.sliding_window_pattern must be > 0", a));
    // Every pattern-th layer (il % pattern == pattern - 1) is global; the others are local.
    if (hp.sliding_window > 0)
      for (int il = 0; il < hp.n_layer; ++il) hp.layer_is_swa[il] = (il % pattern) != pattern - 1;
  } else {
    hp.sliding_window = 0;  // read only by architectures with local layers (ignored_keys say why)
  }
  // Local layers' RoPE: Gemma 3 gives them their own base (10000 unless the file says) and never
  // scales them; otherwise they rotate like the global layers.
  hp.rope_base_swa = spec.swa_own_rope_base ? 10000.0f : hp.rope_base;
  hp.rope_freq_scale_swa = spec.swa_own_rope_base ? 1.0f : hp.rope_freq_scale;
  if (!(s = read_float(f, a, "rope.freq_base_swa", hp.rope_base_swa))) return s;
  if (!(hp.rope_base_swa > 0.0f))
    return Status::error(fmt::format("model: {}.rope.freq_base_swa must be > 0", a));

  hp.layer_use_rope.assign(hp.n_layer, true);
  if (spec.nope_layer_step > 0)
    for (int il = 0; il < hp.n_layer; ++il) hp.layer_use_rope[il] = (il + 1) % spec.nope_layer_step != 0;

  if (!(s = read_float(f, a, "attn_logit_softcapping", hp.attn_softcap))) return s;
  if (!(s = read_float(f, a, "final_logit_softcapping", hp.final_softcap))) return s;
  if (hp.attn_softcap < 0 || hp.final_softcap < 0)
    return Status::error(fmt::format("model: {}: soft-capping values must be >= 0", a));

  if (spec.long_rope) {
    hp.n_ctx_orig = hp.n_ctx_train;
    if (!(s = read_int(f, a, "rope.scaling.original_context_length", hp.n_ctx_orig, false))) return s;
    if (!(s = read_float(f, a, "rope.scaling.attn_factor", hp.rope_attn_factor))) return s;
    if (!(hp.rope_attn_factor > 0))
      return Status::error(fmt::format("model: {}.rope.scaling.attn_factor must be > 0", a));
  }

  // Mixture of experts: sizes from the file, routing and activation from the row.
  hp.ffn_kind = spec.ffn_kind;
  hp.moe_gating = spec.moe_gating;
  hp.moe_biases = spec.moe_biases;
  hp.moe_clamped_swiglu = spec.moe_clamped_swiglu;
  hp.attn_sinks = spec.attn_sinks;
  if (spec.ffn_kind == FfnKind::Moe) {
    if (!(s = read_int(f, a, "expert_count", hp.n_expert, true))) return s;
    if (!(s = read_int(f, a, "expert_used_count", hp.n_expert_used, true))) return s;
    if (!(s = read_int(f, a, "expert_feed_forward_length", hp.n_ff_exp, true))) return s;
    if (hp.n_expert < 1 || hp.n_expert > 4096)
      return Status::error(fmt::format("model: {}.expert_count {} outside [1, 4096]", a, hp.n_expert));
    if (hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert)
      return Status::error(fmt::format("model: {}.expert_used_count {} must be in [1, expert_count {}]", a,
                                       hp.n_expert_used, hp.n_expert));
    if (hp.n_ff_exp < 1)
      return Status::error(fmt::format("model: {}.expert_feed_forward_length must be > 0", a));
  }
  hp.moe_shared_expert = spec.moe_shared_expert;
  hp.moe_fused_gate_up = spec.moe_fused_gate_up;
  if (spec.moe_shared_expert) {
    // The shared expert's width: its own key, or feed_forward_length where a file has only that
    // (as the format's reference reads it).
    hp.n_ff_shexp = hp.n_ff;
    if (!(s = read_int(f, a, "expert_shared_feed_forward_length", hp.n_ff_shexp, hp.n_ff == 0))) return s;
    if (hp.n_ff_shexp < 1)
      return Status::error(fmt::format("model: {}.expert_shared_feed_forward_length must be > 0", a));
  }

  if (hp.rope_yarn_scale > 0) {
    // YaRN: the ramp's ends from the original context (rope.scaling.original_context_length,
    // default context_length) and the fixed β_fast 32 / β_slow 1; attn_factor defaults to 1.
    hp.n_ctx_orig = hp.n_ctx_train;
    if (!(s = read_int(f, a, "rope.scaling.original_context_length", hp.n_ctx_orig, false))) return s;
    if (!(s = read_float(f, a, "rope.scaling.attn_factor", hp.rope_attn_factor))) return s;
    if (hp.n_ctx_orig < 1)
      return Status::error(fmt::format("model: {}.rope.scaling.original_context_length must be > 0 for YaRN", a));
    if (!(hp.rope_attn_factor > 0))
      return Status::error(fmt::format("model: {}.rope.scaling.attn_factor must be > 0", a));
    const double d = hp.n_rot, ln_base = std::log(static_cast<double>(hp.rope_base));
    const double two_pi = 6.283185307179586;
    auto corr_dim = [&](double beta) { return d * std::log(hp.n_ctx_orig / (beta * two_pi)) / (2 * ln_base); };
    const double lo = std::max(0.0, std::floor(corr_dim(32.0)));
    const double hi = std::min(d - 1, std::ceil(corr_dim(1.0)));
    const double sc = hp.rope_yarn_scale;
    hp.rope_yarn_factors.resize(static_cast<size_t>(hp.n_rot / 2));
    for (int i = 0; i < hp.n_rot / 2; ++i) {
      const double ramp = 1.0 - std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0);
      // θ = (θ_e / s)·(1 − ramp) + θ_e·ramp = θ_e / factor
      hp.rope_yarn_factors[static_cast<size_t>(i)] = static_cast<float>(1.0 / ((1.0 - ramp) / sc + ramp));
    }
    if (sc > 1) hp.rope_attn_factor *= static_cast<float>(1.0 + 0.1 * std::log(sc));
  }

  hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim_k));
  // Gemma 2 27B (46 layers) scales queries by n_embd / n_head instead (Gemma Team 2024, the
  // model's query_pre_attn_scalar).
  if (spec.gemma2_attn_scale && hp.n_layer == 46)
    hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head));
  return Status::ok();
}

// Which layers attend and which are recurrent, the recurrent mixers' sizes, and M-RoPE sections.
Status read_layer_plan(const gguf::File& f, const ArchSpec& spec, const std::vector<int64_t>& kv_heads_per_layer,
                       HParams& hp) {
  const std::string& a = hp.arch;
  Status s;
  hp.ffn_norm_name = std::string(spec.ffn_norm_name);
  hp.output_norm_name = std::string(spec.output_norm_name);
  hp.layer_mixer.assign(hp.n_layer, spec.attention_kind);
  switch (spec.layer_pattern) {
    case LayerPattern::AllAttention: break;
    case LayerPattern::FullAttentionInterval: {
      int32_t interval = 0;
      if (!(s = read_int(f, a, "full_attention_interval", interval, true))) return s;
      if (interval <= 0) return Status::error(fmt::format("model: {}.full_attention_interval must be > 0", a));
      for (int il = 0; il < hp.n_layer; ++il)
        if ((il + 1) % interval != 0) hp.layer_mixer[il] = spec.recurrent_kind;
      break;
    }
    case LayerPattern::KvHeadArray:
      if (!kv_heads_per_layer.empty()) {
        if (static_cast<int64_t>(kv_heads_per_layer.size()) != hp.n_layer)
          return Status::error(fmt::format("model: {}.attention.head_count_kv names {} layers but block_count is {}", a,
                                           kv_heads_per_layer.size(), hp.n_layer));
        for (int il = 0; il < hp.n_layer; ++il)
          if (kv_heads_per_layer[il] == 0) hp.layer_mixer[il] = spec.recurrent_kind;
      }
      break;
  }
  hp.kv_layer.assign(hp.n_layer, -1);
  hp.n_kv_layer = 0;
  bool any_deltanet = false, any_shortconv = false;
  for (int il = 0; il < hp.n_layer; ++il) {
    if (!is_recurrent(hp.layer_mixer[il])) hp.kv_layer[il] = hp.n_kv_layer++;
    any_deltanet |= hp.layer_mixer[il] == MixerKind::GatedDeltaNet;
    any_shortconv |= hp.layer_mixer[il] == MixerKind::ShortConv;
  }
  if (spec.recurrent_kind == MixerKind::GatedDeltaNet) {
    for (auto [key, out] : {std::pair{"ssm.conv_kernel", &hp.ssm_conv_kernel}, {"ssm.state_size", &hp.ssm_state_size},
                            {"ssm.group_count", &hp.ssm_group_count}, {"ssm.time_step_rank", &hp.ssm_time_step_rank},
                            {"ssm.inner_size", &hp.ssm_inner_size}})
      if (!(s = read_int(f, a, key, *out, any_deltanet))) return s;
    if (any_deltanet) {
      if (hp.ssm_conv_kernel < 1 || hp.ssm_conv_kernel > 64)
        return Status::error(fmt::format("model: {}.ssm.conv_kernel {} outside [1, 64]", a, hp.ssm_conv_kernel));
      if (hp.ssm_state_size < 1 || hp.ssm_state_size > 1024 || hp.ssm_group_count < 1 || hp.ssm_time_step_rank < 1)
        return Status::error(fmt::format("model: {}: ssm.state_size, group_count and time_step_rank must be > 0 "
                                         "(state_size at most 1024)", a));
      if (hp.ssm_time_step_rank % hp.ssm_group_count != 0)
        return Status::error(fmt::format("model: {}.ssm.time_step_rank {} (value heads) is not a multiple of "
                                         "ssm.group_count {} (key heads)", a, hp.ssm_time_step_rank, hp.ssm_group_count));
      if (int64_t{hp.ssm_time_step_rank} * hp.ssm_state_size != hp.ssm_inner_size)
        return Status::error(fmt::format("model: {}.ssm.inner_size {} is not time_step_rank {} x state_size {}", a,
                                         hp.ssm_inner_size, hp.ssm_time_step_rank, hp.ssm_state_size));
    }
  }
  if (spec.recurrent_kind == MixerKind::ShortConv) {
    if (!(s = read_int(f, a, "shortconv.l_cache", hp.shortconv_l_cache, any_shortconv))) return s;
    if (any_shortconv && (hp.shortconv_l_cache < 1 || hp.shortconv_l_cache > 64))
      return Status::error(fmt::format("model: {}.shortconv.l_cache {} outside [1, 64]", a, hp.shortconv_l_cache));
  }
  if (spec.rope_sections) {
    std::optional<std::vector<int64_t>> sec = f.get_int_array(a + ".rope.dimension_sections");
    if (!sec) return Status::error(fmt::format("model: missing metadata key '{}.rope.dimension_sections' (an integer array)", a));
    int64_t sum = 0;
    for (int64_t v : *sec) {
      if (v < 0 || v > hp.n_rot) return Status::error(fmt::format("model: {}.rope.dimension_sections has a bad entry {}", a, v));
      sum += v;
      hp.rope_sections.push_back(static_cast<int32_t>(v));
    }
    // Text tokens take the same position on every M-RoPE axis, so the sections only matter
    // in that together they must cover the rotated pairs: then it is plain RoPE.
    if (sum != hp.n_rot / 2)
      return Status::error(fmt::format("model: {}.rope.dimension_sections sum to {} pairs but rope.dimension_count {} "
                                       "rotates {}", a, sum, hp.n_rot, hp.n_rot / 2));
  }
  return Status::ok();
}

// Strict metadata: every `<arch>.` key must be one ubatch reads or one it knows to be harmless.
Status check_arch_keys(const gguf::File& f, const ArchSpec& spec, HParams& hp) {
  const std::string prefix = hp.arch + ".";
  auto listed = [](const auto& list, std::string_view k) {
    for (const auto& e : list)
      if (std::string_view(e) == k) return true;
    return false;
  };
  for (const gguf::MetadataEntry& e : f.metadata()) {
    if (e.key.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string_view suffix = std::string_view(e.key).substr(prefix.size());
    if (listed(common_arch_keys(), suffix) || listed(spec.extra_keys, suffix)) continue;
    bool ignored = false;
    for (const auto* list : {&spec.ignored_keys, &common_ignored_keys()})
      for (const auto& [k, why] : *list)
        if (k == suffix && !ignored) {
          hp.ignored_keys.push_back(fmt::format("{} ({})", e.key, why));
          ignored = true;
        }
    if (ignored) continue;
    return Status::error(fmt::format(
        "model: metadata key '{}' is not understood by ubatch for architecture '{}'; it may change the "
        "computation, so the model is refused rather than run differently from how it was trained",
        e.key, hp.arch));
  }
  return Status::ok();
}

}  // namespace

size_t HParams::state_floats(int il, TensorType state_type) const {
  switch (layer_mixer[il]) {
    case MixerKind::GatedDeltaNet: {
      const size_t head = static_cast<size_t>(ssm_state_size) * ssm_state_size;
      return static_cast<size_t>(ssm_conv_kernel - 1) * ssm_conv_channels() +
             static_cast<size_t>(ssm_time_step_rank) * (state_type == TensorType::BF16 ? (head + 1) / 2 : head);
    }
    case MixerKind::ShortConv: return static_cast<size_t>(shortconv_l_cache - 1) * n_embd;
    default: return 0;
  }
}

bool HParams::has_recurrent() const { return n_kv_layer < n_layer; }

Result<HParams> HParams::from_gguf(const gguf::File& f) {
  HParams hp;
  std::optional<std::string_view> arch = f.get_string("general.architecture");
  if (!arch) return Status::error("model: missing metadata key 'general.architecture'");
  hp.arch = std::string(*arch);
  const std::string& a = hp.arch;
  const ArchSpec* spec = find_arch(a);
  if (!spec)
    return Status::error(fmt::format("model: unsupported architecture '{}' (supported: {})", a, supported_archs()));

  Status s;
  if (!(s = read_int(f, a, "embedding_length", hp.n_embd, true))) return s;
  if (!(s = read_int(f, a, "block_count", hp.n_layer, true))) return s;
  // Mixture-of-experts layers take their width from expert_feed_forward_length; a
  // feed_forward_length there is optional and unused.
  const bool dense_ffn = spec->ffn_kind == FfnKind::Dense;
  if (!(s = read_int(f, a, "feed_forward_length", hp.n_ff, dense_ffn))) return s;
  if (!(s = read_int(f, a, "attention.head_count", hp.n_head, true))) return s;
  hp.n_kv_head = hp.n_head;
  std::vector<int64_t> kv_heads_per_layer;  // LayerPattern::KvHeadArray
  if (std::optional<std::vector<int64_t>> arr = f.get_int_array(a + ".attention.head_count_kv");
      arr && spec->layer_pattern == LayerPattern::KvHeadArray) {
    kv_heads_per_layer = *arr;
    int64_t common = 0;
    for (int64_t v : kv_heads_per_layer) {
      if (v < 0 || v > (int64_t{1} << 20))
        return Status::error(fmt::format("model: {}.attention.head_count_kv has an out-of-range entry {}", a, v));
      if (v == 0) continue;
      if (common != 0 && v != common)
        return Status::error(fmt::format("model: {}.attention.head_count_kv mixes {} and {} KV heads across layers "
                                         "(one KV width for every attention layer is supported)", a, common, v));
      common = v;
    }
    if (common == 0) return Status::error(fmt::format("model: {}.attention.head_count_kv marks no attention layer", a));
    hp.n_kv_head = static_cast<int32_t>(common);
  } else if (!(s = read_int(f, a, "attention.head_count_kv", hp.n_kv_head, false))) {
    return s;
  }
  if (!(s = read_int(f, a, "context_length", hp.n_ctx_train, false))) return s;
  if (!(s = read_float(f, a, "attention.layer_norm_rms_epsilon", hp.rms_eps))) return s;
  if (!(s = read_float(f, a, "rope.freq_base", hp.rope_base))) return s;
  if (!(s = read_int(f, a, "attention.sliding_window", hp.sliding_window, false))) return s;
  if (!(s = read_int(f, a, "pooling_type", hp.pooling_type, false))) return s;
  if (hp.pooling_type > 3)
    return Status::error(fmt::format("model: {}.pooling_type {} is not supported (0 none, 1 mean, 2 cls, 3 last)", a,
                                     hp.pooling_type));
  if (!(hp.rms_eps > 0.0f))
    return Status::error(fmt::format("model: {}.attention.layer_norm_rms_epsilon must be > 0, is {}", a, hp.rms_eps));
  if (!(hp.rope_base > 0.0f))
    return Status::error(fmt::format("model: {}.rope.freq_base must be > 0, is {}", a, hp.rope_base));
  if (hp.n_embd <= 0 || hp.n_layer <= 0 || hp.n_head <= 0 || hp.n_kv_head <= 0 || (dense_ffn && hp.n_ff <= 0))
    return Status::error("model: embedding_length, block_count, feed_forward_length and head counts must be > 0");
  // Every layer has its own tensors (blk.N.*), so a block_count above the file's tensor count
  // cannot be true; refused here, before any per-layer table is sized by it (found by
  // model_load_fuzz: block_count ~10^7 sized gigabytes of layer slots before a tensor was read).
  if (static_cast<uint64_t>(hp.n_layer) > f.tensors().size())
    return Status::error(fmt::format("model: {}.block_count {} exceeds the {} tensors in the file (every layer has its own)",
                                     a, hp.n_layer, f.tensors().size()));
  if (hp.n_head % hp.n_kv_head != 0)
    return Status::error(fmt::format("model: head_count {} is not a multiple of head_count_kv {}",
                                     hp.n_head, hp.n_kv_head));
  hp.head_dim_k = hp.n_embd / hp.n_head;
  if (!(s = read_int(f, a, "attention.key_length", hp.head_dim_k, false))) return s;
  hp.head_dim_v = hp.head_dim_k;
  if (!(s = read_int(f, a, "attention.value_length", hp.head_dim_v, false))) return s;
  if (hp.head_dim_k != hp.head_dim_v || hp.head_dim_k <= 0 || hp.head_dim_k % 2 != 0)
    return Status::error(fmt::format("model: unsupported key/value length {}/{}", hp.head_dim_k, hp.head_dim_v));
  hp.n_rot = hp.head_dim_k;
  if (!(s = read_int(f, a, "rope.dimension_count", hp.n_rot, false))) return s;
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim_k || hp.n_rot % 2 != 0)
    return Status::error(fmt::format("model: bad rope.dimension_count {}", hp.n_rot));
  // RoPE scaling, as the format's reference reads it: the type defaults to linear, whose factor
  // (`rope.scaling.factor`, formerly `rope.scale_linear`) divides positions. "longrope" is
  // Phi-3's (its factors are tensors); other types (YaRN, …) are refused by name.
  std::string scaling = "linear";
  if (const gguf::Value* v = f.find(a + ".rope.scaling.type")) {
    if (v->type != gguf::ValueType::STRING)
      return Status::error(fmt::format("model: metadata key '{}.rope.scaling.type' is not a string", a));
    scaling = std::string(v->str);
  }
  float factor = 0.0f;
  if (!(s = read_float(f, a, "rope.scale_linear", factor))) return s;
  if (!(s = read_float(f, a, "rope.scaling.factor", factor))) return s;
  if (scaling == "linear") {
    if (factor < 0) return Status::error(fmt::format("model: {}.rope.scaling.factor must be >= 0", a));
    if (factor > 0) hp.rope_freq_scale = 1.0f / factor;
  } else if (scaling == "yarn" && spec->yarn) {
    if (factor != 0 && !(factor >= 1))
      return Status::error(fmt::format("model: {}.rope.scaling.factor {} must be >= 1 for YaRN", a, factor));
    hp.rope_yarn_scale = factor > 0 ? factor : 1.0f;
  } else if (scaling == "longrope" && spec->long_rope) {
    // factors are tensors (rope_factors_short / rope_factors_long)
  } else if (scaling != "none") {
    return Status::error(fmt::format(
        "model: {}.rope.scaling.type '{}' is not supported (supported: none, linear{})", a, scaling,
        spec->long_rope ? ", longrope" : spec->yarn ? ", yarn" : ""));
  }
  if (!(s = apply_architecture(f, *spec, hp))) return s;
  if (!(s = read_layer_plan(f, *spec, kv_heads_per_layer, hp))) return s;
  if (!(s = check_arch_keys(f, *spec, hp))) return s;
  return hp;
}

}  // namespace ubatch
