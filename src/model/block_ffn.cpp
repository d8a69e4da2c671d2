// The dense gated feed-forward block: out = W_down · (act(W_gate · x) ⊙ (W_up · x)), act SiLU
// (SwiGLU, Shazeer 2020) or GELU with the tanh approximation (GeGLU; Gemma); gate and up may be
// one fused `ffn_up` of 2·n_ff rows, gate first (Phi-3).
#include <fmt/format.h>

#include "kernels/ops.h"
#include "model/block.h"

namespace ubatch {

namespace {

class DenseFfnBlock final : public Block {
 public:
  std::string_view kind() const override { return "dense_ffn"; }

  Status bind(Binder& b, const HParams& hp, int il) override {
    auto name = [il](const char* n) { return fmt::format("blk.{}.{}.weight", il, n); };
    const int64_t E = hp.n_embd;
    Status s;
    if (hp.fused_gate_up) {
      kernels::WeightView gate_up;
      if (!(s = b.matrix(name("ffn_up"), E, 2 * int64_t{hp.n_ff}, gate_up))) return s;
      w_gate_ = row_slice(gate_up, 0, hp.n_ff);
      w_up_ = row_slice(gate_up, hp.n_ff, hp.n_ff);
    } else {
      if (!(s = b.matrix(name("ffn_gate"), E, hp.n_ff, w_gate_))) return s;
      if (!(s = b.matrix(name("ffn_up"), E, hp.n_ff, w_up_))) return s;
    }
    return b.matrix(name("ffn_down"), hp.n_ff, E, w_down_);
  }

  void matrices(std::vector<kernels::WeightView*>& out) override {
    out.insert(out.end(), {&w_gate_, &w_up_, &w_down_});
  }

  void forward(ForwardPass& fp, int /*il*/) override {
    const HParams& hp = fp.hp;
    const int64_t T = fp.T, F = hp.n_ff;
    float* gate = fp.scratch.get(Scratch::kGate, T * F);  // [T, n_ff]
    float* up = fp.scratch.get(Scratch::kUp, T * F);      // [T, n_ff]
    {
      const kernels::WeightView* ws[2] = {&w_gate_, &w_up_};
      float* ys[2] = {gate, up};
      kernels::matmul_multi(ws, ys, 2, fp.xn, T, fp.pool);
    }
    fp.per_token([&](int64_t t0, int64_t t1) {
      float* g = gate + t0 * F;
      const int64_t nf = (t1 - t0) * F;
      if (hp.ffn_act == FfnActivation::GeluTanh) kernels::gelu_tanh(g, g, nf);
      else kernels::silu(g, g, nf);
      kernels::mul(g, up + t0 * F, g, nf);
    });
    kernels::matmul(w_down_, gate, T, fp.out, fp.pool);
  }

 private:
  kernels::WeightView w_gate_, w_up_, w_down_;  // [n_ff, n_embd] ×2, [n_embd, n_ff]
};

}  // namespace

std::unique_ptr<Block> make_dense_ffn() { return std::make_unique<DenseFfnBlock>(); }

}  // namespace ubatch
