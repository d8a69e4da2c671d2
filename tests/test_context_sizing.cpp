// KV cache sizing: bytes per token for each storage type, and the automatic capacity
// (`--n-ctx 0`): a full context per parallel sequence, cut to a share of available memory.
#include <gtest/gtest.h>

#include "context/context.h"

namespace ubatch {
namespace {

HParams gemma3_270m_like() {
  HParams hp;
  hp.n_layer = 18;
  hp.n_kv_head = 1;
  hp.head_dim_k = 256;
  hp.head_dim_v = 256;
  return hp;
}

TEST(ContextSizing, BytesPerTokenFollowTheStorageType) {
  const HParams hp = gemma3_270m_like();
  EXPECT_EQ(kv_bytes_per_token(hp, TensorType::F16), 18u * 512 * 2);
  EXPECT_EQ(kv_bytes_per_token(hp, TensorType::F32), 18u * 512 * 4);
  EXPECT_EQ(kv_bytes_per_token(hp, TensorType::Q8_0), 18u * (512 / 32) * 34);
}

TEST(ContextSizing, AutoCapacityIsAFullContextPerSequence) {
  const uint64_t per_token = 18432;
  const uint64_t plenty = uint64_t{64} << 30;
  EXPECT_EQ(auto_kv_cells(1, 32768, per_token, plenty), 4096);   // min(4096, trained)
  EXPECT_EQ(auto_kv_cells(16, 32768, per_token, plenty), 65536);
  EXPECT_EQ(auto_kv_cells(4, 2048, per_token, plenty), 8192);    // a shorter trained context
  EXPECT_EQ(auto_kv_cells(4, 0, per_token, plenty), 16384);      // unknown: 4096
  EXPECT_EQ(auto_kv_cells(0, 32768, per_token, plenty), 4096);   // at least one sequence
}

TEST(ContextSizing, AutoCapacityStaysWithinAShareOfMemory) {
  const uint64_t per_token = 18432;
  const uint64_t one_gib = uint64_t{1} << 30;
  // 16 x 4096 tokens would take 1.125 GiB; a quarter of 1 GiB holds 14,563 tokens.
  EXPECT_EQ(auto_kv_cells(16, 32768, per_token, one_gib), static_cast<int32_t>(one_gib / 4 / per_token));
  EXPECT_EQ(auto_kv_cells(16, 32768, per_token, one_gib, 0.5), static_cast<int32_t>(one_gib / 2 / per_token));
  EXPECT_EQ(auto_kv_cells(16, 32768, per_token, 1024), 256);      // never below 256 cells
  EXPECT_EQ(auto_kv_cells(16, 32768, per_token, 0), 65536);       // memory unknown: no cut
  EXPECT_EQ(auto_kv_cells(1 << 20, 32768, 0, 0), 1 << 24);        // capped at 2^24
}

}  // namespace
}  // namespace ubatch
