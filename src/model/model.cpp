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

namespace ubatch {

namespace {

// Finds a tensor and checks its shape [ne0, ne1] (ne1 = 1 for vectors).
Result<const gguf::TensorInfo*> find_tensor(const gguf::File& f, const std::string& name,
                                            int64_t ne0, int64_t ne1) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return Status::error(fmt::format("model: missing tensor '{}'", name));
  const int64_t want_dims = ne1 == 1 ? 1 : 2;
  bool ok = t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == 1 && t->ne[3] == 1;
  if (!ok || t->n_dims > 2 || (want_dims == 2 && t->n_dims != 2))
    return Status::error(fmt::format("model: tensor '{}' has shape [{}, {}, {}, {}], expected [{}, {}]",
                                     name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], ne0, ne1));
  return t;
}

// Binds tensors by name, checking shape and type, and remembers which tensors were used so
// that load() can refuse a file with tensors nothing reads.
class Binder {
 public:
  explicit Binder(const gguf::File& f) : f_(f) {}

  Status vector(const std::string& name, int64_t n, const float*& out) {
    Result<const gguf::TensorInfo*> t = find_tensor(f_, name, n, 1);
    if (!t) return t.status();
    if ((*t)->type != TensorType::F32)
      return Status::error(fmt::format("model: tensor '{}' has type {}, expected F32", name,
                                       tensor_type_name((*t)->type)));
    // Tensor data is aligned to general.alignment (>= 4 checked by the reader's alignment
    // rules for F32 data); floats are read in place from the mapping.
    if (reinterpret_cast<uintptr_t>((*t)->data) % alignof(float) != 0)
      return Status::error(fmt::format("model: tensor '{}' data is not 4-byte aligned", name));
    out = static_cast<const float*>((*t)->data);
    use(**t);
    return Status::ok();
  }
  // An optional vector: absent leaves out null.
  Status optional_vector(const std::string& name, int64_t n, const float*& out) {
    if (!f_.find_tensor(name)) return Status::ok();
    return vector(name, n, out);
  }

  Status matrix(const std::string& name, int64_t n_in, int64_t n_out, kernels::WeightView& out) {
    Result<const gguf::TensorInfo*> t = find_tensor(f_, name, n_in, n_out);
    if (!t) return t.status();
    if (!kernels::can_matmul((*t)->type))
      return Status::error(fmt::format("model: tensor '{}' has unsupported type {}", name,
                                       tensor_type_name((*t)->type)));
    out.type = (*t)->type;
    out.data = (*t)->data;
    out.n_in = n_in;
    out.n_out = n_out;
    out.row_bytes = tensor_row_bytes(out.type, n_in);
    use(**t);
    return Status::ok();
  }

  size_t bytes() const { return bytes_; }
  // Every tensor of the file that no binding used.
  std::vector<std::string> unused() const {
    std::vector<std::string> out;
    for (const gguf::TensorInfo& t : f_.tensors())
      if (!used_.count(t.name)) out.push_back(t.name);
    return out;
  }

 private:
  void use(const gguf::TensorInfo& t) {
    if (used_.insert(t.name).second) bytes_ += t.n_bytes;
  }
  const gguf::File& f_;
  std::unordered_set<std::string> used_;
  size_t bytes_ = 0;
};

