// Gated DeltaNet (Yang, Kautz, Hatamizadeh: "Gated Delta Networks: Improving Mamba2 with Delta
// Rule", ICLR 2025) as Qwen3.5 stores it (layout: ../shared/reference/README.md, hybrid section):
//   qkv = attn_qkv · x                         rows q (key heads × d) | k (key heads × d) | v (value heads × d)
//   qkv = silu(causal depthwise conv(qkv))     ssm_conv1d [channels, conv_kernel], state = previous inputs
//   q, k = L2-normalised per head; q × 1/√d
//   β = sigmoid(ssm_beta · x);  g = softplus(ssm_alpha · x + ssm_dt.bias) · ssm_a   (ssm_a = −exp(A_log))
//   per value head h (key head h mod key heads), S [d, d]:  S ← e^g S;  S ← S + k (β (v − Sᵀk))ᵀ;  o = Sᵀq
//   y = ssm_out · (rms(o_h) · ssm_norm · silu(z_h) per head),  z = attn_gate · x
// The state of a sequence, per layer: the convolution's last conv_kernel − 1 inputs, then every
// value head's S. Tokens of a sequence run in position order, the delta rule either step by step
// (kernels::delta_rule_tokens) or chunk-wise (kernels::delta_rule_chunks: S read and written once
// per 16 tokens). The two agree to float rounding, not bit for bit, so the choice is a function
// of the sequence alone: a chunk — positions [16j, 16j + 16) of one sequence — runs chunk-wise
// exactly when all its rows are in this ubatch, all are flagged chunkable (StateView: the
// scheduler flags a request's prompt positions but the last, so prefill of generated tokens after
// preemption, speculative verification and decode never are) and none but its last asks for a
// checkpoint. The scheduler cuts prompt pieces, and the context its ubatches, only at chunk
// boundaries within the flagged positions (sched/step_planner.cpp, context/context.cpp), and a
// prefix snapshot is reused only by a sequence that flags the same positions below it
// (kv/kv_cache.h), so a sequence's output does not depend on the batch it runs in, on how its
// prompt was split, on prefix hits, n > 1 or speculation.
#include <cmath>
#include <cstring>
#include <utility>
#include <fmt/format.h>
#include <vector>

#include "kernels/ops.h"
#include "kernels/recurrent.h"
#include "model/block_kinds.h"

namespace ubatch {

namespace {

// Splits a sequence's rows into segments, each (first row, whether it runs chunk-wise) up to the
// next: a chunk runs chunk-wise when it starts at a position that is a multiple of
// kernels::kDeltaChunk and all its rows are here, flagged chunkable, and free of checkpoints but
// at the last (see the header comment); consecutive chunks and consecutive single rows merge.
void split_segments(const StateView& st, const int32_t* pos, const std::vector<int32_t>& rows,
                    std::vector<std::pair<int, bool>>& out) {
  constexpr int c = kernels::kDeltaChunk;
  const bool may_chunk = st.chunk == c && !st.chunkable.empty();
  auto whole_chunk_at = [&](size_t r) {
    if (!may_chunk || pos[rows[r]] % c != 0 || r + c > rows.size()) return false;
    for (size_t j = 0; j < c; ++j) {
      const auto t = static_cast<size_t>(rows[r + j]);
      if (!st.chunkable[t] || (j + 1 < c && !st.checkpoint.empty() && st.checkpoint[t])) return false;
    }
    return true;
  };
  out.clear();
  for (size_t r = 0; r < rows.size();) {
    const bool chunked = whole_chunk_at(r);
    if (out.empty() || out.back().second != chunked) out.emplace_back(static_cast<int>(r), chunked);
    r += chunked ? c : 1;
  }
}

class DeltaNetBlock final : public Block {
 public:
  std::string_view kind() const override { return "gated_deltanet"; }

  Status bind(Binder& b, const HParams& hp, int il) override {
    auto name = [il](const char* n, const char* k = "weight") { return fmt::format("blk.{}.{}.{}", il, n, k); };
    const int64_t E = hp.n_embd, C = hp.ssm_conv_channels(), Hv = hp.ssm_time_step_rank;
    Status s;
    if (!(s = b.matrix(name("attn_qkv"), E, C, w_qkv_))) return s;
    if (!(s = b.matrix(name("attn_gate"), E, hp.ssm_inner_size, w_z_))) return s;
    if (!(s = b.matrix(name("ssm_beta"), E, Hv, w_beta_))) return s;
    if (!(s = b.matrix(name("ssm_alpha"), E, Hv, w_alpha_))) return s;
    if (!(s = b.conv_taps(name("ssm_conv1d"), hp.ssm_conv_kernel, C, conv_))) return s;
    if (!(s = b.vector(name("ssm_dt", "bias"), Hv, dt_bias_))) return s;
    if (!(s = b.vector(fmt::format("blk.{}.ssm_a", il), Hv, a_))) return s;
    if (!(s = b.vector(name("ssm_norm"), hp.ssm_state_size, norm_))) return s;
    return b.matrix(name("ssm_out"), hp.ssm_inner_size, E, w_out_);
  }

