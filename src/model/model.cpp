#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <optional>
#include <unordered_set>

#include "kernels/attention.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "kernels/recurrent.h"

namespace ubatch {

namespace {

void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

Result<std::unique_ptr<Model>> Model::load_file(const std::string& path) {
  Result<std::unique_ptr<gguf::File>> f = gguf::File::open(path);
  if (!f) return f.status();
  return load(std::shared_ptr<const gguf::File>(std::move(f.value())));
}

Result<std::unique_ptr<Model>> Model::load(std::shared_ptr<const gguf::File> file) {
  return load_impl(std::move(file), true);
}

Result<std::unique_ptr<Model>> Model::inspect(std::shared_ptr<const gguf::File> file) {
  return load_impl(std::move(file), false);
}

Result<std::unique_ptr<Model>> Model::load_impl(std::shared_ptr<const gguf::File> file, bool pack) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  Result<HParams> hp = HParams::from_gguf(*m->file_);
  if (!hp) return hp.status();
  m->hp_ = std::move(hp.value());
  if (Status s = m->bind_weights(); !s) return s;
  if (pack)
    if (Status s = m->pack_weights(); !s) return s;
  return m;
}

Status Model::bind_weights() {
  const gguf::File& f = *file_;
  HParams& hp = hp_;
  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) return Status::error("model: missing tensor 'token_embd.weight'");
  if (embd->n_dims != 2 || embd->ne[0] != hp.n_embd || embd->ne[1] <= 0 || embd->ne[1] > (1 << 30))
    return Status::error(fmt::format("model: tensor 'token_embd.weight' has shape [{}, {}], expected [{}, n_vocab]",
                                     embd->ne[0], embd->ne[1], hp.n_embd));
  hp.n_vocab = static_cast<int32_t>(embd->ne[1]);
  if (std::optional<int64_t> nv = f.get_int(hp.arch + ".vocab_size"); nv && *nv != hp.n_vocab)
    return Status::error(fmt::format("model: {}.vocab_size is {} but token_embd.weight has {} rows", hp.arch,
                                     *nv, hp.n_vocab));
  if (!kernels::can_dequantize(embd->type))
    return Status::error(fmt::format("model: tensor 'token_embd.weight' has unsupported type {}",
                                     tensor_type_name(embd->type)));
  Binder b(f);
  Status s;
  if (!(s = b.matrix("token_embd.weight", hp.n_embd, hp.n_vocab, tok_embd_))) return s;
  if (!(s = b.vector(hp.output_norm_name + ".weight", hp.n_embd, output_norm_))) return s;
  if (f.find_tensor("output.weight")) {
    if (!(s = b.matrix("output.weight", hp.n_embd, hp.n_vocab, output_))) return s;
  } else {
    output_ = tok_embd_;  // tied embeddings
  }
  const int64_t n_pairs = hp.n_rot / 2;
  if (!(s = b.optional_vector("rope_freqs.weight", n_pairs, rope_freqs_))) return s;
  if (rope_freqs_ && !hp.rope_yarn_factors.empty())
    return Status::error("model: tensor 'rope_freqs.weight' and YaRN scaling are exclusive");
  if (hp.long_rope) {
    // LongRoPE: both sets or neither (a file without them is plain RoPE).
    if (!(s = b.optional_vector("rope_factors_short.weight", n_pairs, rope_factors_short_))) return s;
    if (!(s = b.optional_vector("rope_factors_long.weight", n_pairs, rope_factors_long_))) return s;
    if ((rope_factors_short_ == nullptr) != (rope_factors_long_ == nullptr))
      return Status::error(fmt::format("model: missing tensor '{}' (LongRoPE needs both factor sets, [{}] each)",
                                       rope_factors_short_ ? "rope_factors_long.weight" : "rope_factors_short.weight",
                                       n_pairs));
    if (rope_freqs_ && rope_factors_short_)
      return Status::error("model: tensor 'rope_freqs.weight' and LongRoPE factors are exclusive");
  }

