// A model instance ready to run: the model, its paged KV cache, the thread pool, and
// decode(batch) — validation, splitting into ubatches of n_ubatch tokens, KV placement
// before compute, and the forward passes, in order.
//
// Owned and called by one thread (the engine thread); not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "context/batch.h"
#include "kernels/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace ubatch {

struct ContextParams {
  int32_t n_ctx = 4096;             // KV capacity in tokens, all sequences together
  float kv_cache_fraction = 0.0f;   // > 0: size the cache to this share of available memory instead
  int32_t n_batch = 2048;           // most tokens one decode() accepts
  int32_t n_ubatch = 512;           // most tokens per forward pass
  int32_t n_threads = 0;            // 0: the machine's default (kernels/thread_pool.h, common/cpu_topology.h)
  std::vector<int> cpus;            // with n_threads > 0: pin the threads to these CPUs (empty: anywhere)
  TensorType kv_type = TensorType::F16;
  int32_t kv_block_size = 16;
  // Most positions one sequence may reach (0: min(KV cells, the model's training context)).
  // Only LongRoPE models read it (short or long factors, as the format's reference chooses).
  int32_t n_ctx_seq = 0;
  // Models with recurrent layers: bytes of recurrent-state snapshots kept for prefix reuse
  // (KvCache's prefix snapshots; least-recently-used beyond it).
  uint64_t state_snapshot_bytes = uint64_t{256} << 20;
  // Models with recurrent layers: storage of the recurrent matrices (Gated DeltaNet's state),
  // F32 or BF16 (half the bytes per sequence and snapshot; kernels/recurrent.h says how it rounds).
  TensorType state_type = TensorType::F32;
};

// Return codes of decode(), as the field's C APIs use them: 0 ok, 1 no KV room for the
// batch (recoverable: free something and retry; the cache is unchanged), negative: the batch
// is invalid (message says why; the cache is unchanged).
enum class DecodeStatus : int { Ok = 0, NoKvSpace = 1, InvalidBatch = -1 };

struct DecodeResult {
  DecodeStatus status = DecodeStatus::Ok;
  std::string message;
  bool ok() const { return status == DecodeStatus::Ok; }
};

struct ContextPerf {
  uint64_t n_decode = 0;      // decode() calls that ran
  uint64_t n_ubatches = 0;    // forward passes
  uint64_t n_tokens = 0;      // tokens through the model
  double t_forward_ms = 0.0;  // wall time in forward passes
};

class Context {
 public:
  // Errors: bad parameters, or a cache that cannot hold a single block.
  static Result<std::unique_ptr<Context>> create(std::shared_ptr<Model> model, const ContextParams& params);

  DecodeResult decode(const Batch& batch);

  // Logits of the batch row i of the last decode (which must have had logits[i] set):
  // [n_vocab] floats; nullptr otherwise.
  const float* logits(int32_t i) const;
  int32_t n_vocab() const { return model_->hparams().n_vocab; }
  // Final hidden state of the batch row i of the last decode (which must have had embd[i]
  // set): [n_embd] floats, the residual stream after the last layer through the output norm
  // (before the output projection), not pooled or normalised further; nullptr otherwise.
  // A row's vector depends only on its sequence's tokens, not on the other rows of the batch.
  const float* embedding(int32_t i) const;
  int32_t n_embd() const { return model_->hparams().n_embd; }

  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  KvCache& kv() { return *kv_; }
  const KvCache& kv() const { return *kv_; }
  kernels::ThreadPool& pool() { return *pool_; }
  const ContextParams& params() const { return params_; }
  // Most positions one sequence may reach (ContextParams::n_ctx_seq resolved).
  int32_t n_ctx_seq() const;
  const ContextPerf& perf() const { return perf_; }

 private:
  Context() = default;
  DecodeResult validate(const Batch& batch) const;
  // Rows of the ubatch that starts at batch row `start`: n_ubatch (or the rest), cut earlier
  // where it would split a chunk of chunkable rows (Batch::chunkable) between two ubatches.
  int32_t ubatch_length(const Batch& batch, int32_t start) const;

  std::shared_ptr<Model> model_;
  ContextParams params_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<kernels::ThreadPool> pool_;
  std::vector<float> logits_;        // [n_outputs, n_vocab]
  std::vector<int32_t> output_row_;  // [n_tokens of last batch] row in logits_ or -1
  std::vector<float> embd_;          // [n_embd_rows, n_embd]
  std::vector<int32_t> embd_row_;    // [n_tokens of last batch] row in embd_ or -1
  StateView state_view_;             // recurrent state of the ubatch being run
  ContextPerf perf_;
};

// Bytes of memory currently available to the process (MemAvailable), 0 if unknown.
uint64_t available_memory_bytes();

// Bytes one token's K and V rows take in the cache, all layers together, when stored as
// kv_type (e.g. Gemma 3 270M, F16: 18 layers x (256 + 256) x 2 = 18,432). 0 if kv_type is
// not a tensor type.
uint64_t kv_bytes_per_token(const HParams& hp, TensorType kv_type);

// Bytes of recurrent state one sequence keeps, all recurrent layers together, with the recurrent
// matrices stored as state_type (F32 or BF16; 0 for a model without recurrent layers).
uint64_t state_bytes_per_sequence(const HParams& hp, TensorType state_type = TensorType::F32);

// Share of available memory an automatically sized KV cache may take at most.
constexpr double kAutoKvMemoryShare = 0.25;

// KV capacity (cells = tokens) when the user gives none: a full context of
// min(4096, n_ctx_train) tokens (4096 when n_ctx_train <= 0) for each of `sequences`
// parallel sequences, cut to what memory_share of available_bytes holds at bytes_per_token
// (no cut when either is 0), and kept within [256, 2^24].
int32_t auto_kv_cells(int64_t sequences, int32_t n_ctx_train, uint64_t bytes_per_token,
                      uint64_t available_bytes, double memory_share = kAutoKvMemoryShare);

}  // namespace ubatch
