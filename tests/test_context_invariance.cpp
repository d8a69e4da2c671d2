// Batch invariance: a sequence's logits are bit-identical whatever else shares its batch or
// ubatch, whatever n_ubatch, whether its prompt came in one chunk or many, and whether its
// prefix came from the prefix cache. Property test on the tiny reference models.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "context/context.h"
#include "support.h"

namespace ubatch {
namespace {

std::shared_ptr<Model> load_model(const std::string& rel) {
  Result<std::unique_ptr<Model>> m = Model::load_file(test::reference_path(rel));
  EXPECT_TRUE(m.is_ok()) << m.message();
  return m ? std::shared_ptr<Model>(std::move(m.value())) : nullptr;
}

std::unique_ptr<Context> make_context(std::shared_ptr<Model> m, int32_t n_ubatch, int n_threads,
                                      int32_t n_ctx = 2048, TensorType kv = TensorType::F16) {
  ContextParams p;
  p.n_ctx = n_ctx;
  p.n_batch = 4096;
  p.n_ubatch = n_ubatch;
  p.n_threads = n_threads;
  p.kv_type = kv;
  Result<std::unique_ptr<Context>> c = Context::create(std::move(m), p);
  EXPECT_TRUE(c.is_ok()) << c.message();
  return std::move(c.value());
}

// Logits of every row of `tokens` run alone, in one batch, fresh cache.
std::vector<std::vector<float>> solo(std::shared_ptr<Model> m, const std::vector<int32_t>& tokens,
                                     TensorType kv = TensorType::F16) {
  auto ctx = make_context(m, 512, 1, 2048, kv);
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], static_cast<int32_t>(i), 0, true);
  EXPECT_TRUE(ctx->decode(b).ok());
  std::vector<std::vector<float>> rows;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* l = ctx->logits(static_cast<int32_t>(i));
    rows.emplace_back(l, l + ctx->n_vocab());
  }
  return rows;
}

void expect_same(const std::vector<float>& a, const float* b, const std::string& what) {
  ASSERT_EQ(std::memcmp(a.data(), b, a.size() * sizeof(float)), 0) << what << " differs bit-wise";
}

class BatchInvariance : public ::testing::TestWithParam<const char*> {};

TEST_P(BatchInvariance, RandomMixesOfSequencesChunksAndDecodeSteps) {
  UBATCH_REQUIRE_REFERENCE();
  std::shared_ptr<Model> m = load_model(GetParam());
  ASSERT_TRUE(m);
  const int32_t n_vocab = m->hparams().n_vocab;
  std::mt19937 rng(42);
  for (int trial = 0; trial < 3; ++trial) {
    const int n_seq = 2 + static_cast<int>(rng() % 5);
    std::vector<std::vector<int32_t>> seqs(n_seq);
    for (auto& s : seqs) {
      const int len = 1 + static_cast<int>(rng() % 40);
      for (int i = 0; i < len; ++i) s.push_back(static_cast<int32_t>(rng() % n_vocab));
    }
    std::vector<std::vector<std::vector<float>>> want;
    for (auto& s : seqs) want.push_back(solo(m, s));

    const int32_t n_ubatch = 1 + static_cast<int32_t>(rng() % 16);
    auto ctx = make_context(m, n_ubatch, 1 + static_cast<int>(rng() % 2));
    std::vector<size_t> done(n_seq, 0);
    for (int step = 0; step < 1000; ++step) {
      Batch b;
      std::vector<std::pair<int, size_t>> rows;  // (seq, index) of each batch row
      for (int s = 0; s < n_seq; ++s) {
        if (done[s] == seqs[s].size() || rng() % 3 == 0) continue;
        // A chunk of 1..8 tokens of this sequence (1 = a decode step).
        const size_t n = std::min(seqs[s].size() - done[s], size_t{1 + rng() % 8});
        for (size_t i = done[s]; i < done[s] + n; ++i) {
          b.add(seqs[s][i], static_cast<int32_t>(i), s, true);
          rows.emplace_back(s, i);
        }
        done[s] += n;
      }
      if (b.n_tokens() == 0) {
        bool all = true;
        for (int s = 0; s < n_seq; ++s) all = all && done[s] == seqs[s].size();
        if (all) break;
        continue;
      }
      DecodeResult r = ctx->decode(b);
      ASSERT_TRUE(r.ok()) << r.message;
      for (size_t k = 0; k < rows.size(); ++k) {
        auto [s, i] = rows[k];
        expect_same(want[s][i], ctx->logits(static_cast<int32_t>(k)),
                    "trial " + std::to_string(trial) + " seq " + std::to_string(s) + " row " + std::to_string(i) +
                        " (n_ubatch " + std::to_string(n_ubatch) + ")");
      }
    }
    for (int s = 0; s < n_seq; ++s) ASSERT_EQ(done[s], seqs[s].size());
  }
}

