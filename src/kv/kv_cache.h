// The memory manager of a context: the paged KV cache of the attention layers — fixed-size blocks
// of token cells holding K and V for every attention layer, per-sequence block tables, reference
// counts, copy-on-write, and a prefix cache — and, for models with recurrent layers (Gated
// DeltaNet, short convolution), one recurrent-state slot per sequence, checkpoints and prefix
// snapshots of it. The bookkeeping (block tables, reference counts, prefix hashes, checkpoints,
// snapshots) is this class's; K/V live in per-layer cell arrays and state in reference-counted
// float buffers (StateBuf) that the bookkeeping only points at.
//
// Recurrent state: a sequence's state is the fold of all its tokens, so it cannot be cut back by
// dropping cells. What can be returned to is kept as copies:
//   - checkpoints: the state after a token the caller flagged at placement (place()'s
//     `checkpoint`; the scheduler flags the rows of a speculative verification and the
//     second-to-last prompt token of a request with n > 1 samples). seq_rm / seq_rollback to
//     position p restore the checkpoint after p − 1 and fail (cache unchanged) without one.
//     A placement drops the sequence's checkpoints before its first new position − 1.
//   - prefix snapshots: the state at a full block's end, keyed like the block (its chained hash),
//     taken at the last block boundary each placement reaches in a sequence (at most one per
//     snapshot_interval tokens in decode) within a byte budget, evicted least-recently-used. A
//     prefix is reused only up to a block whose snapshot exists.
//   - seq_cp copies the state (and shares the checkpoints); seq_shift is refused.
//   - chunk-wise rows: place() may flag rows `chunkable`, which a model computes in
//     position-aligned chunks of state_chunk tokens (model/block_deltanet.cpp) — the same state
//     to float rounding, not bit for bit. A snapshot records how far below its block boundary
//     the sequence's flagged rows reached (the rows it was computed from chunk-wise), and
//     seq_reuse_prefix takes it only for a sequence that would flag the same ones, so that a
//     prefix hit gives the bits a fresh prefill gives. Callers flag a prefix of each sequence's
//     positions ([0, n) for some n of the sequence's own).
//
// Storage per layer: K and V arrays of [n_blocks * block_size, n_embd_{k,v}] elements of
// `type` (F16 by default; F32 or Q8_0). Cell c = block * block_size + slot. A sequence's
// tokens occupy cells in position order: logical index i lives in
// blocks[i / block_size] * block_size + i % block_size (a block table, as in vLLM's
// PagedAttention, Kwon et al. 2023).
//
// Sharing: seq_cp shares every block of the source (reference counts); the first write into
// a shared, partly filled last block copies it first (copy-on-write). Prefix cache: each full
// block of a sequence that started at position 0 is keyed by a hash chained over its token ids
// (xxHash64 of the block's ids seeded with the previous block's key); a new sequence reuses
// the longest cached prefix of its prompt (seq_reuse_prefix). Blocks nobody references stay
// cached and are evicted least-recently-used when the free list runs out.
//
// Not thread-safe: owned by the engine thread. Errors are return values, never aborts:
// running out of blocks leaves the cache unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/tensor_type.h"
#include "kernels/ops.h"
#include "model/ubatch.h"