// Rows [row0, row0 + n_rows) of a matrix as a matrix of their own (a fused tensor's parts).
kernels::WeightView row_slice(const kernels::WeightView& w, int64_t row0, int64_t n_rows) {
  kernels::WeightView v = w;
  v.data = static_cast<const uint8_t*>(w.data) + w.row_bytes * static_cast<size_t>(row0);
  v.n_out = n_rows;
  return v;
}

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
  if (!(s = b.vector("output_norm.weight", hp.n_embd, output_norm_))) return s;
  if (f.find_tensor("output.weight")) {
    if (!(s = b.matrix("output.weight", hp.n_embd, hp.n_vocab, output_))) return s;
  } else {
    output_ = tok_embd_;  // tied embeddings
  }
  const int64_t n_pairs = hp.n_rot / 2;
  if (!(s = b.optional_vector("rope_freqs.weight", n_pairs, rope_freqs_))) return s;
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

  const int64_t E = hp.n_embd, Eq = hp.n_embd_q(), Ek = hp.n_embd_k_gqa(), Ev = hp.n_embd_v_gqa();
  layers_.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = layers_[il];
    auto name = [il](const char* n, const char* kind = "weight") { return fmt::format("blk.{}.{}.{}", il, n, kind); };
    if (!(s = b.vector(name("attn_norm"), E, L.attn_norm))) return s;
    if (hp.fused_qkv) {
      kernels::WeightView qkv;
      if (!(s = b.matrix(name("attn_qkv"), E, Eq + Ek + Ev, qkv))) return s;
      L.wq = row_slice(qkv, 0, Eq);
      L.wk = row_slice(qkv, Eq, Ek);
      L.wv = row_slice(qkv, Eq + Ek, Ev);
    } else {
      if (!(s = b.matrix(name("attn_q"), E, Eq, L.wq))) return s;
      if (!(s = b.matrix(name("attn_k"), E, Ek, L.wk))) return s;
      if (!(s = b.matrix(name("attn_v"), E, Ev, L.wv))) return s;
      if (!(s = b.optional_vector(name("attn_q", "bias"), Eq, L.bq))) return s;
      if (!(s = b.optional_vector(name("attn_k", "bias"), Ek, L.bk))) return s;
      if (!(s = b.optional_vector(name("attn_v", "bias"), Ev, L.bv))) return s;
    }
    if (!(s = b.matrix(name("attn_output"), Eq, E, L.wo))) return s;
    if (!(s = b.optional_vector(name("attn_output", "bias"), E, L.bo))) return s;
    if (!(s = b.vector(name("ffn_norm"), E, L.ffn_norm))) return s;
    if (hp.fused_gate_up) {
      kernels::WeightView gate_up;
      if (!(s = b.matrix(name("ffn_up"), E, 2 * int64_t{hp.n_ff}, gate_up))) return s;
      L.w_gate = row_slice(gate_up, 0, hp.n_ff);
      L.w_up = row_slice(gate_up, hp.n_ff, hp.n_ff);
    } else {
      if (!(s = b.matrix(name("ffn_gate"), E, hp.n_ff, L.w_gate))) return s;
      if (!(s = b.matrix(name("ffn_up"), E, hp.n_ff, L.w_up))) return s;
    }
    if (!(s = b.matrix(name("ffn_down"), hp.n_ff, E, L.w_down))) return s;
    if (hp.qk_norm) {
      if (!(s = b.vector(name("attn_q_norm"), hp.head_dim_k, L.q_norm))) return s;
      if (!(s = b.vector(name("attn_k_norm"), hp.head_dim_k, L.k_norm))) return s;
    }
    if (hp.post_norms) {
      if (!(s = b.vector(name("post_attention_norm"), E, L.post_attn_norm))) return s;
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
  if (!layers_.empty() && layers_[0].bq) out.push_back("Q/K/V biases");
  if (!layers_.empty() && layers_[0].bo) out.push_back("attention output bias");
  if (hp.qk_norm) out.push_back("per-head Q/K RMSNorm");
  if (hp.post_norms) out.push_back("post-attention and post-FFN norms");
  if (hp.fused_qkv) out.push_back("fused QKV");
  if (hp.fused_gate_up) out.push_back("fused gate|up");
  if (rope_freqs_) out.push_back("RoPE frequency factors (rope_freqs)");
  if (rope_factors_short_)
    out.push_back(fmt::format("LongRoPE (original context {}, attention factor {:g})", hp.n_ctx_orig, hp.rope_attn_factor));
  if (hp.embd_scale_sqrt) out.push_back("embeddings x sqrt(n_embd)");
  if (hp.ffn_act == FfnActivation::GeluTanh) out.push_back("GELU(tanh) gated FFN");
  else out.push_back("SiLU gated FFN");
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

const float* Model::rope_factors(int32_t n_ctx_seq) const {
  if (rope_freqs_) return rope_freqs_;
  if (!rope_factors_short_) return nullptr;
  const int32_t n = n_ctx_seq > 0 ? n_ctx_seq : hp_.n_ctx_train;
  return n > hp_.n_ctx_orig ? rope_factors_long_ : rope_factors_short_;
}

Status Model::pack_weights() {
  const bool tied = output_.data == tok_embd_.data;
  size_t streamed = weight_bytes_;
  if (!tied) streamed -= tok_embd_.row_bytes * static_cast<size_t>(tok_embd_.n_out);
  auto pack = [&](kernels::WeightView& v) -> Status {
    kernels::PackedFormat fmt;
    if (!kernels::packed_format(v.type, fmt) || v.n_in % fmt.block_elems != 0) return Status::ok();
    Result<std::unique_ptr<kernels::PackedWeight>> pw =
        kernels::pack_weight(v.type, v.data, v.n_in, v.n_out);
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
  for (LayerWeights& L : layers_)
    for (kernels::WeightView* v : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      if (!(s = pack(*v))) return s;
  streamed_bytes_ = streamed;
  return Status::ok();
}

Status Model::forward(const UBatch& ub, const KvView& kv, float* logits, kernels::ThreadPool& pool, float* embd) {
  const HParams& hp = hp_;
  const int64_t T = ub.n_tokens;
  if (T <= 0) return Status::error("forward: empty ubatch");
  for (int64_t t = 0; t < T; ++t)
    if (ub.token[t] < 0 || ub.token[t] >= hp.n_vocab)
      return Status::error(fmt::format("forward: token id {} at row {} outside the vocabulary [0, {})",
                                       ub.token[t], t, hp.n_vocab));
  UBATCH_CHECK(static_cast<int>(kv.layers.size()) == hp.n_layer);

  const int64_t E = hp.n_embd, Eq = hp.n_embd_q(), Ek = hp.n_embd_k_gqa(), Ev = hp.n_embd_v_gqa();
  const int hd = hp.head_dim_k;
  grow(x_, T * E);        // [T, n_embd] residual stream
  grow(xn_, T * E);       // [T, n_embd] normalised input of a block
  grow(q_, T * Eq);       // [T, n_head, head_dim]
  grow(k_, T * Ek);       // [T, n_kv_head, head_dim]
  grow(v_, T * Ev);       // [T, n_kv_head, head_dim]
  grow(attn_, T * Eq);    // [T, n_head, head_dim]
  grow(tmp_, T * E);      // [T, n_embd]
  grow(gate_, T * hp.n_ff);  // [T, n_ff]
  grow(up_, T * hp.n_ff);    // [T, n_ff]
  int32_t max_cells = 1;
  for (int64_t t = 0; t < T; ++t) max_cells = std::max(max_cells, kv.n_cells[t]);
  grow(attn_scratch_, static_cast<size_t>(pool.n_threads()) * max_cells);

  float* x = x_.data();
  float* xn = xn_.data();
  // Per-token work (embeddings, RoPE angles, norms, residuals, activations) over [t0, t1): split over the pool when the
  // ubatch is long enough to pay for a hand-off. Row results do not depend on the split.
  auto per_token = [&](const auto& fn) {
    if (T < 8 || pool.n_threads() == 1) return fn(int64_t{0}, T);
    pool.run([&](int ith, int nth) {
      int64_t t0, t1;
      kernels::ThreadPool::split(T, ith, nth, t0, t1);
      if (t0 < t1) fn(t0, t1);
    });
  };

  const float embd_scale = hp.embd_scale_sqrt ? std::sqrt(static_cast<float>(E)) : 1.0f;
  per_token([&](int64_t t0, int64_t t1) {
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
    const float base = b == 1 ? hp.rope_base_swa : hp.rope_base;
    const float freq_scale = b == 1 ? hp.rope_freq_scale_swa : hp.rope_freq_scale;
    if (b == 1 && base == hp.rope_base && freq_scale == hp.rope_freq_scale) {
      std::copy(rope_cos_[0].begin(), rope_cos_[0].begin() + T * n_half, rope_cos_[1].begin());
      std::copy(rope_sin_[0].begin(), rope_sin_[0].begin() + T * n_half, rope_sin_[1].begin());
      continue;
    }
    per_token([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        kernels::rope_angles(ub.pos[t], hp.n_rot, base, freq_scale, rope_cos_[b].data() + t * n_half,
                             rope_sin_[b].data() + t * n_half, freq_factors, hp.rope_attn_factor);
    });
  }

  kernels::AttentionShape shape;
  shape.n_head = hp.n_head;
  shape.n_kv_head = hp.n_kv_head;
  shape.head_dim = hd;
  shape.scale = hp.attn_scale;
  shape.softcap = hp.attn_softcap;
  shape.kv_type = kv.type;

  for (int il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& L = layers_[il];
    const KvLayerView& kvl = kv.layers[il];
    per_token([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) kernels::rms_norm(x + t * E, L.attn_norm, xn + t * E, E, hp.rms_eps);
    });
    {
      const kernels::WeightView* ws[3] = {&L.wq, &L.wk, &L.wv};
      float* ys[3] = {q_.data(), k_.data(), v_.data()};
      kernels::matmul_multi(ws, ys, 3, xn, T, pool);  // one hand-off for the three
    }
    const int swa_table = hp.layer_is_swa[il] ? 1 : 0;
    const float* rcos = rope_cos_[swa_table].data();
    const float* rsin = rope_sin_[swa_table].data();
    const bool use_rope = hp.layer_use_rope[il];
    // Per token (independent rows and KV cells, so split over the pool for long ubatches).
    auto qk_rows = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* qt = q_.data() + t * Eq;
        float* kt = k_.data() + t * Ek;
        float* vt = v_.data() + t * Ev;
        if (L.bq) kernels::add(qt, L.bq, qt, Eq);
        if (L.bk) kernels::add(kt, L.bk, kt, Ek);
        if (L.bv) kernels::add(vt, L.bv, vt, Ev);
        if (hp.qk_norm) {
          for (int h = 0; h < hp.n_head; ++h) kernels::rms_norm(qt + h * hd, L.q_norm, qt + h * hd, hd, hp.rms_eps);
          for (int h = 0; h < hp.n_kv_head; ++h) kernels::rms_norm(kt + h * hd, L.k_norm, kt + h * hd, hd, hp.rms_eps);
        }
        if (use_rope) {
          kernels::rope_apply(qt, hp.n_head, hd, hp.n_rot, rcos + t * n_half, rsin + t * n_half, hp.rope_style);
          kernels::rope_apply(kt, hp.n_kv_head, hd, hp.n_rot, rcos + t * n_half, rsin + t * n_half, hp.rope_style);
        }
        // Place this token's K and V in its cell before any attention of this layer reads it.
        const int64_t cell = kv.write_cell[t];
        kernels::quantize_row(kv.type, kt, static_cast<uint8_t*>(kvl.k) + cell * kvl.k_row_bytes, Ek);
        kernels::quantize_row(kv.type, vt, static_cast<uint8_t*>(kvl.v) + cell * kvl.v_row_bytes, Ev);
      }
    };
    if (T < 8) {
      qk_rows(0, T);
    } else {
      pool.run([&](int ith, int nth) {
        int64_t t0, t1;
        kernels::ThreadPool::split(T, ith, nth, t0, t1);
        qk_rows(t0, t1);
      });
    }

    shape.k_row_bytes = kvl.k_row_bytes;
    shape.v_row_bytes = kvl.v_row_bytes;
    const bool swa = hp.layer_is_swa[il] && hp.sliding_window > 0;
    // Tasks: (token, query head), or (token, KV head) — the heads sharing a KV head read
    // each K/V row once — when there are enough tokens to keep every thread busy. A head's
    // result does not depend on which heads share its pass.
    const int heads_per_task = T >= 2 * pool.n_threads() ? hp.n_head / hp.n_kv_head : 1;
    const int n_head_tasks = hp.n_head / heads_per_task;
    const int64_t n_tasks = T * n_head_tasks;
    pool.run([&](int ith, int nth) {
      // Tasks dealt round-robin: a causal prefill's later tokens see more cells, so contiguous
      // ranges would leave the first threads idle while the last ones work.
      float* scratch = attn_scratch_.data() + static_cast<size_t>(ith) * max_cells;
      for (int64_t task = ith; task < n_tasks; task += nth) {
        const int64_t t = task / n_head_tasks;
        const int h = static_cast<int>(task % n_head_tasks) * heads_per_task;
        const int32_t* cells = kv.cells[t];
        int32_t n = kv.n_cells[t], first = 0;
        if (swa) {  // visible iff pos - cell_pos < window; cells are in position order
          while (first < n && ub.pos[t] - kv.cell_pos[cells[first]] >= hp.sliding_window) ++first;
        }
        kernels::attention(shape, q_.data() + t * Eq, kvl.k, kvl.v, cells + first, n - first,
                           attn_.data() + t * Eq, scratch, h, h + heads_per_task);
      }
    });

    kernels::matmul(L.wo, attn_.data(), T, tmp_.data(), pool);
    per_token([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* r = tmp_.data() + t * E;
        if (L.bo) kernels::add(r, L.bo, r, E);
        if (hp.post_norms) kernels::rms_norm(r, L.post_attn_norm, r, E, hp.rms_eps);
        kernels::add(x + t * E, r, x + t * E, E);
        kernels::rms_norm(x + t * E, L.ffn_norm, xn + t * E, E, hp.rms_eps);
      }
    });
    {
      const kernels::WeightView* ws[2] = {&L.w_gate, &L.w_up};
      float* ys[2] = {gate_.data(), up_.data()};
      kernels::matmul_multi(ws, ys, 2, xn, T, pool);
    }
    per_token([&](int64_t t0, int64_t t1) {
      float* g = gate_.data() + t0 * hp.n_ff;
      const int64_t nf = (t1 - t0) * hp.n_ff;
      if (hp.ffn_act == FfnActivation::GeluTanh) kernels::gelu_tanh(g, g, nf);
      else kernels::silu(g, g, nf);
      kernels::mul(g, up_.data() + t0 * hp.n_ff, g, nf);
    });
    kernels::matmul(L.w_down, gate_.data(), T, tmp_.data(), pool);
    per_token([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* r = tmp_.data() + t * E;
        if (hp.post_norms) kernels::rms_norm(r, L.post_ffn_norm, r, E, hp.rms_eps);
        kernels::add(x + t * E, r, x + t * E, E);
      }
    });
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
