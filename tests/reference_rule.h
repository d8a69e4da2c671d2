// The reference data's parity rule (../shared/reference/README.md), shared by the logits tests
// of every architecture: per row, max |ours − ref| ≤ tolerance × (max(ref) − min(ref)); argmax
// agrees where the reference's top-1 − top-2 margin exceeds 2 × tolerance × range; greedy
// generation reproduces `greedy16` up to the first step the reference cannot decide.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "context/context.h"
#include "support.h"

namespace ubatch::test {

struct RowCheck {
  double max_err = 0, range = 0, margin = 0;
  int32_t ours_argmax = 0, ref_argmax = 0;
};

inline RowCheck check_row(const float* ours, const float* ref, int32_t n) {
  RowCheck c;
  float mx = ref[0], mn = ref[0];
  float top1 = -INFINITY, top2 = -INFINITY;
  for (int32_t v = 0; v < n; ++v) {
    mx = std::max(mx, ref[v]);
    mn = std::min(mn, ref[v]);
    c.max_err = std::max(c.max_err, static_cast<double>(std::fabs(ours[v] - ref[v])));
    if (ref[v] > top1) { top2 = top1; top1 = ref[v]; c.ref_argmax = v; }
    else if (ref[v] > top2) top2 = ref[v];
    if (ours[v] > ours[c.ours_argmax]) c.ours_argmax = v;
  }
  c.range = mx - mn;
  c.margin = top1 - top2;
  return c;
}

// Every row of one manifest case, computed as one sequence in one decode: rules 1 and 2.
// Returns the worst max_err / range. chunkable: rows but the last flagged (Batch::chunkable).
inline double check_case_rows(Context& ctx, const nlohmann::json& c, double tol, bool chunkable = false) {
  const int32_t n_vocab = ctx.n_vocab();
  const std::vector<int32_t> tokens = c["tokens"].get<std::vector<int32_t>>();
  const std::vector<float> ref = read_f32(reference_path(c["logits"].get<std::string>()));
  EXPECT_EQ(ref.size(), tokens.size() * n_vocab);
  if (ref.size() != tokens.size() * n_vocab) return INFINITY;
  ctx.kv().clear();
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.add(tokens[i], static_cast<int32_t>(i), 0, true);
    if (chunkable && i + 1 < tokens.size()) b.mark_chunkable();
  }
  DecodeResult r = ctx.decode(b);
  EXPECT_TRUE(r.ok()) << r.message;
  if (!r.ok()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    RowCheck rc = check_row(ctx.logits(static_cast<int32_t>(i)), &ref[i * n_vocab], n_vocab);
    worst = std::max(worst, rc.max_err / rc.range);
    EXPECT_LE(rc.max_err, tol * rc.range) << "row " << i;
    if (rc.margin > 2 * tol * rc.range) {
      EXPECT_EQ(rc.ours_argmax, rc.ref_argmax) << "row " << i;
    }
  }
  return worst;
}

// Greedy generation from the case's prompt (prefill, then one-token decode steps): rule 3.
// chunkable: the prompt's rows but the last flagged, as the scheduler flags them.
inline void check_case_greedy(Context& ctx, const nlohmann::json& c, double tol, bool chunkable = false) {
  const int32_t n_vocab = ctx.n_vocab();
  const int32_t n_prompt = c["n_prompt"];
  const std::vector<int32_t> tokens = c["tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> expect = c["greedy16"].get<std::vector<int32_t>>();
  const std::vector<float> ref = read_f32(reference_path(c["logits"].get<std::string>()));
  ctx.kv().clear();
  Batch b;
  for (int32_t i = 0; i < n_prompt; ++i) {
    b.add(tokens[i], i, 0, i + 1 == n_prompt);
    if (chunkable && i + 1 < n_prompt) b.mark_chunkable();
  }
  ASSERT_TRUE(ctx.decode(b).ok());
  const float* logits = ctx.logits(n_prompt - 1);
  for (size_t step = 0; step < expect.size(); ++step) {
    // Stop comparing at the first step where the reference itself is too close to call.
    const size_t row = n_prompt - 1 + step;
    if (row < tokens.size()) {
      RowCheck rc = check_row(logits, &ref[row * n_vocab], n_vocab);
      if (rc.margin <= 2 * tol * rc.range) break;
    }
    const int32_t id = static_cast<int32_t>(std::max_element(logits, logits + n_vocab) - logits);
    ASSERT_EQ(id, expect[step]) << "step " << step;
    b.clear();
    b.add(id, n_prompt + static_cast<int32_t>(step), 0, true);
    ASSERT_TRUE(ctx.decode(b).ok());
    logits = ctx.logits(0);
  }
}

}  // namespace ubatch::test