  const int64_t E = hp.n_embd;
  layers_.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    Layer& L = layers_[il];
    auto name = [il](const std::string& n) { return fmt::format("blk.{}.{}.weight", il, n); };
    if (!(s = b.vector(name("attn_norm"), E, L.attn_norm))) return s;
    L.mixer = make_mixer(hp.layer_mixer[il]);
    if (!(s = L.mixer->bind(b, hp, il))) return s;
    if (!(s = b.vector(name(hp.ffn_norm_name), E, L.ffn_norm))) return s;
    L.ffn = make_ffn(hp.ffn_kind);
    if (!(s = L.ffn->bind(b, hp, il))) return s;
    if (hp.post_norms) {
      if (!(s = b.vector(name("post_attention_norm"), E, L.post_mixer_norm))) return s;
      if (!(s = b.vector(name("post_ffw_norm"), E, L.post_ffn_norm))) return s;
    }
  }
  if (std::vector<std::string> unused = b.unused(); !unused.empty()) {
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? ", '" : "'") + unused[i] + "'";
    if (unused.size() > 8) list += fmt::format(" and {} more", unused.size() - 8);
    return Status::error(fmt::format(
        "model: {} tensor(s) of the file are not used by architecture '{}': {} — running without them would "
        "compute something other than the model, so it is refused",
        unused.size(), hp.arch, list));
  }
  weight_bytes_ = b.bytes();
  describe_features();
  return Status::ok();
}

void Model::describe_features() {
  const HParams& hp = hp_;
  std::vector<std::string>& out = features_;
  out.clear();
  out.push_back(hp.rope_style == kernels::RopeStyle::NeoX ? "RoPE NeoX (halves)" : "RoPE normal (adjacent pairs)");
  out.push_back(fmt::format("RoPE base {:g}", hp.rope_base));
  if (hp.rope_freq_scale != 1.0f) out.push_back(fmt::format("linear RoPE scaling x{:g}", 1.0f / hp.rope_freq_scale));
  if (hp.n_kv_head != hp.n_head) out.push_back(fmt::format("GQA {} query / {} KV heads", hp.n_head, hp.n_kv_head));
  if (hp.head_dim_k * hp.n_head != hp.n_embd) out.push_back(fmt::format("head size {} (n_embd / n_head = {})", hp.head_dim_k, hp.n_embd / hp.n_head));
  {
    int first_attn = -1;
    for (int il = 0; il < hp.n_layer && first_attn < 0; ++il)
      if (hp.kv_layer[il] >= 0) first_attn = il;
    if (first_attn >= 0 && file_->find_tensor(fmt::format("blk.{}.attn_q.bias", first_attn))) out.push_back("Q/K/V biases");
    if (first_attn >= 0 && file_->find_tensor(fmt::format("blk.{}.attn_output.bias", first_attn)))
      out.push_back("attention output bias");
  }
  if (hp.has_recurrent()) {
    std::string kinds;
    for (MixerKind k : {MixerKind::Attention, MixerKind::GatedAttention, MixerKind::GatedDeltaNet, MixerKind::ShortConv}) {
      std::string layers;
      for (int il = 0; il < hp.n_layer; ++il)
        if (hp.layer_mixer[il] == k) {
          if (!layers.empty()) layers += ',';
          layers += std::to_string(il);
        }
      if (!layers.empty()) kinds += fmt::format("{}{} [{}]", kinds.empty() ? "" : ", ", mixer_kind_name(k), layers);
    }
    out.push_back("hybrid layers: " + kinds);
    size_t floats = 0, floats_bf16 = 0;
    for (int il = 0; il < hp.n_layer; ++il) {
      floats += hp.state_floats(il);
      floats_bf16 += hp.state_floats(il, TensorType::BF16);
    }
    out.push_back(floats_bf16 < floats
                      ? fmt::format("recurrent state {:.1f} KiB per sequence (F32; {:.1f} KiB with --state-type bf16)",
                                    floats * 4 / 1024.0, floats_bf16 * 4 / 1024.0)
                      : fmt::format("recurrent state {:.1f} KiB per sequence (F32)", floats * 4 / 1024.0));
  }
  if (hp.layer_mixer.size() == size_t(hp.n_layer) &&
      std::find(hp.layer_mixer.begin(), hp.layer_mixer.end(), MixerKind::GatedAttention) != hp.layer_mixer.end())
    out.push_back("gated attention output");
  if (hp.n_rot < hp.head_dim_k) out.push_back(fmt::format("partial RoPE ({} of {} dims)", hp.n_rot, hp.head_dim_k));
  if (hp.qk_norm) out.push_back("per-head Q/K RMSNorm");
  if (hp.post_norms) out.push_back("post-attention and post-FFN norms");
  if (hp.fused_qkv) out.push_back("fused QKV");
  if (hp.fused_gate_up) out.push_back("fused gate|up");
  if (rope_freqs_) out.push_back("RoPE frequency factors (rope_freqs)");
  if (!hp.rope_yarn_factors.empty())
    out.push_back(fmt::format("YaRN RoPE scaling x{:g} (original context {}, cos/sin x{:g})", hp.rope_yarn_scale,
                              hp.n_ctx_orig, hp.rope_attn_factor));
  if (hp.attn_sinks) out.push_back("attention sinks");
  if (hp.ffn_kind == FfnKind::Moe) {
    // Parameters: every tensor's elements; active = all but the experts a token does not use.
    uint64_t total = 0, experts = 0;
    for (const gguf::TensorInfo& t : file_->tensors()) {
      uint64_t n = 1;
      for (int d = 0; d < t.n_dims; ++d) n *= static_cast<uint64_t>(t.ne[d]);
      total += n;
      if (t.name.find("_exps.") != std::string::npos) experts += n;
    }
    const uint64_t active = total - experts + experts / hp.n_expert * hp.n_expert_used;
    out.push_back(fmt::format("mixture of experts: {} experts, {} per token (router: {}{}), expert width {}",
                              hp.n_expert, hp.n_expert_used,
                              hp.moe_gating == MoeGating::SoftmaxTopK ? "softmax, top-k, renormalised"
                                                                      : "top-k, softmax over the k",
                              hp.moe_biases ? "; router and expert biases" : "", hp.n_ff_exp));
    if (hp.moe_shared_expert)
      out.push_back(fmt::format("shared expert of width {}, scaled by sigmoid(ffn_gate_inp_shexp . x)", hp.n_ff_shexp));
    out.push_back(fmt::format("parameters {:.2f} M total, {:.2f} M active per token", total / 1e6, active / 1e6));
    if (hp.moe_clamped_swiglu) out.push_back("clamped SwiGLU experts (alpha 1.702, limit 7)");
  }
  if (rope_factors_short_)
    out.push_back(fmt::format("LongRoPE (original context {}, attention factor {:g})", hp.n_ctx_orig, hp.rope_attn_factor));
  if (hp.embd_scale_sqrt) out.push_back("embeddings x sqrt(n_embd)");
  if (hp.ffn_kind == FfnKind::Dense)
    out.push_back(hp.ffn_act == FfnActivation::GeluTanh ? "GELU(tanh) gated FFN" : "SiLU gated FFN");
  if (hp.sliding_window > 0) {
    int n_swa = 0;
    for (bool w : hp.layer_is_swa) n_swa += w ? 1 : 0;
    if (n_swa > 0) out.push_back(fmt::format("sliding window {} on {} of {} layers", hp.sliding_window, n_swa, hp.n_layer));
  }
  std::string nope;
  for (int il = 0; il < hp.n_layer; ++il)
    if (!hp.layer_use_rope[il]) nope += (nope.empty() ? "" : ", ") + std::to_string(il);
  if (!nope.empty()) out.push_back("NoPE layers " + nope);
  if (hp.attn_softcap > 0) out.push_back(fmt::format("attention soft-cap {:g}", hp.attn_softcap));
  if (hp.final_softcap > 0) out.push_back(fmt::format("final-logit soft-cap {:g}", hp.final_softcap));
  out.push_back(output_.data == tok_embd_.data ? "tied output" : "separate output");
}

