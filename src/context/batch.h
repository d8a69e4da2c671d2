// A batch: what one engine step hands to Context::decode — token ids, their positions, the
// sequence(s) each token belongs to, which rows need logits, and which need their final hidden
// state (embeddings).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace ubatch {

struct Batch {
  std::vector<int32_t> token;                 // [n_tokens] ids
  std::vector<int32_t> pos;                   // [n_tokens] position in each of its sequences
  std::vector<std::vector<int32_t>> seq_ids;  // [n_tokens] one or more seq_ids (the first computes; the others get a copy of its K/V)
  std::vector<uint8_t> logits;                // [n_tokens] 1 = return this row's logits
  std::vector<uint8_t> embd;                  // [n_tokens] or empty: 1 = return this row's final hidden state
  // [n_tokens] or empty: 1 = keep the recurrent state as it stands after this row, so that the
  // sequence can be cut back to just after it (KvCache::seq_rm / seq_rollback; models with
  // recurrent layers only, ignored otherwise).
  std::vector<uint8_t> checkpoint;
  // [n_tokens] or empty: 1 = the model may compute this row chunk-wise (models with Gated
  // DeltaNet layers: position-aligned chunks of KvCache::state_chunk() tokens whose rows are all
  // flagged, in one ubatch, with no checkpoint but at the last; ignored otherwise). Chunk-wise
  // and step-by-step results agree to float rounding, not bit for bit: to keep a sequence's
  // output independent of its batch, flag rows as a function of the sequence alone — the
  // scheduler flags its prompt's positions but the last, [0, n_prompt − 1) — and flag a prefix
  // of its positions (KvCache's prefix snapshots record how far it reached).
  std::vector<uint8_t> chunkable;

  int32_t n_tokens() const { return static_cast<int32_t>(token.size()); }
  void add(int32_t id, int32_t p, std::initializer_list<int32_t> seqs, bool want_logits, bool want_embd = false) {
    token.push_back(id);
    pos.push_back(p);
    seq_ids.emplace_back(seqs);
    logits.push_back(want_logits ? 1 : 0);
    if (want_embd && embd.size() + 1 < token.size()) embd.resize(token.size() - 1, 0);
    if (want_embd || !embd.empty()) embd.push_back(want_embd ? 1 : 0);
    if (!checkpoint.empty()) checkpoint.push_back(0);
    if (!chunkable.empty()) chunkable.push_back(0);
  }
  // Flags the last added row as a checkpoint (see `checkpoint`).
  void mark_checkpoint() {
    checkpoint.resize(token.size(), 0);
    if (!checkpoint.empty()) checkpoint.back() = 1;
  }
  // Flags the last added row chunkable (see `chunkable`).
  void mark_chunkable() {
    chunkable.resize(token.size(), 0);
    if (!chunkable.empty()) chunkable.back() = 1;
  }
  void add(int32_t id, int32_t p, int32_t seq, bool want_logits, bool want_embd = false) {
    add(id, p, {seq}, want_logits, want_embd);
  }
  void clear() {
    token.clear();
    pos.clear();
    seq_ids.clear();
    logits.clear();
    embd.clear();
    checkpoint.clear();
    chunkable.clear();
  }
};

}  // namespace ubatch
