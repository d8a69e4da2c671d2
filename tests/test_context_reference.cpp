// Forward-pass parity with the reference implementation on the tiny models of
// ../shared/reference (see its README for the rule), and greedy generation vs greedy16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "context/context.h"
#include "support.h"

namespace ubatch {
namespace {

struct RowCheck {
  double max_err = 0, range = 0, margin = 0;
  int32_t ours_argmax = 0, ref_argmax = 0;
};

RowCheck check_row(const float* ours, const float* ref, int32_t n) {
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

std::unique_ptr<Context> make_context(const std::string& path, int32_t n_ubatch, int n_threads) {
  Result<std::unique_ptr<Model>> m = Model::load_file(path);
  EXPECT_TRUE(m.is_ok()) << m.message();
  if (!m) return nullptr;
  ContextParams p;
  p.n_ctx = 512;
  p.n_batch = 512;
  p.n_ubatch = n_ubatch;
  p.n_threads = n_threads;
  Result<std::unique_ptr<Context>> c = Context::create(std::shared_ptr<Model>(std::move(m.value())), p);
  EXPECT_TRUE(c.is_ok()) << c.message();
  return c ? std::move(c.value()) : nullptr;
}

nlohmann::json manifest() {
  std::vector<uint8_t> bytes = test::read_file(test::reference_path("manifest.json"));
  return nlohmann::json::parse(bytes.begin(), bytes.end());
}

TEST(ReferenceLogits, EveryModelEveryCase) {
  UBATCH_REQUIRE_REFERENCE();
  nlohmann::json man = manifest();
  int n_models = 0;
  for (const auto& model : man["models"]) {
    const std::string file = model["file"];
    const double tol = model["tolerance"];
    const int32_t n_vocab = model["n_vocab"];
    SCOPED_TRACE(file);
    std::unique_ptr<Context> ctx = make_context(test::reference_path(file), 512, 2);
    ASSERT_TRUE(ctx);
    ++n_models;
    int case_index = 0;
    for (const auto& c : model["cases"]) {
      SCOPED_TRACE("case " + std::to_string(case_index++));
      std::vector<int32_t> tokens = c["tokens"].get<std::vector<int32_t>>();
      std::vector<float> ref = test::read_f32(test::reference_path(c["logits"].get<std::string>()));
      ASSERT_EQ(ref.size(), tokens.size() * n_vocab);
      ctx->kv().clear();
      Batch b;
      for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], static_cast<int32_t>(i), 0, true);
      DecodeResult r = ctx->decode(b);
      ASSERT_TRUE(r.ok()) << r.message;
      double worst = 0;
      for (size_t i = 0; i < tokens.size(); ++i) {
        RowCheck rc = check_row(ctx->logits(static_cast<int32_t>(i)), &ref[i * n_vocab], n_vocab);
        worst = std::max(worst, rc.max_err / rc.range);
        EXPECT_LE(rc.max_err, tol * rc.range) << "row " << i;
        if (rc.margin > 2 * tol * rc.range) {
          EXPECT_EQ(rc.ours_argmax, rc.ref_argmax) << "row " << i;
        }
      }
      RecordProperty(file + ".worst_rel_err", std::to_string(worst));
    }
  }
  EXPECT_EQ(n_models, 17);
}

TEST(ReferenceLogits, GreedyGenerationMatchesGreedy16) {
  UBATCH_REQUIRE_REFERENCE();
  nlohmann::json man = manifest();
  for (const auto& model : man["models"]) {
    const std::string file = model["file"];
    const double tol = model["tolerance"];
    const int32_t n_vocab = model["n_vocab"];
    SCOPED_TRACE(file);
    std::unique_ptr<Context> ctx = make_context(test::reference_path(file), 7, 2);
    ASSERT_TRUE(ctx);
    for (const auto& c : model["cases"]) {
      const int32_t n_prompt = c["n_prompt"];
      std::vector<int32_t> tokens = c["tokens"].get<std::vector<int32_t>>();
      std::vector<int32_t> expect = c["greedy16"].get<std::vector<int32_t>>();
      std::vector<float> ref = test::read_f32(test::reference_path(c["logits"].get<std::string>()));
      ctx->kv().clear();
      Batch b;
      for (int32_t i = 0; i < n_prompt; ++i) b.add(tokens[i], i, 0, i + 1 == n_prompt);
      ASSERT_TRUE(ctx->decode(b).ok());
      const float* logits = ctx->logits(n_prompt - 1);
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
        ASSERT_TRUE(ctx->decode(b).ok());
        logits = ctx->logits(0);
      }
    }
  }
}

}  // namespace
}  // namespace ubatch
