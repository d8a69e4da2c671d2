// Logits helpers shared by the architecture tests (test_context_hybrid.cpp, test_context_moe.cpp):
// a sequence's rows in one decode, one row, the largest change between two logits arrays, and a
// sequence decoded among other sequences' rows (batch invariance).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "context/context.h"

namespace ubatch::test {

// Row i of the last decode: [n_vocab].
inline std::vector<float> row_logits(Context& ctx, int32_t i) {
  return std::vector<float>(ctx.logits(i), ctx.logits(i) + ctx.n_vocab());
}

// Logits of every row of `tokens` decoded as sequence `seq` from position 0, in one decode:
// [n, n_vocab] (empty, the test failed, when the decode fails).
inline std::vector<float> sequence_logits(Context& ctx, const std::vector<int32_t>& tokens, int32_t seq = 0) {
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], static_cast<int32_t>(i), seq, true);
  DecodeResult r = ctx.decode(b);
  EXPECT_TRUE(r.ok()) << r.message;
  std::vector<float> out;
  if (!r.ok()) return out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<float> row = row_logits(ctx, static_cast<int32_t>(i));
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// Largest |a − b| over the rows, relative to each row's range in `a`.
inline double max_rel_change(const std::vector<float>& a, const std::vector<float>& b, int32_t n_vocab) {
  double worst = 0;
  for (size_t r = 0; r * n_vocab < a.size(); ++r) {
    const auto [mn, mx] = std::minmax_element(&a[r * n_vocab], &a[r * n_vocab] + n_vocab);
    double d = 0;
    for (int32_t v = 0; v < n_vocab; ++v) d = std::max(d, double(std::fabs(a[r * n_vocab + v] - b[r * n_vocab + v])));
    worst = std::max(worst, d / (*mx - *mn));
  }
  return worst;
}

// The 37 tokens of `a` as sequence 0 with rows of sequences 1 and 2 (tokens taken from `p`, at
// least 101 of them) interleaved, over three decodes of 20, 1 and 16 positions: sequence 0's
// logits, [37, n_vocab] (empty, the test failed, when a decode fails).
inline std::vector<float> logits_among_other_sequences(Context& ctx, const std::vector<int32_t>& a,
                                                       const std::vector<int32_t>& p) {
  std::vector<float> got;
  int32_t done = 0;
  for (int32_t step : {20, 1, 16}) {
    Batch b;
    for (int32_t i = 0; i < step; ++i) {
      b.add(p[static_cast<size_t>(100 - done - i)], done + i, 1, (i % 3) == 0);
      b.add(a[static_cast<size_t>(done + i)], done + i, 0, true);
      b.add(p[static_cast<size_t>(done + i + 50)], done + i, 2, false);
    }
    const DecodeResult r = ctx.decode(b);
    EXPECT_TRUE(r.ok()) << r.message;
    if (!r.ok()) return {};
    for (int32_t i = 0; i < step; ++i) {
      const std::vector<float> row = row_logits(ctx, 3 * i + 1);
      got.insert(got.end(), row.begin(), row.end());
    }
    done += step;
  }
  return got;
}

}  // namespace ubatch::test