namespace ubatch {

struct KvCacheConfig {
  int32_t n_layer = 0;
  int32_t n_embd_k = 0;     // K elements per token per layer (n_kv_head * head_dim)
  int32_t n_embd_v = 0;     // V elements per token per layer
  int32_t n_cells = 0;      // capacity in tokens (rounded up to whole blocks)
  int32_t block_size = 16;  // cells per block
  TensorType type = TensorType::F16;
  // For seq_shift: keys are re-rotated by the position delta with the model's RoPE.
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;
  int32_t n_rot = 0;
  kernels::RopeStyle rope_style = kernels::RopeStyle::Normal;
  std::vector<float> rope_base;  // [n_layer]
  float rope_freq_scale = 1.0f;
  std::vector<float> rope_freq_scale_layer;  // [n_layer] overrides rope_freq_scale when given
  std::vector<uint8_t> rope_layer;           // [n_layer] 0: the layer has no RoPE (NoPE); empty: all rotate
  std::vector<float> rope_freq_factors;      // [n_rot / 2] frequency divisors (rope_freqs, LongRoPE); empty: none
  // Recurrent state: floats each model layer keeps per sequence ([n_model_layers], 0 for
  // attention layers); empty: no recurrent layers.
  std::vector<size_t> state_layer_floats;
  // How the layers store their recurrent matrices (F32 or BF16), passed to the forward pass in
  // StateView::type; this class only counts words.
  TensorType state_type = TensorType::F32;
  uint64_t snapshot_budget_bytes = uint64_t{256} << 20;  // prefix snapshots kept at most
  int32_t snapshot_interval = 256;  // tokens between a sequence's snapshots in decode steps
  // Rows flagged chunkable at placement are computed in position-aligned chunks of this many
  // tokens (0: none are; the context sets it, a divisor of block_size).
  int32_t state_chunk = 0;
};

struct KvStats {
  int32_t n_blocks = 0;         // total
  int32_t n_blocks_used = 0;    // referenced by at least one sequence
  int32_t n_blocks_cached = 0;  // unreferenced, kept for prefix reuse (evictable)
  int32_t n_blocks_free = 0;    // never used or evicted
  int32_t n_sequences = 0;
  uint64_t prefix_queries = 0;  // prompt tokens looked up (seq_reuse_prefix)
  uint64_t prefix_hits = 0;     // prompt tokens served from cached blocks
  uint64_t evictions = 0;       // cached blocks evicted
  // Recurrent state (zero for models without it).
  uint64_t state_bytes = 0;       // live per-sequence states
  uint64_t checkpoint_bytes = 0;  // checkpoints held by sequences
  uint64_t snapshot_bytes = 0;    // prefix snapshots
  int32_t n_snapshots = 0;
  uint64_t snapshot_evictions = 0;
  double hit_rate() const { return prefix_queries ? double(prefix_hits) / double(prefix_queries) : 0.0; }
};

class KvCache {
 public:
  // Allocates storage; errors for zero sizes or an unsupported type (row sizes must be a
  // multiple of the type's block size).
  static Result<std::unique_ptr<KvCache>> create(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return cfg_; }
  int32_t n_blocks() const { return n_blocks_; }
  int32_t block_size() const { return cfg_.block_size; }
  int64_t n_cells() const { return int64_t{n_blocks_} * cfg_.block_size; }
  // Bytes of K and V storage.
  size_t storage_bytes() const;
  // Whether sequences carry recurrent state, and its size per sequence in floats.
  bool has_state() const { return state_floats_ > 0; }
  size_t state_floats() const { return state_floats_; }
  // Blocks a new allocation could take now (free + evictable cached).
  int32_t n_blocks_available() const;

  // ---- sequences (created on first use; seq_id >= 0) ----
  bool seq_exists(int32_t seq_id) const;
  int32_t seq_n_tokens(int32_t seq_id) const;  // 0 for unknown sequences
  int32_t seq_pos_max(int32_t seq_id) const;   // -1 when empty
  int32_t seq_n_blocks(int32_t seq_id) const;
  std::vector<int32_t> seq_ids() const;

