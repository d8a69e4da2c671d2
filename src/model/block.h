// The forward pass as a list of layers, each built from named blocks (a mixer — attention, gated
// attention, Gated DeltaNet, short convolution — and a feed-forward block). A block binds its own
// tensors, lists its matrices for repacking, and runs over the ubatch; Model::forward only
// normalises, calls the blocks and adds their outputs to the residual stream. The kind of each
// layer's mixer is data (HParams::layer_mixer, read from the file), and so is the kind of its
// feed-forward block (HParams::ffn_kind: dense or mixture of experts); make_mixer() and
// make_ffn() (blocks.cpp) are the one place that maps a kind to its block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "model/binder.h"
#include "model/hparams.h"
#include "model/ubatch.h"

namespace ubatch {

// Scratch buffers of a forward pass, reused across layers and calls (grown to the largest
// ubatch seen). Blocks take them by slot; a slot's contents do not outlive the block's call.
class Scratch {
 public:
  enum Slot { kQ, kK, kV, kAttn, kGate, kUp, kProj0, kProj1, kProj2, kProj3, kRec0, kRec1, kPerThread, kNumSlots };
  float* get(Slot s, size_t n) {
    std::vector<float>& v = bufs_[s];
    if (v.size() < n) v.resize(n);
    return v.data();
  }

 private:
  std::vector<float> bufs_[kNumSlots];
};

// What a block sees of one forward pass.
struct ForwardPass {
  const HParams& hp;
  const UBatch& ub;
  const KvView& kv;
  const StateView& state;
  kernels::ThreadPool& pool;
  Scratch& scratch;
  int64_t T = 0;               // tokens in the ubatch
  const float* xn = nullptr;   // [T, n_embd] the block's normalised input
  float* out = nullptr;        // [T, n_embd] the block's output (added to the residual by the caller)
  // RoPE angles per token, [T, n_rot / 2], per table (0 global, 1 sliding-window layers).
  const float* rope_cos[2] = {nullptr, nullptr};
  const float* rope_sin[2] = {nullptr, nullptr};

  // Runs fn(t0, t1) over [0, T), split over the pool when the ubatch is long enough to pay for
  // a hand-off. Row results do not depend on the split.
  template <class F>
  void per_token(const F& fn) const {
    per_row(T, fn);
  }
  // The same over any n rows [0, n) (a block's own row list, e.g. the MoE block's gathered
  // (token, expert) rows).
  template <class F>
  void per_row(int64_t n, const F& fn) const {
    if (n < 8 || pool.n_threads() == 1) return fn(int64_t{0}, n);
    pool.run([&](int ith, int nth) {
      int64_t r0, r1;
      kernels::ThreadPool::split(n, ith, nth, r0, r1);
      if (r0 < r1) fn(r0, r1);
    });
  }
};

class Block {
 public:
  virtual ~Block() = default;
  // The block's kind, for `ubatch info` and errors ("attention", "gated_deltanet", …).
  virtual std::string_view kind() const = 0;
  // Binds the block's tensors of layer il (names blk.<il>.*). Errors name the tensor.
  virtual Status bind(Binder& b, const HParams& hp, int il) = 0;
  // The weight matrices the model may repack (kernels/packed_weight.h).
  virtual void matrices(std::vector<kernels::WeightView*>& out) = 0;
  // Reads fp.xn, writes fp.out, for layer il.
  virtual void forward(ForwardPass& fp, int il) = 0;
};

// The block for a mixer kind, and for a feed-forward kind (blocks.cpp).
std::unique_ptr<Block> make_mixer(MixerKind kind);
std::unique_ptr<Block> make_ffn(FfnKind kind);
std::unique_ptr<Block> make_dense_ffn();

}  // namespace ubatch