int32_t Model::state_chunk() const {
  return std::find(hp_.layer_mixer.begin(), hp_.layer_mixer.end(), MixerKind::GatedDeltaNet) != hp_.layer_mixer.end()
             ? kernels::kDeltaChunk
             : 0;
}

const float* Model::rope_factors(int32_t n_ctx_seq) const {
  if (rope_freqs_) return rope_freqs_;
  if (!hp_.rope_yarn_factors.empty()) return hp_.rope_yarn_factors.data();
  if (!rope_factors_short_) return nullptr;
  const int32_t n = n_ctx_seq > 0 ? n_ctx_seq : hp_.n_ctx_train;
  return n > hp_.n_ctx_orig ? rope_factors_long_ : rope_factors_short_;
}

// MXFP4 weights whose block scales an f16 holds (all real ones: quant.h mxfp4_scales_fit_f16)
// are packed like any other type and multiplied as MXFP4 by every kernel level. Any other is
// kept as F32 values (exact, 7.5× the bytes); one whose values overflow F32 (E8M0 exponents
// >= 253) is refused.
Status Model::convert_mxfp4(kernels::WeightView& v, size_t& streamed) {
  const size_t file_bytes = v.row_bytes * static_cast<size_t>(v.n_out);
  const void* src = v.data;
  const int64_t n = v.n_in * v.n_out;
  std::vector<float>& f = converted_.emplace_back(static_cast<size_t>(n));
  kernels::dequantize_row(TensorType::MXFP4, v.data, f.data(), n);
  for (float x : f)
    if (!std::isfinite(x))
      return Status::error("model: an MXFP4 weight block has an E8M0 exponent whose values overflow float32 "
                           "(e >= 253); refused");
  v.type = TensorType::F32;
  v.data = f.data();
  v.row_bytes = tensor_row_bytes(TensorType::F32, v.n_in);
  packed_bytes_ += f.size() * sizeof(float);
  streamed = streamed - file_bytes + f.size() * sizeof(float);
  file_->release_pages(src, file_bytes);  // the converted copy replaces them
  return Status::ok();
}

