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

// Per-architecture defaults and switches. Facts from each model family's paper/config:
// LLaMA (Touvron et al. 2023): SiLU-gated FFN, RoPE on adjacent pairs in GGUF layout.
// Gemma 3 (Gemma Team 2025): embeddings × sqrt(n_embd), QK-norm, post-attention and
// post-FFN norms, GELU(tanh)-gated FFN, NeoX RoPE with base 10000 on local (sliding-window)
// layers, 5 local : 1 global layers unless `sliding_window_pattern` says otherwise.
Status apply_architecture(const gguf::File& f, HParams& hp) {
  if (hp.arch == "llama") {
    hp.rope_style = kernels::RopeStyle::Normal;
    hp.ffn_act = FfnActivation::SiLU;
    return Status::ok();
  }
  if (hp.arch == "gemma3") {
    hp.rope_style = kernels::RopeStyle::NeoX;
    hp.ffn_act = FfnActivation::GeluTanh;
    hp.embd_scale_sqrt = true;
    hp.qk_norm = true;
    hp.post_norms = true;
    hp.rope_base_swa = 10000.0f;
    if (Status s = read_float(f, hp.arch, "rope.freq_base_swa", hp.rope_base_swa); !s) return s;
    int32_t pattern = 6;
    if (Status s = read_int(f, hp.arch, "attention.sliding_window_pattern", pattern, false); !s) return s;
    if (pattern <= 0) return Status::error("model: gemma3.attention.sliding_window_pattern must be > 0");
    hp.layer_is_swa.assign(hp.n_layer, false);
    // Every pattern-th layer (il % pattern == pattern - 1) is global; the others are local.
    if (hp.sliding_window > 0)
      for (int il = 0; il < hp.n_layer; ++il) hp.layer_is_swa[il] = (il % pattern) != pattern - 1;
    return Status::ok();
  }
  return Status::error(fmt::format(
      "model: unsupported architecture '{}' (supported: llama, gemma3)", hp.arch));
}

}  // namespace

Result<HParams> HParams::from_gguf(const gguf::File& f) {
  HParams hp;
  std::optional<std::string_view> arch = f.get_string("general.architecture");
  if (!arch) return Status::error("model: missing metadata key 'general.architecture'");
  hp.arch = std::string(*arch);
  const std::string& a = hp.arch;
  if (a != "llama" && a != "gemma3")
    return Status::error(fmt::format("model: unsupported architecture '{}' (supported: llama, gemma3)", a));

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
  if (hp.n_embd <= 0 || hp.n_layer <= 0 || hp.n_head <= 0 || hp.n_kv_head <= 0 || hp.n_ff <= 0)
    return Status::error("model: embedding_length, block_count, feed_forward_length and head counts must be > 0");
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
  if (std::optional<std::string_view> type = f.get_string(a + ".rope.scaling.type")) {
    if (*type == "linear") {
      float factor = 1.0f;
      if (!(s = read_float(f, a, "rope.scaling.factor", factor))) return s;
      if (factor > 0) hp.rope_freq_scale = 1.0f / factor;
    } else if (*type != "none") {
      return Status::error(fmt::format("model: unsupported rope scaling '{}'", *type));
    }
  }
  hp.layer_is_swa.assign(hp.n_layer, false);
  if (!(s = apply_architecture(f, hp))) return s;
  hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim_k));
  return hp;
}

}  // namespace ubatch