  void matrices(std::vector<kernels::WeightView*>& out) override {
    out.insert(out.end(), {&w_qkv_, &w_z_, &w_beta_, &w_alpha_, &w_out_});
  }

  void forward(ForwardPass& fp, int il) override {
    const HParams& hp = fp.hp;
    const StateView& st = fp.state;
    const int64_t T = fp.T, C = hp.ssm_conv_channels(), I = hp.ssm_inner_size;
    const int Hk = hp.ssm_group_count, Hv = hp.ssm_time_step_rank, d = hp.ssm_state_size, K = hp.ssm_conv_kernel;
    const int64_t QK = hp.ssm_qk_dim();
    float* qkv = fp.scratch.get(Scratch::kProj0, T * C);   // [T, q | k | v]
    float* z = fp.scratch.get(Scratch::kProj1, T * I);     // [T, value heads × d]
    float* beta = fp.scratch.get(Scratch::kProj2, T * Hv);  // [T, value heads]
    float* alpha = fp.scratch.get(Scratch::kProj3, T * Hv); // [T, value heads]
    float* o = fp.scratch.get(Scratch::kRec0, T * I);       // [T, value heads × d]
    {
      const kernels::WeightView* ws[4] = {&w_qkv_, &w_z_, &w_beta_, &w_alpha_};
      float* ys[4] = {qkv, z, beta, alpha};
      kernels::matmul_multi(ws, ys, 4, fp.xn, T, fp.pool);
    }
    const size_t off = st.layer_offset[static_cast<size_t>(il)];
    const size_t conv_floats = static_cast<size_t>(K - 1) * C;
    // A value head's S [d, d]: d² floats, or d² BF16 values packed two to a float word.
    const bool bf16 = st.type == TensorType::BF16;
    const size_t head_floats = bf16 ? (static_cast<size_t>(d) * d + 1) / 2 : static_cast<size_t>(d) * d;
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(d));
    const int n_seqs = st.n_seqs();

