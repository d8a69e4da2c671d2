// qwen35moe files built from a qwen35 file's dense FFNs: the oracle for the Qwen3.5-MoE
// architecture, which has no reference logits of its own (test_context_qwen35moe.cpp,
// test_levels_logits.cpp, test_server_moe.cpp).
//
// The hybrid layers (Gated DeltaNet, gated attention), norms, embeddings and output are the qwen35
// file's, byte for byte; each layer's dense SwiGLU FFN (ffn_gate / ffn_up / ffn_down, width
// n_ff) becomes
//   - n_expert routed experts (ffn_{gate,up,down}_exps, width n_ff), each a copy of the dense FFN
//     whose down projection may be scaled per expert,
//   - a router ffn_gate_inp {n_embd, n_expert} of fixed pseudo-random F32 values,
//   - a shared expert (ffn_{gate,up,down}_shexp, width n_ff): the dense FFN with its down
//     projection scaled (0: an F32 zero matrix, which makes it contribute exactly nothing),
//   - its gate ffn_gate_inp_shexp {n_embd} of pseudo-random F32 values (0: zeros, sigmoid 0.5).
// With every expert an unscaled copy, any top-k with renormalised weights is the dense FFN up to
// the rounding of Σ w·y (exactly it for k = 1, or for k = 2 under a zero router whose tie gives
// weights ½, ½); with zero-scaled experts and a shared expert of down × 2 under a zero gate
// (½ · 2y = y) it is the dense FFN exactly too.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "gguf_rewrite.h"

namespace ubatch::test {

struct Qwen35MoeFromDense {
  int32_t n_expert = 4;
  int32_t n_expert_used = 2;
  // Expert e's down projection × expert_down_scale[e]; empty: every expert a byte copy of the
  // dense FFN (any tensor type). Scales other than 0 and 1 need an F32 file.
  std::vector<float> expert_down_scale;
  float router_scale = 0.1f;       // router weights uniform in ±router_scale; 0: all zero
  float shared_down_scale = 0.0f;  // shared expert's down projection × this (0: F32 zeros)
  float shared_gate_scale = 0.0f;  // its gate's weights uniform in ±this; 0: all zero
  uint32_t seed = 7;
};

namespace qwen35moe_detail {


inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Uniform in [−scale, scale] from a fixed linear congruential generator.
inline std::vector<float> pseudo_random(size_t n, float scale, uint32_t& state) {
  std::vector<float> v(n);
  for (float& x : v) {
    state = state * 1664525u + 1013904223u;
    x = scale == 0.0f ? 0.0f : scale * (static_cast<float>(state >> 8) / 8388608.0f - 1.0f);
  }
  return v;
}

// A dense tensor's bytes with its values × scale: a byte copy for 1, F32 zeros for 0, else the
// F32 values scaled (an F32 tensor is required; an empty result says it was not one).
inline std::vector<uint8_t> scaled(const gguf::TensorInfo& t, float scale, TensorType& type) {
  type = t.type;
  if (scale == 1.0f) return tensor_bytes(t);
  size_t n = 1;
  for (int d = 0; d < t.n_dims; ++d) n *= static_cast<size_t>(t.ne[d]);
  if (scale == 0.0f) {
    type = TensorType::F32;
    return std::vector<uint8_t>(n * sizeof(float), 0);
  }
  if (t.type != TensorType::F32) return {};
  std::vector<float> v(n);
  std::memcpy(v.data(), t.data, n * sizeof(float));
  for (float& x : v) x *= scale;
  return f32_bytes(v);
}

}  // namespace qwen35moe_detail

// The qwen35moe file made from `dense` (a qwen35 file) as `o` says; empty when a scale needs F32
// weights the file does not have, or when experts would differ in tensor type.
inline std::vector<uint8_t> qwen35moe_from_qwen35(const gguf::File& dense, const Qwen35MoeFromDense& o) {
  using namespace qwen35moe_detail;
  const std::optional<int64_t> n_ff = dense.get_int("qwen35.feed_forward_length");
  const std::optional<int64_t> n_embd = dense.get_int("qwen35.embedding_length");
  if (!n_ff || !n_embd) return {};
  const int64_t X = o.n_expert;
  uint32_t state = o.seed;
  bool failed = false;
  Rewrite r;
  r.key = [&](const gguf::MetadataEntry& e, gguf::Writer& w) {
    if (e.key == "general.architecture") {
      w.add_string(e.key, "qwen35moe");
      return true;
    }
    if (e.key.rfind("qwen35.", 0) != 0) return false;
    if (e.key == "qwen35.feed_forward_length") return true;  // the widths are the expert keys'
    w.add_value("qwen35moe." + e.key.substr(7), e.value);
    return true;
  };
  r.tensor = [&](const gguf::TensorInfo& t, gguf::Writer& w) {
    const bool gate = name_ends_with(t.name, ".ffn_gate.weight"), up = name_ends_with(t.name, ".ffn_up.weight"),
               down = name_ends_with(t.name, ".ffn_down.weight");
    if (!gate && !up && !down) return false;
    const std::string blk = t.name.substr(0, t.name.rfind(".ffn_") + 1);  // "blk.N."
    const char* part = gate ? "gate" : up ? "up" : "down";
    // Routed experts: one 3-D tensor, expert e the e-th copy.
    std::vector<uint8_t> exps;
    TensorType exps_type = t.type;
    for (int64_t e = 0; e < X; ++e) {
      const float s = down && !o.expert_down_scale.empty() ? o.expert_down_scale[static_cast<size_t>(e)] : 1.0f;
      TensorType type;
      std::vector<uint8_t> b = scaled(t, s, type);
      if (b.empty() || (e > 0 && type != exps_type)) failed = true;
      exps_type = type;
      exps.insert(exps.end(), b.begin(), b.end());
    }
    w.add_tensor(blk + "ffn_" + part + "_exps.weight", exps_type, {t.ne[0], t.ne[1], X}, exps);
    // The shared expert.
    TensorType sh_type;
    std::vector<uint8_t> sh = scaled(t, down ? o.shared_down_scale : 1.0f, sh_type);
    if (sh.empty()) failed = true;
    w.add_tensor(blk + "ffn_" + part + "_shexp.weight", sh_type, {t.ne[0], t.ne[1]}, sh);
    if (gate) {  // the router and the shared expert's gate
      w.add_tensor(blk + "ffn_gate_inp.weight", TensorType::F32, {*n_embd, X},
                   f32_bytes(pseudo_random(static_cast<size_t>(*n_embd * X), o.router_scale, state)));
      w.add_tensor(blk + "ffn_gate_inp_shexp.weight", TensorType::F32, {*n_embd},
                   f32_bytes(pseudo_random(static_cast<size_t>(*n_embd), o.shared_gate_scale, state)));
    }
    return true;
  };
  r.extra = [&](gguf::Writer& w) {
    w.add_uint("qwen35moe.expert_count", gguf::ValueType::UINT32, static_cast<uint64_t>(o.n_expert));
    w.add_uint("qwen35moe.expert_used_count", gguf::ValueType::UINT32, static_cast<uint64_t>(o.n_expert_used));
    w.add_uint("qwen35moe.expert_feed_forward_length", gguf::ValueType::UINT32, static_cast<uint64_t>(*n_ff));
    w.add_uint("qwen35moe.expert_shared_feed_forward_length", gguf::ValueType::UINT32, static_cast<uint64_t>(*n_ff));
  };
  std::vector<uint8_t> bytes = rewrite(dense, r);
  if (failed) return {};
  return bytes;
}

}  // namespace ubatch::test