  // Removes the cells of seq_id with pos in [p0, p1) (p1 < 0: to the end). Only a suffix
  // of the sequence (or all of it) can be removed: returns false, changing nothing, when
  // cells outside the range follow it, or when the sequence has recurrent state and no
  // checkpoint after p0 − 1.
  bool seq_rm(int32_t seq_id, int32_t p0, int32_t p1);
  // Rollback of a speculative tail: removes the cells of seq_id with pos >= p0, like
  // seq_rm(seq_id, p0, -1), except that the blocks it frees do not stay in the prefix cache
  // (their keys are dropped): they held draft tokens that verification rejected, a token
  // history no sequence has. A kept, partly filled last block loses its key as with seq_rm
  // (or is copied on the next write while shared). Returns the number of blocks freed, or
  // -1 (nothing changed) when the sequence has recurrent state and no checkpoint after p0 − 1.
  int32_t seq_rollback(int32_t seq_id, int32_t p0);
  // Makes dst a copy of src sharing all its blocks (dst's previous content is removed).
  void seq_cp(int32_t src, int32_t dst);
  // Removes every sequence but seq_id.
  void seq_keep(int32_t seq_id);
  // Adds delta to the positions of seq_id's cells with pos in [p0, p1) (p1 < 0: to the end)
  // and re-rotates their keys; shared blocks are copied first. Positions stay increasing
  // (false, nothing changed, if the shift would make them collide or go negative, or if the
  // sequences carry recurrent state, which no position shift can re-derive).
  bool seq_shift(int32_t seq_id, int32_t p0, int32_t p1, int32_t delta);
  // The RoPE frequency divisors seq_shift rotates with ([n_rot / 2]; empty: none), set by the
  // context once it knows its per-sequence size (LongRoPE chooses its factors by it).
  void set_rope_freq_factors(std::vector<float> factors) { cfg_.rope_freq_factors = std::move(factors); }
  void clear();

  // ---- prefix cache ----
  // For an empty seq_id about to receive `tokens` from position 0: attaches the longest
  // run of cached full blocks matching tokens[0 .. max_tokens) and returns how many tokens
  // that covers (a multiple of block_size, possibly 0). Counts queries and hits. With recurrent
  // state: only up to the last matched block with a snapshot, whose state the sequence takes.
  // n_chunkable: the sequence will flag its positions [0, n_chunkable) chunkable (place()); a
  // snapshot is taken only if it was computed with the same of its rows chunk-wise.
  int32_t seq_reuse_prefix(int32_t seq_id, const int32_t* tokens, int32_t n_tokens, int32_t max_tokens,
                           int32_t n_chunkable = 0);
  // KvCacheConfig::state_chunk (0: no row is computed chunk-wise).
  int32_t state_chunk() const { return cfg_.state_chunk; }

  // ---- placement (place before compute) ----
  // Number of new blocks appending n tokens to seq_id would take (including a copy of a
  // shared partly filled last block).
  int32_t blocks_needed(int32_t seq_id, int32_t n) const;

  // Appends one cell per token to its sequence (tokens of a sequence in position order) and
  // fills `view` for the forward pass. Positions must continue each sequence
  // (pos == seq_pos_max + 1). Errors, with the cache unchanged: bad seq_id/pos, or not
  // enough blocks (message starts with "kv: out of blocks").
  // The arrays in the view stay valid until the next call that changes the cache.
  // With recurrent state, also fills `state` (model/ubatch.h): every sequence's state slot
  // (zeros for a new one, which must start at pos 0), its rows, and where the forward pass
  // copies the state after the rows flagged in `checkpoint` ([n_tokens] or nullptr) and
  // after the block boundaries that take a prefix snapshot, and the rows flagged in
  // `chunkable` ([n_tokens] or nullptr; see the header comment) when state_chunk > 0.
  Status place(const int32_t* token, const int32_t* pos, const int32_t* seq_id, int32_t n_tokens,
               KvView& view, StateView* state = nullptr, const uint8_t* checkpoint = nullptr,
               const uint8_t* chunkable = nullptr);

  // Copies the K/V rows (every layer) of cell `from` to cell `to`.
  void copy_cell(int32_t from, int32_t to);

  KvStats stats() const;
  // Checks reference counts and the free/cached/used partition; aborts on a broken
  // invariant (tests and debug builds call it after every operation).
  void check_invariants() const;