TEST_P(BatchInvariance, PrefixCacheReuseGivesTheSameLogits) {
  UBATCH_REQUIRE_REFERENCE();
  std::shared_ptr<Model> m = load_model(GetParam());
  ASSERT_TRUE(m);
  std::mt19937 rng(7);
  std::vector<int32_t> prefix;
  for (int i = 0; i < 37; ++i) prefix.push_back(static_cast<int32_t>(rng() % m->hparams().n_vocab));
  std::vector<int32_t> a = prefix, b = prefix;
  for (int i = 0; i < 5; ++i) a.push_back(static_cast<int32_t>(rng() % m->hparams().n_vocab));
  for (int i = 0; i < 9; ++i) b.push_back(static_cast<int32_t>(rng() % m->hparams().n_vocab));
  auto want_b = solo(m, b);

  auto ctx = make_context(m, 8, 2);
  Batch batch;
  for (size_t i = 0; i < a.size(); ++i) batch.add(a[i], static_cast<int32_t>(i), 0, false);
  ASSERT_TRUE(ctx->decode(batch).ok());
  ctx->kv().seq_rm(0, 0, -1);  // sequence a ends; its full blocks stay cached
  const int32_t reused = ctx->kv().seq_reuse_prefix(1, b.data(), static_cast<int32_t>(b.size()),
                                                    static_cast<int32_t>(b.size()) - 1);
  EXPECT_EQ(reused, 32);  // two full blocks of 16 of the 37 shared tokens
  batch.clear();
  for (size_t i = reused; i < b.size(); ++i) batch.add(b[i], static_cast<int32_t>(i), 1, true);
  ASSERT_TRUE(ctx->decode(batch).ok());
  for (size_t i = reused; i < b.size(); ++i)
    expect_same(want_b[i], ctx->logits(static_cast<int32_t>(i - reused)), "row " + std::to_string(i));
  ctx->kv().clear();
  ctx->kv().check_invariants();
  EXPECT_EQ(ctx->kv().stats().n_blocks_used, 0);
}

TEST_P(BatchInvariance, SharedPromptViaSeqCpAndMultiSeqRows) {
  UBATCH_REQUIRE_REFERENCE();
  std::shared_ptr<Model> m = load_model(GetParam());
  ASSERT_TRUE(m);
  std::vector<int32_t> prompt = {1, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 200, 210};
  std::vector<int32_t> s0 = prompt, s1 = prompt;
  s0.push_back(300);
  s1.push_back(301);
  auto want0 = solo(m, s0), want1 = solo(m, s1);
  for (int mode = 0; mode < 2; ++mode) {
    auto ctx = make_context(m, 5, 2);
    Batch b;
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (mode == 0) b.add(prompt[i], static_cast<int32_t>(i), 0, false);
      else b.add(prompt[i], static_cast<int32_t>(i), {0, 1}, false);  // one row, two sequences
    }
    ASSERT_TRUE(ctx->decode(b).ok());
    if (mode == 0) ctx->kv().seq_cp(0, 1);
    b.clear();
    b.add(300, static_cast<int32_t>(prompt.size()), 0, true);
    b.add(301, static_cast<int32_t>(prompt.size()), 1, true);
    ASSERT_TRUE(ctx->decode(b).ok());
    expect_same(want0.back(), ctx->logits(0), "seq 0 mode " + std::to_string(mode));
    expect_same(want1.back(), ctx->logits(1), "seq 1 mode " + std::to_string(mode));
    ctx->kv().check_invariants();
  }
}

