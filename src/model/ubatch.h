// What one forward pass consumes: a ubatch of tokens with positions and sequence ids, and
// where each token's keys and values live in the KV cache.
#pragma once

#include <cstdint>
#include <vector>

#include "common/tensor_type.h"

namespace ubatch {

// A physical micro-batch (at most n_ubatch tokens). Arrays are [n_tokens].
struct UBatch {
  int32_t n_tokens = 0;
  const int32_t* token = nullptr;   // token ids, each in [0, n_vocab)
  const int32_t* pos = nullptr;     // position of each token in its sequence (RoPE index)
  const uint8_t* output = nullptr;  // 1 where the caller wants this row's logits
  // 1 where the caller wants this row's final hidden state: the residual stream after the
  // last layer, through the output norm (the vector the output projection would read).
  // nullptr: none.
  const uint8_t* embd = nullptr;
  // Most positions one sequence of the caller's context may reach (0: the model's training
  // context). Only LongRoPE reads it: more than the original context selects its long factors,
  // as the format's reference chooses by its per-sequence context size.
  int32_t n_ctx_seq = 0;
};

// One layer's K and V storage: [n_cells, n_embd_{k,v}_gqa] elements of KvView::type,
// rows row_bytes apart. Cell c's row starts at k + c * k_row_bytes.
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  size_t k_row_bytes = 0;
  size_t v_row_bytes = 0;
};

// Where the ubatch's tokens write their K/V and which cells each token attends to, prepared
// by the KV cache before the forward pass (place before compute). For token t:
//   write_cell[t]                 the cell its K and V go to;
//   cells[t][0 .. n_cells[t])     the cells of its sequence it may see (causal mask applied:
//                                 positions <= pos[t]), in increasing position order,
//                                 including its own cell and those of earlier tokens of the
//                                 same sequence in this ubatch;
//   cell_pos[c]                   the position stored in cell c (the forward pass applies the
//                                 sliding-window mask with it: visible iff pos[t] - cell_pos < window).
struct KvView {
  TensorType type = TensorType::F16;
  std::vector<KvLayerView> layers;   // [n_layer]
  const int32_t* write_cell = nullptr;
  const int32_t* const* cells = nullptr;
  const int32_t* n_cells = nullptr;
  const int32_t* cell_pos = nullptr;
};

}  // namespace ubatch

namespace ubatch {

// The recurrent state of the ubatch's sequences, prepared by the memory manager (kv/kv_cache.h)
// beside the KvView, for models with recurrent layers (Gated DeltaNet, short convolution); empty
// (n_seqs 0) otherwise. A sequence's state is one float array holding every recurrent layer's
// part at layer_offset[il]; the forward pass reads and updates it in place, token by token in
// position order.
//   seq_state[s]          the state of the ubatch's s-th sequence ([state_floats] floats)
//   seq_rows[s]           its rows in the ubatch, in position order
//   checkpoint[t]         nullptr, or where to copy the whole state as it stands after row t
//                         ([state_floats] floats): a snapshot the manager restores to return to
//                         that token (prefix cache, rollback of rejected drafts); empty: none
//   chunk                 > 0: rows flagged in `chunkable` may be computed in position-aligned
//                         chunks of this many tokens (0: every row step by step)
//   chunkable[t]          1: row t is one the caller allows in a chunk (a position of its
//                         sequence's prompt, flagged as a function of the sequence alone); empty: none
//   type                  storage of the recurrent matrices (Gated DeltaNet's S): F32, or BF16
//                         packed two to a float word (HParams::state_floats); convolution
//                         states are F32 either way
struct StateView {
  size_t state_floats = 0;
  TensorType type = TensorType::F32;
  std::vector<size_t> layer_offset;  // [n_layer] floats into a sequence's state (recurrent layers)
  std::vector<float*> seq_state;
  std::vector<std::vector<int32_t>> seq_rows;
  std::vector<float*> checkpoint;    // [n_tokens] or empty
  int32_t chunk = 0;
  std::vector<uint8_t> chunkable;    // [n_tokens] or empty
  int32_t n_seqs() const { return static_cast<int32_t>(seq_state.size()); }
};

}  // namespace ubatch
