#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>

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

Status bind_vector(const gguf::File& f, const std::string& name, int64_t n, const float*& out,
                   size_t& bytes) {
  Result<const gguf::TensorInfo*> t = find_tensor(f, name, n, 1);
  if (!t) return t.status();
  if ((*t)->type != TensorType::F32)
    return Status::error(fmt::format("model: tensor '{}' has type {}, expected F32", name,
                                     tensor_type_name((*t)->type)));
  // Tensor data is aligned to general.alignment (>= 4 checked by the reader's alignment
  // rules for F32 data); floats are read in place from the mapping.
  if (reinterpret_cast<uintptr_t>((*t)->data) % alignof(float) != 0)
    return Status::error(fmt::format("model: tensor '{}' data is not 4-byte aligned", name));
  out = static_cast<const float*>((*t)->data);
  bytes += (*t)->n_bytes;
  return Status::ok();
}

Status bind_matrix(const gguf::File& f, const std::string& name, int64_t n_in, int64_t n_out,
                   kernels::WeightView& out, size_t& bytes) {
  Result<const gguf::TensorInfo*> t = find_tensor(f, name, n_in, n_out);
  if (!t) return t.status();
  if (!kernels::can_matmul((*t)->type))
    return Status::error(fmt::format("model: tensor '{}' has unsupported type {}", name,
                                     tensor_type_name((*t)->type)));
  out.type = (*t)->type;
  out.data = (*t)->data;
  out.n_in = n_in;
  out.n_out = n_out;
  out.row_bytes = tensor_row_bytes(out.type, n_in);
  bytes += (*t)->n_bytes;
  return Status::ok();
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
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  Result<HParams> hp = HParams::from_gguf(*m->file_);
  if (!hp) return hp.status();
  m->hp_ = std::move(hp.value());
  if (Status s = m->bind_weights(); !s) return s;
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
  if (!kernels::can_dequantize(embd->type))
    return Status::error(fmt::format("model: tensor 'token_embd.weight' has unsupported type {}",
                                     tensor_type_name(embd->type)));
  size_t bytes = 0;
  Status s;
  if (!(s = bind_matrix(f, "token_embd.weight", hp.n_embd, hp.n_vocab, tok_embd_, bytes))) return s;
  if (!(s = bind_vector(f, "output_norm.weight", hp.n_embd, output_norm_, bytes))) return s;
  if (f.find_tensor("output.weight")) {
    if (!(s = bind_matrix(f, "output.weight", hp.n_embd, hp.n_vocab, output_, bytes))) return s;
  } else {
    output_ = tok_embd_;  // tied embeddings
  }

  const int64_t E = hp.n_embd, Eq = hp.n_embd_q(), Ek = hp.n_embd_k_gqa(), Ev = hp.n_embd_v_gqa();
  layers_.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = layers_[il];
    auto name = [il](const char* n) { return fmt::format("blk.{}.{}.weight", il, n); };
    if (!(s = bind_vector(f, name("attn_norm"), E, L.attn_norm, bytes))) return s;
    if (!(s = bind_matrix(f, name("attn_q"), E, Eq, L.wq, bytes))) return s;
    if (!(s = bind_matrix(f, name("attn_k"), E, Ek, L.wk, bytes))) return s;
    if (!(s = bind_matrix(f, name("attn_v"), E, Ev, L.wv, bytes))) return s;
    if (!(s = bind_matrix(f, name("attn_output"), Eq, E, L.wo, bytes))) return s;
    if (!(s = bind_vector(f, name("ffn_norm"), E, L.ffn_norm, bytes))) return s;
    if (!(s = bind_matrix(f, name("ffn_gate"), E, hp.n_ff, L.w_gate, bytes))) return s;
    if (!(s = bind_matrix(f, name("ffn_up"), E, hp.n_ff, L.w_up, bytes))) return s;
    if (!(s = bind_matrix(f, name("ffn_down"), hp.n_ff, E, L.w_down, bytes))) return s;
    if (hp.qk_norm) {
      if (!(s = bind_vector(f, name("attn_q_norm"), hp.head_dim_k, L.q_norm, bytes))) return s;
      if (!(s = bind_vector(f, name("attn_k_norm"), hp.head_dim_k, L.k_norm, bytes))) return s;
    }
    if (hp.post_norms) {
      if (!(s = bind_vector(f, name("post_attention_norm"), E, L.post_attn_norm, bytes))) return s;
      if (!(s = bind_vector(f, name("post_ffw_norm"), E, L.post_ffn_norm, bytes))) return s;
    }
  }
  weight_bytes_ = bytes;
  return Status::ok();
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

