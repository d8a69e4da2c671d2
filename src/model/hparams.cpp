#include "model/hparams.h"

#include <cmath>
#include <fmt/format.h>

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

  hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim_k));
  // Gemma 2 27B (46 layers) scales queries by n_embd / n_head instead (Gemma Team 2024, the
  // model's query_pre_attn_scalar).
  if (spec.gemma2_attn_scale && hp.n_layer == 46)
    hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head));
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
  if (!(s = read_int(f, a, "feed_forward_length", hp.n_ff, true))) return s;
  if (!(s = read_int(f, a, "attention.head_count", hp.n_head, true))) return s;
  hp.n_kv_head = hp.n_head;
  if (!(s = read_int(f, a, "attention.head_count_kv", hp.n_kv_head, false))) return s;
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
  if (hp.n_embd <= 0 || hp.n_layer <= 0 || hp.n_head <= 0 || hp.n_kv_head <= 0 || hp.n_ff <= 0)
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
  } else if (scaling == "longrope" && spec->long_rope) {
    // factors are tensors (rope_factors_short / rope_factors_long)
  } else if (scaling != "none") {
    return Status::error(fmt::format(
        "model: {}.rope.scaling.type '{}' is not supported (supported: none, linear{})", a, scaling,
        spec->long_rope ? ", longrope" : ""));
  }
  if (!(s = apply_architecture(f, *spec, hp))) return s;
  if (!(s = check_arch_keys(f, *spec, hp))) return s;
  return hp;
}

}  // namespace ubatch