 private:
  using StateBuf = std::shared_ptr<float[]>;
  struct Sequence {
    std::vector<int32_t> blocks;  // block table
    std::vector<int32_t> cells;   // [n_tokens] cell of each logical index (expanded table)
    std::vector<uint64_t> hashes; // chained key of each full block (when hashable)
    bool hashable = true;         // started at position 0 and never shifted
    StateBuf state;               // [state_floats] recurrent state after the last cell (has_state())
    std::vector<std::pair<int32_t, StateBuf>> checkpoints;  // (pos, state after the token at pos)
    int32_t last_snapshot = 0;    // tokens covered by the sequence's latest prefix snapshot
    int32_t chunkable_end = 0;    // its positions [0, chunkable_end) were placed flagged chunkable
  };
  struct Snapshot {
    StateBuf state;
    std::list<uint64_t>::iterator lru;
    uint64_t placement = 0;  // the place() call that took it (its buffer is written by that forward pass)
    int32_t chunked = 0;     // its state came from positions [0, chunked) in chunks (chunked_below)
  };
  // The positions below `boundary` (a block boundary) that ran in chunks for a sequence that
  // flags [0, n_chunkable): the whole chunks of [0, min(boundary, n_chunkable)).
  int32_t chunked_below(int32_t boundary, int32_t n_chunkable) const;
  explicit KvCache(const KvCacheConfig& config);

  int32_t alloc_block();                // takes a free block, else evicts the LRU cached one
  void release_block(int32_t block);    // ref--, to cached (if keyed) or free list at 0
  void retain_block(int32_t block);     // ref++ (revives a cached block)
  void copy_block_cells(int32_t from_block, int32_t to_block, int32_t n_cells);
  void drop_key(int32_t block);
  void remove_seq(int32_t seq_id);
  void seal_full_block(Sequence& s, int32_t block_index);
  static uint64_t chain_hash(uint64_t prev, const int32_t* tokens, int32_t n);
  StateBuf new_state(bool zero);
  const StateBuf* find_checkpoint(const Sequence& s, int32_t pos) const;
  bool restore_before(Sequence& s, int32_t p0);  // the state after p0 − 1, or false
  void place_state(const int32_t* pos, const int32_t* seq_id, int32_t n_tokens, StateView& view,
                   const uint8_t* checkpoint, const uint8_t* chunkable);
  // Evicts least-recently-used snapshots until keep_free more bytes fit the budget; never one
  // taken by the current placement (its forward pass has yet to write it). False: no room.
  bool trim_snapshots(uint64_t keep_free);

  KvCacheConfig cfg_;
  int32_t n_blocks_ = 0;
  // Cell storage of one layer: zero-filled by calloc, so the pages of a large cache are only
  // made resident as cells are first written (memory grows with use, not with n_cells).
  struct Storage {
    struct Free {
      void operator()(uint8_t* p) const { std::free(p); }
    };
    std::unique_ptr<uint8_t, Free> bytes;
    uint8_t* data() const { return bytes.get(); }
  };
  std::vector<Storage> k_, v_;  // [n_layer][n_cells * row_bytes]
  size_t k_row_bytes_ = 0, v_row_bytes_ = 0;
  std::vector<int32_t> cell_pos_;    // [n_cells]
  std::vector<int32_t> cell_token_;  // [n_cells]
  std::vector<int32_t> ref_;         // [n_blocks]
  std::vector<uint64_t> key_;        // [n_blocks] prefix key (valid when has_key_)
  std::vector<uint8_t> has_key_;     // [n_blocks]
  std::vector<int32_t> free_;        // free blocks (stack)
  std::list<int32_t> lru_;           // cached (ref 0, keyed) blocks, least recent first
  std::vector<std::list<int32_t>::iterator> lru_pos_;  // [n_blocks]
  std::vector<uint8_t> in_lru_;      // [n_blocks]
  std::unordered_map<uint64_t, int32_t> by_key_;
  std::unordered_map<int32_t, Sequence> seqs_;
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0, evictions_ = 0;

  // Recurrent state bookkeeping.
  size_t state_floats_ = 0;
  std::vector<size_t> state_offset_;  // [n_model_layers]
  std::unordered_map<uint64_t, Snapshot> snapshots_;
  std::list<uint64_t> snapshot_lru_;  // least recent first
  uint64_t snapshot_evictions_ = 0;
  uint64_t placements_ = 0;  // place() calls with state, numbering the snapshots' placement

  // Placement scratch for the view.
  std::vector<int32_t> write_cell_, n_visible_;
  std::vector<const int32_t*> cells_ptr_;
};

}  // namespace ubatch
