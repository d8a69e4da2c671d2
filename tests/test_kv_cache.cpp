// Paged KV cache: placement, reference counts, copy-on-write, removal, shifting, the prefix
// cache with LRU eviction, and accounting (no block leaks after any mix of operations).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/ops.h"
#include "kv/kv_cache.h"

namespace ubatch {
namespace {

KvCacheConfig small_config(int32_t n_cells, int32_t block_size = 4, TensorType type = TensorType::F32) {
  KvCacheConfig c;
  c.n_layer = 2;
  c.n_embd_k = 64;
  c.n_embd_v = 64;
  c.n_cells = n_cells;
  c.block_size = block_size;
  c.type = type;
  c.n_kv_head = 2;
  c.head_dim = 32;
  c.n_rot = 32;
  c.rope_style = kernels::RopeStyle::NeoX;
  c.rope_base = {10000.0f, 10000.0f};
  return c;
}

std::unique_ptr<KvCache> make(int32_t n_cells, int32_t block_size = 4) {
  Result<std::unique_ptr<KvCache>> kv = KvCache::create(small_config(n_cells, block_size));
  EXPECT_TRUE(kv.is_ok()) << kv.message();
  return std::move(kv.value());
}

// Appends tokens [first, first + n) of a sequence (token id = pos * 7 + seq).
Status append(KvCache& kv, int32_t seq, int32_t n, KvView* out = nullptr, int32_t id_base = -1) {
  std::vector<int32_t> tok, pos, sid;
  const int32_t p0 = kv.seq_pos_max(seq) + 1;
  for (int32_t i = 0; i < n; ++i) {
    pos.push_back(p0 + i);
    tok.push_back(id_base >= 0 ? id_base + p0 + i : (p0 + i) * 7 + seq);
    sid.push_back(seq);
  }
  KvView view;
  Status s = kv.place(tok.data(), pos.data(), sid.data(), n, out ? *out : view);
  return s;
}

TEST(KvCache, PlacesTokensInBlocksInPositionOrder) {
  auto kv = make(32, 4);
  KvView view;
  ASSERT_TRUE(append(*kv, 0, 6, &view).is_ok());
  EXPECT_EQ(kv->seq_n_tokens(0), 6);
  EXPECT_EQ(kv->seq_pos_max(0), 5);
  EXPECT_EQ(kv->seq_n_blocks(0), 2);
  for (int t = 0; t < 6; ++t) {
    EXPECT_EQ(view.n_cells[t], t + 1);  // causal: sees itself and earlier tokens
    EXPECT_EQ(view.cells[t][t], view.write_cell[t]);
    EXPECT_EQ(view.cell_pos[view.write_cell[t]], t);
  }
  KvStats st = kv->stats();
  EXPECT_EQ(st.n_blocks, 8);
  EXPECT_EQ(st.n_blocks_used, 2);
  kv->check_invariants();
}

TEST(KvCache, RejectsBadPositionsAndLeavesCacheUnchanged) {
  auto kv = make(32, 4);
  ASSERT_TRUE(append(*kv, 0, 3).is_ok());
  int32_t tok = 1, pos = 7, seq = 0;  // expected pos 3
  KvView view;
  Status s = kv->place(&tok, &pos, &seq, 1, view);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("expected 3"), std::string::npos) << s.message();
  seq = -1;
  pos = 0;
  EXPECT_FALSE(kv->place(&tok, &pos, &seq, 1, view).is_ok());
  EXPECT_EQ(kv->seq_n_tokens(0), 3);
  kv->check_invariants();
}

TEST(KvCache, FullCacheIsAnErrorAndChangesNothing) {
  auto kv = make(16, 4);  // 4 blocks
  ASSERT_TRUE(append(*kv, 0, 10).is_ok());  // 3 blocks
  const KvStats before = kv->stats();
  Status s = append(*kv, 1, 5);  // needs 2 blocks, 1 free
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message().rfind("kv: out of blocks", 0), 0u) << s.message();
  EXPECT_FALSE(kv->seq_exists(1));
  EXPECT_EQ(kv->stats().n_blocks_used, before.n_blocks_used);
  EXPECT_TRUE(append(*kv, 1, 4).is_ok());  // exactly one block fits
  kv->check_invariants();
}