    // Phase 1, per sequence in token order: convolution (with its state), SiLU, L2 norms, and
    // the per-head decay and β. Sequences run in parallel.
    fp.pool.run([&](int ith, int nth) {
      for (int s = ith; s < n_seqs; s += nth) {
        float* conv_state = st.seq_state[static_cast<size_t>(s)] + off;
        for (int32_t t : st.seq_rows[static_cast<size_t>(s)]) {
          float* row = qkv + int64_t{t} * C;
          kernels::conv1d_step(row, conv_state, conv_.data(), row, C, K);
          kernels::silu(row, row, C);
          for (int h = 0; h < Hk; ++h) {
            kernels::l2_normalize(row + int64_t{h} * d, d, hp.rms_eps);
            kernels::l2_normalize(row + QK + int64_t{h} * d, d, hp.rms_eps);
            kernels::scale(row + int64_t{h} * d, q_scale, row + int64_t{h} * d, d);
          }
          for (int h = 0; h < Hv; ++h) {
            float& b = beta[int64_t{t} * Hv + h];
            float& g = alpha[int64_t{t} * Hv + h];
            b = kernels::sigmoid(b);
            g = std::exp(kernels::softplus(g + dt_bias_[h]) * a_[h]);  // the decay e^g
          }
          if (!st.checkpoint.empty() && st.checkpoint[static_cast<size_t>(t)])
            std::memcpy(st.checkpoint[static_cast<size_t>(t)] + off, conv_state, conv_floats * sizeof(float));
        }
      }
    });
    // Each sequence's rows as segments in order: (first row, chunk-wise) until the next one.
    std::vector<std::vector<std::pair<int, bool>>> segments(static_cast<size_t>(n_seqs));
    for (size_t s = 0; s < segments.size(); ++s) split_segments(st, fp.ub.pos, st.seq_rows[s], segments[s]);
    // Phase 2, per (sequence, value head): the delta rule over the sequence's tokens in order.
    const int64_t n_tasks = int64_t{n_seqs} * Hv;
    // Where value head h's state [d, d] of this layer starts in a sequence's state (or checkpoint).
    auto head_offset = [&](int64_t h) { return off + conv_floats + static_cast<size_t>(h) * head_floats; };
    fp.pool.run([&](int ith, int nth) {
      std::vector<float*> snaps;
      std::vector<uint16_t*> snaps_bf16;
      auto bf16_at = [](float* p) { return reinterpret_cast<uint16_t*>(p); };
      for (int64_t task = ith; task < n_tasks; task += nth) {
        const int s = static_cast<int>(task / Hv), h = static_cast<int>(task % Hv), kh = h % Hk;
        const std::vector<int32_t>& rows = st.seq_rows[static_cast<size_t>(s)];
        kernels::DeltaRuleArgs a;
        const size_t s_off = head_offset(h);
        if (bf16) a.S_bf16 = bf16_at(st.seq_state[static_cast<size_t>(s)] + s_off);
        else a.S = st.seq_state[static_cast<size_t>(s)] + s_off;
        a.d_k = d;
        a.d_v = d;
        a.n_tokens = static_cast<int>(rows.size());
        a.rows = rows.data();
        a.q = qkv + int64_t{kh} * d;
        a.k = qkv + QK + int64_t{kh} * d;
        a.qk_stride = C;
        a.v = qkv + 2 * QK + int64_t{h} * d;
        a.v_stride = C;
        a.decay = alpha + h;
        a.beta = beta + h;
        a.gate_stride = Hv;
        a.o = o + int64_t{h} * d;
        a.o_stride = I;
        if (const int64_t next = task + nth; next < n_tasks)  // this thread's next task
          a.prefetch = st.seq_state[static_cast<size_t>(next / Hv)] + head_offset(next % Hv);
        if (!st.checkpoint.empty()) {
          snaps.assign(rows.size(), nullptr);
          bool any = false;
          for (size_t r = 0; r < rows.size(); ++r)
            if (float* cp = st.checkpoint[static_cast<size_t>(rows[r])]) {
              snaps[r] = cp + s_off;
              any = true;
            }
          if (any && bf16) {
            snaps_bf16.assign(rows.size(), nullptr);
            for (size_t r = 0; r < rows.size(); ++r) snaps_bf16[r] = snaps[r] ? bf16_at(snaps[r]) : nullptr;
            a.snapshots_bf16 = snaps_bf16.data();
          } else if (any) {
            a.snapshots = snaps.data();
          }
        }
        const std::vector<std::pair<int, bool>>& seg = segments[static_cast<size_t>(s)];
        for (size_t g = 0; g < seg.size(); ++g) {
          const int r0 = seg[g].first, r1 = g + 1 < seg.size() ? seg[g + 1].first : static_cast<int>(rows.size());
          kernels::DeltaRuleArgs part = a;
          part.n_tokens = r1 - r0;
          part.rows = rows.data() + r0;
          if (a.snapshots) part.snapshots = a.snapshots + r0;
          if (a.snapshots_bf16) part.snapshots_bf16 = a.snapshots_bf16 + r0;
          if (seg[g].second) kernels::delta_rule_chunks(part);
          else kernels::delta_rule_tokens(part);
        }
      }
    });
    // Gated RMSNorm per head, then the output projection.
    fp.per_token([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int h = 0; h < Hv; ++h) {
          float* oh = o + t * I + int64_t{h} * d;
          float* zh = z + t * I + int64_t{h} * d;
          kernels::rms_norm(oh, norm_, oh, d, hp.rms_eps);
          kernels::silu(zh, zh, d);
          kernels::mul(oh, zh, oh, d);
        }
    });
    kernels::matmul(w_out_, o, T, fp.out, fp.pool);
  }

 private:
  kernels::WeightView w_qkv_;    // [conv channels, n_embd]
  kernels::WeightView w_z_;      // [inner, n_embd] (attn_gate)
  kernels::WeightView w_beta_;   // [value heads, n_embd]
  kernels::WeightView w_alpha_;  // [value heads, n_embd]
  kernels::WeightView w_out_;    // [n_embd, inner]
  std::vector<float> conv_;         // [conv_kernel, conv channels] (tap-major copy of ssm_conv1d)
  const float* dt_bias_ = nullptr;  // [value heads]
  const float* a_ = nullptr;        // [value heads] −exp(A_log)
  const float* norm_ = nullptr;     // [state_size] shared by the heads
};

}  // namespace

std::unique_ptr<Block> make_deltanet_block() { return std::make_unique<DeltaNetBlock>(); }

}  // namespace ubatch