Status Model::pack_weights() {
  const bool tied = output_.data == tok_embd_.data;
  size_t streamed = weight_bytes_;
  if (!tied) streamed -= tok_embd_.row_bytes * static_cast<size_t>(tok_embd_.n_out);
  auto pack = [&](kernels::WeightView& v) -> Status {
    if (v.type == TensorType::MXFP4 && !kernels::mxfp4_scales_fit_f16(v.data, v.n_in * v.n_out))
      return convert_mxfp4(v, streamed);
    kernels::PackedFormat fmt;
    if (!kernels::packed_format(v.type, fmt) || v.n_in % fmt.block_elems != 0) return Status::ok();
    Result<std::unique_ptr<kernels::PackedWeight>> pw =
        kernels::pack_weight(v.type, v.data, v.n_in, v.n_out, huge_pages());
    if (!pw) return pw.status();
    v.packed = pw->get();
    const size_t file_bytes = v.row_bytes * static_cast<size_t>(v.n_out);
    packed_bytes_ += (*pw)->bytes();
    streamed = streamed - file_bytes + (*pw)->bytes();
    file_->release_pages(v.data, file_bytes);  // the packed copy replaces them
    packed_.push_back(std::move(pw.value()));
    return Status::ok();
  };
  Status s;
  if (!(s = pack(output_))) return s;
  if (tied) tok_embd_.packed = output_.packed;  // rows are read back from the packed copy
  std::vector<kernels::WeightView*> mats;
  for (Layer& L : layers_) {
    mats.clear();
    L.mixer->matrices(mats);
    L.ffn->matrices(mats);
    for (kernels::WeightView* v : mats)
      if (!(s = pack(*v))) return s;
  }
  streamed_bytes_ = streamed;
  return Status::ok();
}

