// A decoder-only model loaded from a GGUF file, and its forward pass over a ubatch.
//
// The forward pass is a list of layers, each built from named blocks (model/block.h) chosen by
// data — the file's layer pattern (HParams::layer_mixer):
//   x = embed(tokens) [× sqrt(n_embd)]
//   per layer: x = x + [post_norm](mixer(rms(x) · attn_norm))      attention, gated attention,
//                                                                   Gated DeltaNet, short conv
//              x = x + [post_norm](ffn(rms(x) · ffn_norm))          dense gated FFN
//   logits = [softcap](W_out · norm(x)), only for rows with UBatch::output set.
// Attention layers keep K/V in the paged KV cache (KvView); recurrent layers keep a fixed-size
// state per sequence (StateView), both prepared by the memory manager (kv/kv_cache.h).
//
// Quantized matrices are repacked at load into the kernels' panel layout
// (kernels/packed_weight.h, about the file's size) and the file pages they came from are
// released; norms and other vectors stay in the file mapping. The Model keeps the gguf::File
// alive. Loading is strict: every tensor of the file is bound to a use, or load() fails naming it.
// Thread-compatibility: one thread at a time calls forward(); kernels use the thread pool.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "kernels/packed_weight.h"
#include "kernels/thread_pool.h"
#include "model/block.h"
#include "model/hparams.h"
#include "model/ubatch.h"

namespace ubatch {

// One layer: its mixer and feed-forward blocks and the norms around them.
struct Layer {
  const float* attn_norm = nullptr;        // [n_embd] the mixer's input norm
  std::unique_ptr<Block> mixer;
  const float* post_mixer_norm = nullptr;  // [n_embd] (post_norms)
  const float* ffn_norm = nullptr;         // [n_embd] the FFN's input norm (HParams::ffn_norm_name)
  std::unique_ptr<Block> ffn;
  const float* post_ffn_norm = nullptr;    // [n_embd] (post_norms)
};

class Model {
 public:
  // Loads hyper-parameters and binds every tensor, checking names, shapes and types.
  // Errors: unknown architecture, missing tensor (named), wrong shape, unsupported type.
  static Result<std::unique_ptr<Model>> load(std::shared_ptr<const gguf::File> file);
  // Opens `path` and loads it.
  static Result<std::unique_ptr<Model>> load_file(const std::string& path);
  // Reads the hyper-parameters and binds and checks every tensor as load() does, without
  // repacking the matrices (for `ubatch info`: fast, no memory). Same errors as load();
  // forward() must not be called on the result.
  static Result<std::unique_ptr<Model>> inspect(std::shared_ptr<const gguf::File> file);

  const HParams& hparams() const { return hp_; }
  const gguf::File& file() const { return *file_; }
  // Bytes of weights (tensor data) as stored in the file.
  size_t weight_bytes() const { return weight_bytes_; }
  // Bytes of the repacked copies of the matrices (kernels/packed_weight.h), made at load;
  // the file pages they came from are released (see load()).
  size_t packed_bytes() const { return packed_bytes_; }
  // Weights of at least this many bytes (in the file) are packed into transparent huge pages
  // (common/large_buffer.h): for them a decode step's page walks matter; below it the
  // allocation's compaction cost would not pay (and the tests' many small loads stay cheap).
  static constexpr size_t kHugePageMinBytes = size_t{1} << 30;
  bool huge_pages() const { return weight_bytes_ >= kHugePageMinBytes; }
  // Bytes a decode step streams from memory: every matrix (packed where it is), the norms,
  // and not the token-embedding table unless it doubles as the output matrix.
  size_t streamed_bytes() const { return streamed_bytes_; }
  // What of the architecture this file uses, in words, for `ubatch info` and the load log
  // (e.g. "Q/K/V biases", "RoPE frequency factors (rope_freqs)", "LongRoPE", "NoPE layers 3, 7").
  const std::vector<std::string>& features() const { return features_; }
  // The RoPE frequency divisors [n_rot / 2] for a context of n_ctx_seq positions per sequence
  // (0: the training context), or nullptr: rope_freqs when the file has it, else LongRoPE's
  // long factors when n_ctx_seq > n_ctx_orig, else its short ones.
  const float* rope_factors(int32_t n_ctx_seq) const;
  // Tokens per chunk of the layers that can run a sequence's rows chunk-wise (Gated DeltaNet:
  // kernels::kDeltaChunk; StateView::chunkable), 0 when no layer can.
  int32_t state_chunk() const;

  // Runs the ubatch. Every token's K/V row is written into its KV cell before attention of
  // the same layer; recurrent layers update each sequence's state in `state` token by token (and
  // copy it to the checkpoints asked for). A model with recurrent layers needs a state for every
  // sequence of the ubatch. logits: [n_outputs, n_vocab] f32 for the rows with output set, in
  // ubatch order. embd: [n_embd_rows, n_embd] f32, the final normalised hidden state of the
  // rows with UBatch::embd set, in ubatch order (may be nullptr when no row has it). Each
  // row is computed from its own residual stream only, so it does not depend on the other
  // rows of the ubatch. Errors (nothing written): token id out of range, n_tokens <= 0.
  Status forward(const UBatch& ub, const KvView& kv, const StateView& state, float* logits,
                 kernels::ThreadPool& pool, float* embd = nullptr);

 private:
  Model() = default;
  static Result<std::unique_ptr<Model>> load_impl(std::shared_ptr<const gguf::File> file, bool pack);
  Status bind_weights();
  Status pack_weights();
  Status convert_mxfp4(kernels::WeightView& v, size_t& streamed);
  void describe_features();

  std::shared_ptr<const gguf::File> file_;
  HParams hp_;
  kernels::WeightView tok_embd_;  // [n_vocab, n_embd]
  const float* output_norm_ = nullptr;
  kernels::WeightView output_;    // [n_vocab, n_embd] (tok_embd_ when tied)
  std::vector<Layer> layers_;
  const float* rope_freqs_ = nullptr;          // [n_rot / 2] Llama 3.1+ frequency divisors
  const float* rope_factors_short_ = nullptr;  // [n_rot / 2] LongRoPE, context <= n_ctx_orig
  const float* rope_factors_long_ = nullptr;   // [n_rot / 2] LongRoPE, longer contexts
  std::vector<std::string> features_;
  size_t weight_bytes_ = 0;
  size_t packed_bytes_ = 0;
  size_t streamed_bytes_ = 0;
  std::vector<std::vector<float>> converted_;  // MXFP4 weights kept as F32 values (convert_mxfp4)
  std::vector<std::unique_ptr<kernels::PackedWeight>> packed_;  // owners of the views' packed

  // Scratch reused across calls, sized for the largest ubatch seen.
  std::vector<float> x_, xn_, tmp_;
  std::vector<float> rope_cos_[2], rope_sin_[2];  // [T, n_rot / 2] per base (global, SWA)
  Scratch scratch_;
};

}  // namespace ubatch
