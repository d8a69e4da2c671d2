// The mixture-of-experts feed-forward block (Shazeer et al. 2017, "Outrageously Large Neural
// Networks"; as Qwen3-MoE and gpt-oss run it):
//
//   l = W_router · x (+ b_router)                                   [n_expert] router logits
//   SoftmaxTopK (qwen3moe): p = softmax(l); S = the k largest p; w_e = p_e / Σ_{S} p
//   TopKSoftmax (gpt-oss):  S = the k largest l; w = softmax(l restricted to S)
//   out = Σ_{e ∈ S} w_e · FFN_e(x)
//   FFN_e(x) = W_down[e] · act(W_gate[e] · x (+ b), W_up[e] · x (+ b)) (+ b_down[e])
//   act = silu(g) · u (SwiGLU), or gpt-oss's clamped SwiGLU:
//         g' = min(g, 7), u' = clamp(u, −7, 7), act = g' · sigmoid(1.702 · g') · (u' + 1)
//   Shared expert (qwen35moe): out += sigmoid(w_sg · x) · W_down_sh · (silu(W_gate_sh · x) ⊙ W_up_sh · x)
//
// k = expert_used_count, experts in 3-D tensors ffn_{gate,up,down}_exps (ne = {n_in, n_out,
// n_expert}), width expert_feed_forward_length (qwen35moe: gate and up may be one
// ffn_gate_up_exps of 2·n_ff_exp rows per expert, gate first); the shared expert in
// ffn_{gate,up,down}_shexp (2-D, width expert_shared_feed_forward_length) with its gate
// ffn_gate_inp_shexp ({n_embd}: one logit per token), run over every token of the ubatch as one
// dense FFN.
//
// Determinism: ties among router values are broken by the lower expert id, so a token's
// choice depends only on its own row. Execution is grouped by expert: the tokens of the ubatch
// routed to expert e are gathered into one matrix and multiplied by e's weights once (each
// touched expert's weights are read once per ubatch, not once per token); each result row goes
// back to its (token, slot). A token's output is then summed over its slots in its own top-k
// order, so no row depends on which other tokens shared an expert (the matmul kernels are
// batch-invariant per row, kernels/matmul.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>

#include "kernels/ops.h"
#include "model/block_kinds.h"

namespace ubatch {

namespace {

constexpr float kMoeSwigluAlpha = 1.702f;  // gpt-oss clamped SwiGLU
constexpr float kMoeSwigluLimit = 7.0f;

class MoeFfnBlock final : public Block {
 public:
  std::string_view kind() const override { return "moe"; }

