// Softmax attention over the layer's KV cache (Vaswani et al. 2017; grouped-query heads,
// Ainslie et al. 2023), with the variants the dense architectures need, and Qwen3.5's gated
// attention (an output gate per head, fused into attn_q; Qwen Team 2025), and gpt-oss's
// attention sinks (one learned logit per head in the softmax; kernels/attention.h).
#include <algorithm>
#include <fmt/format.h>

#include "kernels/attention.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "kernels/recurrent.h"
#include "model/block_kinds.h"

namespace ubatch {

namespace {

class AttentionBlock final : public Block {
 public:
  explicit AttentionBlock(bool gated) : gated_(gated) {}
  std::string_view kind() const override { return gated_ ? "gated_attention" : "attention"; }

  Status bind(Binder& b, const HParams& hp, int il) override {
    auto name = [il](const char* n, const char* k = "weight") { return fmt::format("blk.{}.{}.{}", il, n, k); };
    const int64_t E = hp.n_embd, Eq = hp.n_embd_q(), Ek = hp.n_embd_k_gqa(), Ev = hp.n_embd_v_gqa();
    Status s;
    if (hp.fused_qkv) {
      kernels::WeightView qkv;
      if (!(s = b.matrix(name("attn_qkv"), E, Eq + Ek + Ev, qkv))) return s;
      wq_ = row_slice(qkv, 0, Eq);
      wk_ = row_slice(qkv, Eq, Ek);
      wv_ = row_slice(qkv, Eq + Ek, Ev);
    } else {
      // Gated: per head h, rows [Q_h | gate_h] (2 × head size each head).
      if (!(s = b.matrix(name("attn_q"), E, gated_ ? 2 * Eq : Eq, wq_))) return s;
      if (!(s = b.matrix(name("attn_k"), E, Ek, wk_))) return s;
      if (!(s = b.matrix(name("attn_v"), E, Ev, wv_))) return s;
      if (!gated_) {
        if (!(s = b.optional_vector(name("attn_q", "bias"), Eq, bq_))) return s;
        if (!(s = b.optional_vector(name("attn_k", "bias"), Ek, bk_))) return s;
        if (!(s = b.optional_vector(name("attn_v", "bias"), Ev, bv_))) return s;
      }
    }
    if (!(s = b.matrix(name("attn_output"), Eq, E, wo_))) return s;
    if (!(s = b.optional_vector(name("attn_output", "bias"), E, bo_))) return s;
    if (hp.attn_sinks)
      if (!(s = b.vector(name("attn_sinks"), hp.n_head, sinks_))) return s;
    if (hp.qk_norm) {
      if (!(s = b.vector(name("attn_q_norm"), hp.head_dim_k, q_norm_))) return s;
      if (!(s = b.vector(name("attn_k_norm"), hp.head_dim_k, k_norm_))) return s;
    }
    return Status::ok();
  }

  void matrices(std::vector<kernels::WeightView*>& out) override { out.insert(out.end(), {&wq_, &wk_, &wv_, &wo_}); }

  bool has_qkv_bias() const { return bq_ != nullptr; }

