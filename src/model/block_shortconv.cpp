// LFM2's gated short convolution (Liquid AI 2025; layout: ../shared/reference/README.md,
// hybrid section):
//   B | C | x = shortconv.in_proj · x      (n_embd rows each, in that order)
//   y = shortconv.out_proj · (C ⊙ conv(B ⊙ x))
// conv: causal depthwise, shortconv.conv [n_embd, l_cache], the last tap on the current token;
// the state of a sequence is its previous l_cache − 1 values of B ⊙ x. Tokens of a sequence
// run one at a time in position order.
#include <cstring>
#include <fmt/format.h>
#include <vector>

#include "kernels/ops.h"
#include "kernels/recurrent.h"
#include "model/block_kinds.h"

namespace ubatch {

namespace {

class ShortConvBlock final : public Block {
 public:
  std::string_view kind() const override { return "shortconv"; }

  Status bind(Binder& b, const HParams& hp, int il) override {
    auto name = [il](const char* n) { return fmt::format("blk.{}.shortconv.{}.weight", il, n); };
    const int64_t E = hp.n_embd;
    Status s;
    if (!(s = b.matrix(name("in_proj"), E, 3 * E, w_in_))) return s;
    if (!(s = b.conv_taps(name("conv"), hp.shortconv_l_cache, E, conv_))) return s;
    return b.matrix(name("out_proj"), E, E, w_out_);
  }

  void matrices(std::vector<kernels::WeightView*>& out) override { out.insert(out.end(), {&w_in_, &w_out_}); }

  void forward(ForwardPass& fp, int il) override {
    const HParams& hp = fp.hp;
    const StateView& st = fp.state;
    const int64_t T = fp.T, E = hp.n_embd;
    const int L = hp.shortconv_l_cache;
    float* bcx = fp.scratch.get(Scratch::kProj0, T * 3 * E);  // [T, B | C | x]
    float* y = fp.scratch.get(Scratch::kRec0, T * E);         // [T, n_embd]
    kernels::matmul(w_in_, fp.xn, T, bcx, fp.pool);
    const size_t off = st.layer_offset[static_cast<size_t>(il)];
    const size_t state_floats = static_cast<size_t>(L - 1) * E;
    const int n_seqs = st.n_seqs();
    fp.pool.run([&](int ith, int nth) {
      for (int s = ith; s < n_seqs; s += nth) {
        float* state = st.seq_state[static_cast<size_t>(s)] + off;
        for (int32_t t : st.seq_rows[static_cast<size_t>(s)]) {
          float* row = bcx + int64_t{t} * 3 * E;
          float* yt = y + int64_t{t} * E;
          kernels::mul(row, row + 2 * E, yt, E);  // B ⊙ x
          kernels::conv1d_step(yt, state, conv_.data(), yt, E, L);
          kernels::mul(row + E, yt, yt, E);       // C ⊙ conv
          if (!st.checkpoint.empty() && st.checkpoint[static_cast<size_t>(t)])
            std::memcpy(st.checkpoint[static_cast<size_t>(t)] + off, state, state_floats * sizeof(float));
        }
      }
    });
    kernels::matmul(w_out_, y, T, fp.out, fp.pool);
  }

 private:
  kernels::WeightView w_in_;   // [3 n_embd, n_embd]
  kernels::WeightView w_out_;  // [n_embd, n_embd]
  std::vector<float> conv_;  // [l_cache, n_embd] (tap-major copy of shortconv.conv)
};

}  // namespace

std::unique_ptr<Block> make_shortconv_block() { return std::make_unique<ShortConvBlock>(); }

}  // namespace ubatch