TEST(KvCache, SeqCpSharesBlocksAndCopiesOnWrite) {
  auto kv = make(64, 4);
  KvView view;
  ASSERT_TRUE(append(*kv, 0, 6, &view).is_ok());  // blocks: full + half
  // Mark K of cell of token 5 (in the partly filled block) in layer 0.
  const int32_t cell5 = view.write_cell[5];
  float* k0 = static_cast<float*>(view.layers[0].k);
  for (int i = 0; i < 64; ++i) k0[cell5 * 64 + i] = 1000.0f + i;
  kv->seq_cp(0, 1);
  EXPECT_EQ(kv->stats().n_blocks_used, 2);  // shared, not copied
  EXPECT_EQ(kv->seq_n_tokens(1), 6);
  // Appending to seq 1 must copy the shared half block first.
  KvView v1;
  ASSERT_TRUE(append(*kv, 1, 1, &v1).is_ok());
  EXPECT_EQ(kv->stats().n_blocks_used, 3);
  const int32_t new_cell5 = v1.cells[0][5];
  EXPECT_NE(new_cell5, cell5);
  k0 = static_cast<float*>(v1.layers[0].k);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(k0[new_cell5 * 64 + i], 1000.0f + i);
  EXPECT_EQ(v1.cells[0][0], view.cells[5][0]);  // the full block is still shared
  // Seq 0 still sees its own, untouched cells.
  KvView v0;
  ASSERT_TRUE(append(*kv, 0, 1, &v0).is_ok());
  EXPECT_EQ(v0.cells[0][5], cell5);
  kv->check_invariants();
  kv->clear();
  EXPECT_EQ(kv->stats().n_blocks_used, 0);
  kv->check_invariants();
}

TEST(KvCache, SeqRmRemovesSuffixesOnly) {
  auto kv = make(64, 4);
  ASSERT_TRUE(append(*kv, 0, 10).is_ok());
  EXPECT_FALSE(kv->seq_rm(0, 2, 5));  // a hole in the middle: refused
  EXPECT_EQ(kv->seq_n_tokens(0), 10);
  EXPECT_TRUE(kv->seq_rm(0, 5, -1));
  EXPECT_EQ(kv->seq_n_tokens(0), 5);
  EXPECT_EQ(kv->seq_n_blocks(0), 2);
  ASSERT_TRUE(append(*kv, 0, 3).is_ok());  // continues at pos 5
  EXPECT_EQ(kv->seq_pos_max(0), 7);
  EXPECT_TRUE(kv->seq_rm(0, 0, -1));
  EXPECT_FALSE(kv->seq_exists(0));
  EXPECT_EQ(kv->stats().n_blocks_used, 0);
  kv->check_invariants();
}

TEST(KvCache, SeqRollbackFreesSpeculativeBlocksWithoutCachingThem) {
  auto kv = make(64, 4);
  ASSERT_TRUE(append(*kv, 0, 6, nullptr, 100).is_ok());  // tokens 100..105: one full block + 2
  // A verification step appends 7 draft tokens (positions 6..12): blocks 1, 2, 3 fill/seal.
  ASSERT_TRUE(append(*kv, 0, 7, nullptr, 500).is_ok());
  EXPECT_EQ(kv->seq_n_blocks(0), 4);
  // Two drafts accepted (positions 6, 7): the rest rolls back. Block 1 (positions 4..7) stays
  // whole and keyed; blocks 2 and 3 held only rejected guesses and go back to the free list.
  EXPECT_EQ(kv->seq_rollback(0, 8), 2);
  EXPECT_EQ(kv->seq_n_tokens(0), 8);
  EXPECT_EQ(kv->seq_pos_max(0), 7);
  KvStats st = kv->stats();
  EXPECT_EQ(st.n_blocks_used, 2);
  EXPECT_EQ(st.n_blocks_cached, 0);  // not kept for prefix reuse
  kv->check_invariants();
  // A rollback into the middle of a block: the block stays, loses its key, is rewritten.
  EXPECT_EQ(kv->seq_rollback(0, 6), 0);
  EXPECT_EQ(kv->seq_n_tokens(0), 6);
  ASSERT_TRUE(append(*kv, 0, 2, nullptr, 100).is_ok());  // the true tokens 106, 107
  kv->check_invariants();
  // The prefix cache finds the true history only: both full blocks hold tokens 100..107.
  kv->seq_rm(0, 0, -1);
  std::vector<int32_t> truth = {100, 101, 102, 103, 104, 105, 106, 107, 108};
  EXPECT_EQ(kv->seq_reuse_prefix(1, truth.data(), 9, 8), 8);
  std::vector<int32_t> guess = {100, 101, 102, 103, 104, 105, 506, 507, 508};
  EXPECT_EQ(kv->seq_reuse_prefix(2, guess.data(), 9, 8), 4);
  kv->check_invariants();
  // Nothing to remove, or an unknown sequence: no change.
  EXPECT_EQ(kv->seq_rollback(1, 100), 0);
  EXPECT_EQ(kv->seq_rollback(9, 0), 0);
  EXPECT_EQ(kv->seq_n_tokens(1), 8);
}