  void forward(ForwardPass& fp, int il) override {
    const HParams& hp = fp.hp;
    const UBatch& ub = fp.ub;
    const KvView& kv = fp.kv;
    kernels::ThreadPool& pool = fp.pool;
    const int64_t T = fp.T, Eq = hp.n_embd_q(), Ek = hp.n_embd_k_gqa(), Ev = hp.n_embd_v_gqa();
    const int hd = hp.head_dim_k;
    const int64_t n_half = hp.n_rot / 2;
    const KvLayerView& kvl = kv.layers[static_cast<size_t>(hp.kv_layer[il])];

    float* q = fp.scratch.get(Scratch::kQ, T * Eq);        // [T, n_head, head_dim]
    float* k = fp.scratch.get(Scratch::kK, T * Ek);        // [T, n_kv_head, head_dim]
    float* v = fp.scratch.get(Scratch::kV, T * Ev);        // [T, n_kv_head, head_dim]
    float* attn = fp.scratch.get(Scratch::kAttn, T * Eq);  // [T, n_head, head_dim]
    float* qg = gated_ ? fp.scratch.get(Scratch::kProj0, T * 2 * Eq) : q;  // [T, n_head, 2, head_dim]
    float* gate = gated_ ? fp.scratch.get(Scratch::kProj1, T * Eq) : nullptr;  // [T, n_head, head_dim]
    int32_t max_cells = 1;
    for (int64_t t = 0; t < T; ++t) max_cells = std::max(max_cells, kv.n_cells[t]);
    float* attn_scratch = fp.scratch.get(Scratch::kPerThread, static_cast<size_t>(pool.n_threads()) * max_cells);

    {
      const kernels::WeightView* ws[3] = {&wq_, &wk_, &wv_};
      float* ys[3] = {qg, k, v};
      kernels::matmul_multi(ws, ys, 3, fp.xn, T, pool);  // one hand-off for the three
    }
    const int table = hp.layer_is_swa[il] ? 1 : 0;
    const float* rcos = fp.rope_cos[table];
    const float* rsin = fp.rope_sin[table];
    const bool use_rope = hp.layer_use_rope[il];
    // Per token (independent rows and KV cells, so split over the pool for long ubatches).
    auto qk_rows = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* qt = q + t * Eq;
        float* kt = k + t * Ek;
        float* vt = v + t * Ev;
        if (gated_) {  // split [Q_h | gate_h] per head
          const float* src = qg + t * 2 * Eq;
          for (int h = 0; h < hp.n_head; ++h) {
            std::copy(src + 2 * h * hd, src + 2 * h * hd + hd, qt + h * hd);
            std::copy(src + 2 * h * hd + hd, src + 2 * (h + 1) * hd, gate + t * Eq + h * hd);
          }
        }
        if (bq_) kernels::add(qt, bq_, qt, Eq);
        if (bk_) kernels::add(kt, bk_, kt, Ek);
        if (bv_) kernels::add(vt, bv_, vt, Ev);
        if (hp.qk_norm) {
          for (int h = 0; h < hp.n_head; ++h) kernels::rms_norm(qt + h * hd, q_norm_, qt + h * hd, hd, hp.rms_eps);
          for (int h = 0; h < hp.n_kv_head; ++h) kernels::rms_norm(kt + h * hd, k_norm_, kt + h * hd, hd, hp.rms_eps);
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

    kernels::AttentionShape shape;
    shape.n_head = hp.n_head;
    shape.n_kv_head = hp.n_kv_head;
    shape.head_dim = hd;
    shape.scale = hp.attn_scale;
    shape.softcap = hp.attn_softcap;
    shape.kv_type = kv.type;
    shape.k_row_bytes = kvl.k_row_bytes;
    shape.v_row_bytes = kvl.v_row_bytes;
    shape.sinks = sinks_;
    const bool swa = hp.layer_is_swa[il] && hp.sliding_window > 0;
    // Tasks: (token, several query heads of one KV head) — the heads of a task read each K/V
    // row once — as many heads of the group per task as still leave four tasks per thread (down
    // to one head per task). A head's result does not depend on which heads share its pass.
    // bench/bench_attention.cpp (32 heads on 8 KV heads, 4,096 cells, one sequence, 2 threads):
    // one head per task 48.7-49.8 ms per 32-layer step, four 28.7-30.4 (docs/BENCHMARKS.md,
    // "Grouped heads in one pass for few sequences").
    const int heads_per_task = kernels::attention_heads_per_task(hp.n_head, hp.n_kv_head, T, pool.n_threads());
    const int n_head_tasks = hp.n_head / heads_per_task;
    const int64_t n_tasks = T * n_head_tasks;
    pool.run([&](int ith, int nth) {
      // Tasks dealt round-robin: a causal prefill's later tokens see more cells, so contiguous
      // ranges would leave the first threads idle while the last ones work.
      float* scratch = attn_scratch + static_cast<size_t>(ith) * max_cells;
      for (int64_t task = ith; task < n_tasks; task += nth) {
        const int64_t t = task / n_head_tasks;
        const int h = static_cast<int>(task % n_head_tasks) * heads_per_task;
        const int32_t* cells = kv.cells[t];
        int32_t n = kv.n_cells[t], first = 0;
        if (swa) {  // visible iff pos - cell_pos < window; cells are in position order
          while (first < n && ub.pos[t] - kv.cell_pos[cells[first]] >= hp.sliding_window) ++first;
        }
        kernels::attention(shape, q + t * Eq, kvl.k, kvl.v, cells + first, n - first, attn + t * Eq, scratch, h,
                           h + heads_per_task);
      }
    });
    if (gated_) {
      fp.per_token([&](int64_t t0, int64_t t1) {
        for (int64_t i = t0 * Eq; i < t1 * Eq; ++i) attn[i] *= kernels::sigmoid(gate[i]);
      });
    }
    kernels::matmul(wo_, attn, T, fp.out, pool);
    if (bo_) {
      const int64_t E = hp.n_embd;
      fp.per_token([&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) kernels::add(fp.out + t * E, bo_, fp.out + t * E, E);
      });
    }
  }

 private:
  bool gated_;
  kernels::WeightView wq_, wk_, wv_, wo_;  // [n_embd_q (×2 gated), n_embd], [n_embd_k_gqa, n_embd], …, [n_embd, n_embd_q]
  const float* bq_ = nullptr;  // [n_embd_q] (Qwen2)
  const float* bk_ = nullptr;  // [n_embd_k_gqa]
  const float* bv_ = nullptr;  // [n_embd_v_gqa]
  const float* bo_ = nullptr;  // [n_embd]
  const float* q_norm_ = nullptr;  // [head_dim] (qk_norm)
  const float* k_norm_ = nullptr;  // [head_dim] (qk_norm)
  const float* sinks_ = nullptr;   // [n_head] attention sink logits (gpt-oss)
};

}  // namespace

std::unique_ptr<Block> make_attention_block(bool gated) { return std::make_unique<AttentionBlock>(gated); }

}  // namespace ubatch