// Speculative verification: a sequence's last token followed by draft tokens, in one batch
// with another sequence's prefill chunk. The rows up to and including the first wrong draft
// give the logits plain one-token decoding gives; the wrong drafts' KV is rolled back and the
// sequence goes on as if they had never been there.
TEST_P(BatchInvariance, SpeculativeRowsAndRollbackGiveTheSameLogits) {
  UBATCH_REQUIRE_REFERENCE();
  std::shared_ptr<Model> m = load_model(GetParam());
  ASSERT_TRUE(m);
  const int32_t n_vocab = m->hparams().n_vocab;
  std::mt19937 rng(99);
  std::vector<int32_t> truth, other;
  for (int i = 0; i < 90; ++i) truth.push_back(static_cast<int32_t>(rng() % n_vocab));
  for (int i = 0; i < 120; ++i) other.push_back(static_cast<int32_t>(rng() % n_vocab));
  const auto want = solo(m, truth), want_other = solo(m, other);

  auto ctx = make_context(m, 1 + static_cast<int32_t>(rng() % 7), 2);
  Batch b;
  for (int i = 0; i < 10; ++i) b.add(truth[i], i, 0, false);
  ASSERT_TRUE(ctx->decode(b).ok());
  size_t pos = 10, other_done = 0;  // truth[pos] is the next token to feed
  while (pos < truth.size()) {
    b.clear();
    // Seq 0: the true token, then k drafts whose first `right` are true.
    const size_t k = rng() % 9, right = std::min<size_t>(k, rng() % 6);
    std::vector<int32_t> fed = {truth[pos]};
    for (size_t j = 1; j <= k; ++j) {
      const size_t p = pos + j;
      fed.push_back(j <= right && p < truth.size() ? truth[p] : static_cast<int32_t>(rng() % n_vocab));
    }
    for (size_t j = 0; j < fed.size(); ++j) b.add(fed[j], static_cast<int32_t>(pos + j), 0, true);
    // Seq 1: a prefill chunk in the same batch.
    const size_t chunk = std::min(other.size() - other_done, size_t{rng() % 12});
    for (size_t i = other_done; i < other_done + chunk; ++i) b.add(other[i], static_cast<int32_t>(i), 1, true);
    ASSERT_TRUE(ctx->decode(b).ok());
    // Rows whose inputs are all true: the first, and one per right draft.
    size_t ok = 0;
    while (ok + 1 < fed.size() && pos + ok + 1 < truth.size() && fed[ok + 1] == truth[pos + ok + 1]) ++ok;
    for (size_t j = 0; j <= ok; ++j)
      expect_same(want[pos + j], ctx->logits(static_cast<int32_t>(j)), "position " + std::to_string(pos + j));
    for (size_t i = 0; i < chunk; ++i)
      expect_same(want_other[other_done + i], ctx->logits(static_cast<int32_t>(fed.size() + i)),
                  "other row " + std::to_string(other_done + i));
    other_done += chunk;
    ctx->kv().seq_rollback(0, static_cast<int32_t>(pos + ok + 1));
    ctx->kv().check_invariants();
    ASSERT_EQ(ctx->kv().seq_n_tokens(0), static_cast<int32_t>(pos + ok + 1));
    pos += ok + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, BatchInvariance,
                         ::testing::Values("models/tiny-llama-f32.gguf", "models/tiny-llama-q4_k_m.gguf",
                                           "models/tiny-llama-q8_0.gguf", "models/tiny-gemma3-q4_k_m.gguf",
                                           "models/tiny-gemma3-f16.gguf"),
                         [](const auto& info) {
                           std::string n = info.param;
                           n = n.substr(n.find('/') + 1);
                           n = n.substr(0, n.find('.'));
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(ContextDecode, InvalidBatchesAndFullCacheLeaveTheCacheUnchanged) {
  UBATCH_REQUIRE_REFERENCE();
  std::shared_ptr<Model> m = load_model("models/tiny-llama-q8_0.gguf");
  ASSERT_TRUE(m);
  auto ctx = make_context(m, 4, 1, 64);  // 4 blocks of 16
  Batch b;
  for (int i = 0; i < 20; ++i) b.add(5 + i, i, 0, i == 19);
  ASSERT_TRUE(ctx->decode(b).ok());
  const KvStats before = ctx->kv().stats();
  auto expect_status = [&](const Batch& bad, DecodeStatus st, const char* needle) {
    DecodeResult r = ctx->decode(bad);
    EXPECT_EQ(r.status, st) << r.message;
    EXPECT_NE(r.message.find(needle), std::string::npos) << r.message;
    EXPECT_EQ(ctx->kv().seq_n_tokens(0), 20);
    EXPECT_EQ(ctx->kv().stats().n_blocks_used, before.n_blocks_used);
    ctx->kv().check_invariants();
  };
  Batch bad;
  expect_status(bad, DecodeStatus::InvalidBatch, "empty");
  bad.add(100000, 20, 0, true);
  expect_status(bad, DecodeStatus::InvalidBatch, "vocabulary");
  bad.clear();
  bad.add(5, 25, 0, true);  // position gap
  expect_status(bad, DecodeStatus::InvalidBatch, "expected 20");
  bad.clear();
  bad.add(5, 20, -3, true);
  expect_status(bad, DecodeStatus::InvalidBatch, "negative");
  bad.clear();
  bad.add(5, 0, {1, 1}, true);
  expect_status(bad, DecodeStatus::InvalidBatch, "twice");
  bad.clear();
  for (int i = 0; i < 40; ++i) bad.add(5, i, 1, false);  // needs 3 blocks, 2 free
  expect_status(bad, DecodeStatus::NoKvSpace, "KV cache full");
  // Still usable afterwards.
  b.clear();
  b.add(7, 20, 0, true);
  EXPECT_TRUE(ctx->decode(b).ok());
}

}  // namespace
}  // namespace ubatch