TEST(KvCache, SeqRollbackOfASharedTailCopiesOnTheNextWrite) {
  auto kv = make(64, 4);
  ASSERT_TRUE(append(*kv, 0, 6, nullptr, 100).is_ok());
  kv->seq_cp(0, 1);  // both share blocks 0 and 1 (1 partly filled)
  ASSERT_TRUE(append(*kv, 1, 5, nullptr, 700).is_ok());  // 1's drafts: copy-on-write of block 1
  EXPECT_EQ(kv->seq_rollback(1, 7), 1);
  EXPECT_EQ(kv->seq_n_tokens(1), 7);
  EXPECT_EQ(kv->seq_n_tokens(0), 6);
  kv->check_invariants();
  kv->seq_rm(1, 0, -1);
  kv->seq_rm(0, 0, -1);
  EXPECT_EQ(kv->stats().n_blocks_used, 0);
  kv->check_invariants();
}

TEST(KvCache, SeqKeepDropsOthers) {
  auto kv = make(64, 4);
  for (int s = 0; s < 4; ++s) ASSERT_TRUE(append(*kv, s, 5).is_ok());
  kv->seq_keep(2);
  EXPECT_EQ(kv->seq_ids(), std::vector<int32_t>{2});
  EXPECT_EQ(kv->stats().n_blocks_used, 2);
  kv->check_invariants();
}

TEST(KvCache, SeqShiftMovesPositionsAndRerotatesKeys) {
  auto kv = make(64, 4);
  KvView view;
  ASSERT_TRUE(append(*kv, 0, 6, &view).is_ok());
  std::vector<float> row(64);
  for (int i = 0; i < 64; ++i) row[i] = std::sin(0.1f * i) + 0.5f;
  float* k0 = static_cast<float*>(view.layers[0].k);
  const int32_t cell = view.write_cell[4];
  std::memcpy(k0 + cell * 64, row.data(), sizeof(float) * 64);
  kv->seq_cp(0, 1);  // shifting seq 0 must not disturb seq 1's shared blocks
  ASSERT_TRUE(kv->seq_shift(0, 3, -1, 10));
  EXPECT_EQ(kv->seq_pos_max(0), 15);
  EXPECT_EQ(kv->seq_pos_max(1), 5);
  EXPECT_FALSE(kv->seq_shift(0, 3, -1, -20));  // would go negative
  std::vector<float> expect = row;
  kernels::rope(expect.data(), 2, 32, 32, 10, 10000.0f, 1.0f, kernels::RopeStyle::NeoX);
  KvView v;
  ASSERT_TRUE(append(*kv, 0, 1, &v).is_ok());
  const int32_t moved = v.cells[0][4];
  const float* kk = static_cast<const float*>(v.layers[0].k);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(kk[moved * 64 + i], expect[i], 1e-5f);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(kk[cell * 64 + i], row[i]);  // seq 1's copy untouched
  kv->check_invariants();
}