Status Model::forward(const UBatch& ub, const KvView& kv, float* logits, kernels::ThreadPool& pool) {
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

  // RoPE angles of every token, once per forward for each base (global, sliding-window).
  const int64_t n_half = hp.n_rot / 2;
  const bool any_swa = std::find(hp.layer_is_swa.begin(), hp.layer_is_swa.end(), true) != hp.layer_is_swa.end();
  for (int b = 0; b < (any_swa ? 2 : 1); ++b) {
    grow(rope_cos_[b], T * n_half);
    grow(rope_sin_[b], T * n_half);
    const float base = b == 1 ? hp.rope_base_swa : hp.rope_base;
    if (b == 1 && base == hp.rope_base) {
      std::copy(rope_cos_[0].begin(), rope_cos_[0].begin() + T * n_half, rope_cos_[1].begin());
      std::copy(rope_sin_[0].begin(), rope_sin_[0].begin() + T * n_half, rope_sin_[1].begin());
      continue;
    }
    per_token([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        kernels::rope_angles(ub.pos[t], hp.n_rot, base, hp.rope_freq_scale,
                             rope_cos_[b].data() + t * n_half, rope_sin_[b].data() + t * n_half);
    });
  }

  kernels::AttentionShape shape;
  shape.n_head = hp.n_head;
  shape.n_kv_head = hp.n_kv_head;
  shape.head_dim = hd;
  shape.scale = hp.attn_scale;
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
    // Per token (independent rows and KV cells, so split over the pool for long ubatches).
    auto qk_rows = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* qt = q_.data() + t * Eq;
        float* kt = k_.data() + t * Ek;
        if (hp.qk_norm) {
          for (int h = 0; h < hp.n_head; ++h) kernels::rms_norm(qt + h * hd, L.q_norm, qt + h * hd, hd, hp.rms_eps);
          for (int h = 0; h < hp.n_kv_head; ++h) kernels::rms_norm(kt + h * hd, L.k_norm, kt + h * hd, hd, hp.rms_eps);
        }
        kernels::rope_apply(qt, hp.n_head, hd, hp.n_rot, rcos + t * n_half, rsin + t * n_half, hp.rope_style);
        kernels::rope_apply(kt, hp.n_kv_head, hd, hp.n_rot, rcos + t * n_half, rsin + t * n_half, hp.rope_style);
        // Place this token's K and V in its cell before any attention of this layer reads it.
        const int64_t cell = kv.write_cell[t];
        kernels::quantize_row(kv.type, kt, static_cast<uint8_t*>(kvl.k) + cell * kvl.k_row_bytes, Ek);
        kernels::quantize_row(kv.type, v_.data() + t * Ev, static_cast<uint8_t*>(kvl.v) + cell * kvl.v_row_bytes, Ev);
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

  // Logits only for the rows asked for.
  int64_t n_out = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (!ub.output || !ub.output[t]) continue;
    kernels::rms_norm(x + t * E, output_norm_, xn + n_out * E, E, hp.rms_eps);
    ++n_out;
  }
  if (n_out > 0) kernels::matmul(output_, xn, n_out, logits, pool);
  return Status::ok();
}

}  // namespace ubatch