  Status bind(Binder& b, const HParams& hp, int il) override {
    auto name = [il](const char* n, const char* k = "weight") { return fmt::format("blk.{}.{}.{}", il, n, k); };
    const int64_t E = hp.n_embd, F = hp.n_ff_exp, X = hp.n_expert;
    Status s;
    if (hp.moe_fused_gate_up && b.has(name("ffn_gate_up_exps"))) {
      // One tensor of 2·n_ff_exp rows per expert, gate first: each half bound (and packed) alone.
      std::vector<kernels::WeightView> gate_up;
      if (!(s = b.experts(name("ffn_gate_up_exps"), E, 2 * F, X, gate_up))) return s;
      gate_.resize(static_cast<size_t>(X));
      up_.resize(static_cast<size_t>(X));
      for (size_t e = 0; e < gate_up.size(); ++e) {
        gate_[e] = row_slice(gate_up[e], 0, F);
        up_[e] = row_slice(gate_up[e], F, F);
      }
    } else {
      if (!(s = b.experts(name("ffn_gate_exps"), E, F, X, gate_))) return s;
      if (!(s = b.experts(name("ffn_up_exps"), E, F, X, up_))) return s;
    }
    if (!(s = b.experts(name("ffn_down_exps"), F, E, X, down_))) return s;
    if (!(s = b.matrix(name("ffn_gate_inp"), E, X, router_))) return s;
    if (router_.type != TensorType::F32 && router_.type != TensorType::F16 && router_.type != TensorType::BF16)
      return Status::error(fmt::format("model: tensor '{}' (the router) has type {}; a quantized router is not "
                                       "supported (the format keeps it in float)",
                                       name("ffn_gate_inp"), tensor_type_name(router_.type)));
    if (hp.moe_biases) {
      if (!(s = b.vector(name("ffn_gate_inp", "bias"), X, router_bias_))) return s;
      if (!(s = b.f32_matrix(name("ffn_gate_exps", "bias"), F, X, gate_bias_))) return s;
      if (!(s = b.f32_matrix(name("ffn_up_exps", "bias"), F, X, up_bias_))) return s;
      if (!(s = b.f32_matrix(name("ffn_down_exps", "bias"), E, X, down_bias_))) return s;
    }
    if (hp.moe_shared_expert) {
      const int64_t S = hp.n_ff_shexp;
      if (!(s = b.matrix(name("ffn_gate_shexp"), E, S, sh_gate_))) return s;
      if (!(s = b.matrix(name("ffn_up_shexp"), E, S, sh_up_))) return s;
      if (!(s = b.matrix(name("ffn_down_shexp"), S, E, sh_down_))) return s;
      // One logit per token: stored {n_embd} (or {n_embd, 1}); kept in float like the router.
      if (!(s = b.matrix(name("ffn_gate_inp_shexp"), E, 1, sh_gate_inp_))) return s;
      if (sh_gate_inp_.type != TensorType::F32 && sh_gate_inp_.type != TensorType::F16 &&
          sh_gate_inp_.type != TensorType::BF16)
        return Status::error(fmt::format("model: tensor '{}' (the shared expert's gate) has type {}; a quantized gate "
                                         "is not supported (the format keeps it in float)",
                                         name("ffn_gate_inp_shexp"), tensor_type_name(sh_gate_inp_.type)));
    }
    return Status::ok();
  }

  // The experts and the shared expert (the router and the shared expert's gate stay in float and
  // are not repacked).
  void matrices(std::vector<kernels::WeightView*>& out) override {
    for (auto* set : {&gate_, &up_, &down_})
      for (kernels::WeightView& v : *set) out.push_back(&v);
    if (sh_gate_.data) out.insert(out.end(), {&sh_gate_, &sh_up_, &sh_down_});
  }