Status Model::forward(const UBatch& ub, const KvView& kv, const StateView& state, float* logits,
                      kernels::ThreadPool& pool, float* embd) {
  const HParams& hp = hp_;
  const int64_t T = ub.n_tokens;
  if (T <= 0) return Status::error("forward: empty ubatch");
  for (int64_t t = 0; t < T; ++t)
    if (ub.token[t] < 0 || ub.token[t] >= hp.n_vocab)
      return Status::error(fmt::format("forward: token id {} at row {} outside the vocabulary [0, {})",
                                       ub.token[t], t, hp.n_vocab));
  UBATCH_CHECK(static_cast<int>(kv.layers.size()) == hp.n_kv_layer);
  UBATCH_CHECK_MSG(!hp.has_recurrent() || state.layer_offset.size() == size_t(hp.n_layer),
                   "forward: a model with recurrent layers needs the sequences' state");

  const int64_t E = hp.n_embd;
  grow(x_, T * E);        // [T, n_embd] residual stream
  grow(xn_, T * E);       // [T, n_embd] normalised input of a block
  grow(tmp_, T * E);      // [T, n_embd] a block's output
  float* x = x_.data();
  float* xn = xn_.data();
  ForwardPass fp{hp, ub, kv, state, pool, scratch_};
  fp.T = T;
  fp.xn = xn;
  fp.out = tmp_.data();

  const float embd_scale = hp.embd_scale_sqrt ? std::sqrt(static_cast<float>(E)) : 1.0f;
  fp.per_token([&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (tok_embd_.packed) {
        kernels::packed_dequantize_row(*tok_embd_.packed, ub.token[t], x + t * E);
      } else {
        const uint8_t* row = static_cast<const uint8_t*>(tok_embd_.data) + tok_embd_.row_bytes * ub.token[t];
        kernels::dequantize_row(tok_embd_.type, row, x + t * E, E);
      }
      if (hp.embd_scale_sqrt) kernels::scale(x + t * E, embd_scale, x + t * E, E);
    }
  });

  // RoPE angles of every token, once per forward for each table (global, sliding-window layers).
  const int64_t n_half = hp.n_rot / 2;
  const bool any_swa = std::find(hp.layer_is_swa.begin(), hp.layer_is_swa.end(), true) != hp.layer_is_swa.end();
  const float* freq_factors = rope_factors(ub.n_ctx_seq);  // [n_half] or nullptr
  for (int b = 0; b < (any_swa ? 2 : 1); ++b) {
    grow(rope_cos_[b], T * n_half);
    grow(rope_sin_[b], T * n_half);
    fp.rope_cos[b] = rope_cos_[b].data();
    fp.rope_sin[b] = rope_sin_[b].data();
    const float base = b == 1 ? hp.rope_base_swa : hp.rope_base;
    const float freq_scale = b == 1 ? hp.rope_freq_scale_swa : hp.rope_freq_scale;
    if (b == 1 && base == hp.rope_base && freq_scale == hp.rope_freq_scale) {
      std::copy(rope_cos_[0].begin(), rope_cos_[0].begin() + T * n_half, rope_cos_[1].begin());
      std::copy(rope_sin_[0].begin(), rope_sin_[0].begin() + T * n_half, rope_sin_[1].begin());
      continue;
    }
    fp.per_token([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        kernels::rope_angles(ub.pos[t], hp.n_rot, base, freq_scale, rope_cos_[b].data() + t * n_half,
                             rope_sin_[b].data() + t * n_half, freq_factors, hp.rope_attn_factor);
    });
  }

  // x += [post_norm](block(rms(x) · norm)), row by row.
  auto residual_block = [&](Block& block, const float* norm, const float* post_norm, int il) {
    fp.per_token([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) kernels::rms_norm(x + t * E, norm, xn + t * E, E, hp.rms_eps);
    });
    block.forward(fp, il);
    fp.per_token([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* r = fp.out + t * E;
        if (post_norm) kernels::rms_norm(r, post_norm, r, E, hp.rms_eps);
        kernels::add(x + t * E, r, x + t * E, E);
      }
    });
  };
  for (int il = 0; il < hp.n_layer; ++il) {
    Layer& L = layers_[il];
    residual_block(*L.mixer, L.attn_norm, L.post_mixer_norm, il);
    residual_block(*L.ffn, L.ffn_norm, L.post_ffn_norm, il);
  }

  // Final hidden states (after the output norm) for the rows asked for.
  if (ub.embd) {
    int64_t n_embd_out = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (!ub.embd[t]) continue;
      UBATCH_CHECK_MSG(embd != nullptr, "forward: rows want hidden states but no buffer was given");
      kernels::rms_norm(x + t * E, output_norm_, embd + n_embd_out * E, E, hp.rms_eps);
      ++n_embd_out;
    }
  }

  // Logits only for the rows asked for.
  int64_t n_out = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (!ub.output || !ub.output[t]) continue;
    kernels::rms_norm(x + t * E, output_norm_, xn + n_out * E, E, hp.rms_eps);
    ++n_out;
  }
  if (n_out > 0) kernels::matmul(output_, xn, n_out, logits, pool);
  if (n_out > 0 && hp.final_softcap > 0) {
    const int64_t V = hp.n_vocab;
    auto cap_rows = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) kernels::softcap(logits + r * V, logits + r * V, V, hp.final_softcap);
    };
    if (n_out == 1 && pool.n_threads() > 1) {  // split one long row over the pool
      pool.run([&](int ith, int nth) {
        int64_t c0, c1;
        kernels::ThreadPool::split(V, ith, nth, c0, c1);
        if (c0 < c1) kernels::softcap(logits + c0, logits + c0, c1 - c0, hp.final_softcap);
      });
    } else if (pool.n_threads() > 1) {
      pool.run([&](int ith, int nth) {
        int64_t r0, r1;
        kernels::ThreadPool::split(n_out, ith, nth, r0, r1);
        if (r0 < r1) cap_rows(r0, r1);
      });
    } else {
      cap_rows(0, n_out);
    }
  }
  return Status::ok();
}

}  // namespace ubatch