TEST(KvCache, PrefixCacheReusesFullBlocksAndCountsHits) {
  auto kv = make(64, 4);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 11; ++i) prompt.push_back(100 + i);
  ASSERT_TRUE(append(*kv, 0, 11, nullptr, 100).is_ok());  // tokens 100..110: 2 full blocks
  kv->seq_rm(0, 0, -1);
  KvStats st = kv->stats();
  EXPECT_EQ(st.n_blocks_used, 0);
  EXPECT_EQ(st.n_blocks_cached, 2);  // kept for reuse
  // Same prompt: reuses 8 tokens; keep at least one token to compute (max_tokens = 10).
  EXPECT_EQ(kv->seq_reuse_prefix(1, prompt.data(), 11, 10), 8);
  EXPECT_EQ(kv->seq_n_tokens(1), 8);
  EXPECT_EQ(kv->seq_pos_max(1), 7);
  st = kv->stats();
  EXPECT_EQ(st.prefix_hits, 8u);
  EXPECT_EQ(st.prefix_queries, 11u);
  EXPECT_EQ(st.n_blocks_cached, 0);
  // A prompt differing in its second block reuses only the first.
  std::vector<int32_t> other = prompt;
  other[5] = 7;
  EXPECT_EQ(kv->seq_reuse_prefix(2, other.data(), 11, 10), 4);
  // A prompt differing in its first token reuses nothing.
  other[0] = 9;
  EXPECT_EQ(kv->seq_reuse_prefix(3, other.data(), 11, 10), 0);
  EXPECT_NEAR(kv->stats().hit_rate(), 12.0 / 33.0, 1e-12);
  kv->check_invariants();
  kv->clear();
  kv->check_invariants();
}

TEST(KvCache, CachedBlocksAreEvictedLeastRecentlyUsedFirst) {
  auto kv = make(16, 4);  // 4 blocks
  ASSERT_TRUE(append(*kv, 0, 4, nullptr, 100).is_ok());
  ASSERT_TRUE(append(*kv, 1, 4, nullptr, 200).is_ok());
  kv->seq_rm(0, 0, -1);  // cached first (least recent)
  kv->seq_rm(1, 0, -1);
  EXPECT_EQ(kv->stats().n_blocks_cached, 2);
  ASSERT_TRUE(append(*kv, 2, 12, nullptr, 300).is_ok());  // 2 free + 1 eviction
  KvStats st = kv->stats();
  EXPECT_EQ(st.evictions, 1u);
  std::vector<int32_t> p0 = {100, 101, 102, 103, 0}, p1 = {200, 201, 202, 203, 0};
  EXPECT_EQ(kv->seq_reuse_prefix(3, p0.data(), 5, 4), 0);  // evicted
  EXPECT_EQ(kv->seq_reuse_prefix(4, p1.data(), 5, 4), 4);  // survived
  kv->check_invariants();
}

TEST(KvCache, RandomOperationsNeverLeakBlocks) {
  std::mt19937 rng(1234);
  auto kv = make(128, 4);
  for (int step = 0; step < 3000; ++step) {
    const int op = rng() % 8;
    const int32_t s = rng() % 6, s2 = rng() % 6;
    switch (op) {
      case 0: case 1: (void)append(*kv, s, 1 + rng() % 9, nullptr, (rng() % 2) ? 100 : -1); break;
      case 2: kv->seq_cp(s, s2); break;
      case 3: kv->seq_rm(s, static_cast<int32_t>(rng() % 20), -1); break;
      case 4: if (rng() % 10 == 0) kv->seq_keep(s); break;
      case 5: {
        std::vector<int32_t> p(12);
        for (int i = 0; i < 12; ++i) p[i] = 100 + i;
        if (!kv->seq_exists(s)) kv->seq_reuse_prefix(s, p.data(), 12, 11);
        break;
      }
      case 6: if (kv->seq_n_tokens(s) > 2) kv->seq_shift(s, 1, -1, 1 + static_cast<int32_t>(rng() % 3)); break;
      case 7: kv->seq_rollback(s, kv->seq_pos_max(s) + 1 - static_cast<int32_t>(rng() % 9)); break;
    }
    kv->check_invariants();
    KvStats st = kv->stats();
    ASSERT_EQ(st.n_blocks_used + st.n_blocks_cached + st.n_blocks_free, st.n_blocks);
  }
  kv->clear();
  kv->check_invariants();
  EXPECT_EQ(kv->stats().n_blocks_used, 0);
  EXPECT_EQ(kv->stats().n_sequences, 0);
}

TEST(KvCache, RejectsBadConfigs) {
  KvCacheConfig c = small_config(0);
  EXPECT_FALSE(KvCache::create(c).is_ok());
  c = small_config(16);
  c.type = TensorType::Q4_0;
  EXPECT_FALSE(KvCache::create(c).is_ok());
  c = small_config(16, 4, TensorType::Q8_0);
  EXPECT_TRUE(KvCache::create(c).is_ok());
  c.n_embd_k = 48;  // not a multiple of Q8_0's 32
  EXPECT_FALSE(KvCache::create(c).is_ok());
}

}  // namespace
}  // namespace ubatch