  void forward(ForwardPass& fp, int /*il*/) override {
    const HParams& hp = fp.hp;
    const int64_t T = fp.T, E = hp.n_embd, F = hp.n_ff_exp, X = hp.n_expert, K = hp.n_expert_used;
    float* logits = fp.scratch.get(Scratch::kProj0, T * X);  // [T, n_expert]
    kernels::matmul(router_, fp.xn, T, logits, fp.pool);

    // Routing, per token: chosen experts and weights in the token's top-k order.
    sel_.resize(static_cast<size_t>(T * K));
    wsel_.resize(static_cast<size_t>(T * K));
    fp.per_token([&](int64_t t0, int64_t t1) {
      std::vector<float> v(static_cast<size_t>(X));
      for (int64_t t = t0; t < t1; ++t) route(hp, logits + t * X, v.data(), &sel_[t * K], &wsel_[t * K]);
    });

    // Groups: for each expert, its (token, slot) rows in ascending token order.
    count_.assign(static_cast<size_t>(X) + 1, 0);
    for (int64_t i = 0; i < T * K; ++i) ++count_[static_cast<size_t>(sel_[i]) + 1];
    for (int64_t e = 0; e < X; ++e) count_[e + 1] += count_[e];
    rows_.resize(static_cast<size_t>(T * K));
    {
      std::vector<int64_t> fill(count_.begin(), count_.end() - 1);
      for (int64_t i = 0; i < T * K; ++i) rows_[static_cast<size_t>(fill[sel_[i]]++)] = i;  // i = t·K + slot
    }

    // Every touched expert at once: rows gathered in group order, then two grouped products
    // (gate/up, down), each one hand-off to the pool for all experts (kernels::matmul_grouped).
    const int64_t R = T * K;
    float* xg = fp.scratch.get(Scratch::kProj1, R * E);  // [R, n_embd] gathered inputs
    float* g = fp.scratch.get(Scratch::kGate, R * F);    // [R, n_ff_exp]
    float* u = fp.scratch.get(Scratch::kUp, R * F);      // [R, n_ff_exp]
    float* yg = fp.scratch.get(Scratch::kProj2, R * E);  // [R, n_embd] per (token, slot), group order
    pos_.resize(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) pos_[static_cast<size_t>(rows_[r])] = r;
    expert_of_.resize(static_cast<size_t>(R));
    items_.clear();
    item_row_.clear();
    for (int64_t e = 0; e < X; ++e) {
      const int64_t r0 = count_[e], n = count_[e + 1] - r0;
      if (n == 0) continue;
      for (int64_t r = r0; r < r0 + n; ++r) expert_of_[static_cast<size_t>(r)] = static_cast<int32_t>(e);
      kernels::MatmulGroupItem it;
      it.n = 2;
      it.ws[0] = &gate_[e];
      it.ws[1] = &up_[e];
      it.ys[0] = g + r0 * F;
      it.ys[1] = u + r0 * F;
      it.x = xg + r0 * E;
      it.n_tokens = n;
      items_.push_back(it);
      item_row_.push_back(r0);
    }
    fp.per_row(R, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) std::memcpy(xg + r * E, fp.xn + (rows_[r] / K) * E, sizeof(float) * E);
    });
    kernels::matmul_grouped(items_.data(), static_cast<int64_t>(items_.size()), fp.pool);
    fp.per_row(R, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) activate(hp, expert_of_[static_cast<size_t>(r)], g + r * F, u + r * F);
    });
    for (size_t i = 0; i < items_.size(); ++i) {
      kernels::MatmulGroupItem& it = items_[i];
      const int64_t r0 = item_row_[i];
      const int64_t e = expert_of_[static_cast<size_t>(r0)];
      it.n = 1;
      it.ws[0] = &down_[e];
      it.ys[0] = yg + r0 * E;
      it.ws[1] = nullptr;
      it.ys[1] = nullptr;
      it.x = g + r0 * F;
    }
    kernels::matmul_grouped(items_.data(), static_cast<int64_t>(items_.size()), fp.pool);
    if (down_bias_) {
      fp.per_row(R, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          kernels::add(yg + r * E, down_bias_ + expert_of_[static_cast<size_t>(r)] * E, yg + r * E, E);
      });
    }

    // The shared expert over every token: sh [T, n_embd] and its gate logit sg [T].
    float* sh = nullptr;
    float* sg = nullptr;
    if (hp.moe_shared_expert) {
      const int64_t S = hp.n_ff_shexp;
      float* gs = fp.scratch.get(Scratch::kGate, T * S);  // [T, n_ff_shexp]
      float* us = fp.scratch.get(Scratch::kUp, T * S);    // [T, n_ff_shexp]
      sh = fp.scratch.get(Scratch::kAttn, T * E);         // [T, n_embd]
      sg = fp.scratch.get(Scratch::kQ, T);                // [T]
      {
        const kernels::WeightView* ws[2] = {&sh_gate_, &sh_up_};
        float* outs[2] = {gs, us};
        kernels::matmul_multi(ws, outs, 2, fp.xn, T, fp.pool);
      }
      fp.per_token([&](int64_t t0, int64_t t1) {  // as the dense FFN block computes it
        const int64_t n = (t1 - t0) * S;
        kernels::silu(gs + t0 * S, gs + t0 * S, n);
        kernels::mul(gs + t0 * S, us + t0 * S, gs + t0 * S, n);
      });
      kernels::matmul(sh_down_, gs, T, sh, fp.pool);
      kernels::matmul(sh_gate_inp_, fp.xn, T, sg, fp.pool);
    }

    // out[t] = Σ_slot w · y, slots in the token's own order; then + sigmoid(sg[t]) · sh[t].
    fp.per_token([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* o = fp.out + t * E;
        for (int64_t j = 0; j < K; ++j) {
          const float w = wsel_[t * K + j];
          const float* y = yg + pos_[static_cast<size_t>(t * K + j)] * E;
          if (j == 0) {
            for (int64_t i = 0; i < E; ++i) o[i] = w * y[i];
          } else {
            for (int64_t i = 0; i < E; ++i) o[i] += w * y[i];
          }
        }
        if (sh) {
          const float gate = kernels::sigmoid(sg[t]);
          const float* y = sh + t * E;
          for (int64_t i = 0; i < E; ++i) o[i] += gate * y[i];
        }
      }
    });
  }

 private:
  // The k experts and weights of one token from its router logits l [n_expert] (v: scratch).
  void route(const HParams& hp, const float* l, float* v, int32_t* sel, float* w) const {
    const int64_t X = hp.n_expert, K = hp.n_expert_used;
    for (int64_t e = 0; e < X; ++e) v[e] = router_bias_ ? l[e] + router_bias_[e] : l[e];
    if (hp.moe_gating == MoeGating::SoftmaxTopK) kernels::softmax(v, X);
    // Top-k by value, ties to the lower id: selection by repeated scan (k is small).
    for (int64_t j = 0; j < K; ++j) {
      int32_t best = -1;
      for (int64_t e = 0; e < X; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken = taken || sel[i] == e;
        if (taken) continue;
        if (best < 0 || v[e] > v[best]) best = static_cast<int32_t>(e);
      }
      sel[j] = best;
      w[j] = v[best];
    }
    if (hp.moe_gating == MoeGating::SoftmaxTopK) {
      float sum = 0;
      for (int64_t j = 0; j < K; ++j) sum += w[j];
      for (int64_t j = 0; j < K; ++j) w[j] /= sum;
    } else {
      kernels::softmax(w, K);
    }
  }

  // gr = act(gr (+ bias), ur (+ bias)): one row of expert e ([n_ff_exp] each).
  void activate(const HParams& hp, int64_t e, float* gr, float* ur) const {
    const int64_t F = hp.n_ff_exp;
    if (gate_bias_) kernels::add(gr, gate_bias_ + e * F, gr, F);
    if (up_bias_) kernels::add(ur, up_bias_ + e * F, ur, F);
    if (hp.moe_clamped_swiglu) {
      for (int64_t i = 0; i < F; ++i) {
        const float gc = std::min(gr[i], kMoeSwigluLimit);
        const float uc = std::clamp(ur[i], -kMoeSwigluLimit, kMoeSwigluLimit);
        gr[i] = gc * kernels::sigmoid(kMoeSwigluAlpha * gc) * (uc + 1.0f);
      }
    } else {
      kernels::silu(gr, gr, F);
      kernels::mul(gr, ur, gr, F);
    }
  }

  std::vector<kernels::WeightView> gate_, up_, down_;  // [n_expert] × [n_ff_exp, n_embd], …, [n_embd, n_ff_exp]
  kernels::WeightView router_;                         // [n_expert, n_embd], float
  const float* router_bias_ = nullptr;                 // [n_expert] (gpt-oss)
  const float* gate_bias_ = nullptr;                   // [n_expert, n_ff_exp] (gpt-oss)
  const float* up_bias_ = nullptr;                     // [n_expert, n_ff_exp]
  const float* down_bias_ = nullptr;                   // [n_expert, n_embd]
  kernels::WeightView sh_gate_, sh_up_;                // [n_ff_shexp, n_embd] (qwen35moe's shared expert)
  kernels::WeightView sh_down_;                        // [n_embd, n_ff_shexp]
  kernels::WeightView sh_gate_inp_;                    // [1, n_embd], float: the shared expert's gate
  // Per forward: routing and groups (reused).
  std::vector<int32_t> sel_;   // [T, K] chosen experts
  std::vector<float> wsel_;    // [T, K] their weights
  std::vector<int64_t> count_; // [n_expert + 1] group starts in rows_
  std::vector<int64_t> rows_;  // [T·K] (token·K + slot), grouped by expert
  std::vector<int64_t> pos_;   // [T·K] inverse of rows_: the group-order row of (token·K + slot)
  std::vector<int32_t> expert_of_;  // [T·K] the expert of each group-order row
  std::vector<kernels::MatmulGroupItem> items_;  // one per touched expert
  std::vector<int64_t> item_row_;                // [items] its first group-order row
};

}  // namespace

std::unique_ptr<Block> make_moe_ffn() { return std::make_unique<MoeFfnBlock>(); }

}  // namespace ubatch
