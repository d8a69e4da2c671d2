// Forward-pass parity with the reference implementation on the tiny models of
// ../shared/reference (see its README for the rule), and greedy generation vs greedy16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "context/context.h"
#include "reference_rule.h"
#include "support.h"

namespace ubatch {
namespace {

std::unique_ptr<Context> make_reference_context(const std::string& path, int32_t n_ubatch, int n_threads) {
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

nlohmann::json reference_manifest() {
  std::vector<uint8_t> bytes = test::read_file(test::reference_path("manifest.json"));
  return nlohmann::json::parse(bytes.begin(), bytes.end());
}

TEST(ReferenceLogits, EveryModelEveryCase) {
  UBATCH_REQUIRE_REFERENCE();
  nlohmann::json man = reference_manifest();
  int n_models = 0;
  for (const auto& model : man["models"]) {
    const std::string file = model["file"];
    const double tol = model["tolerance"];
    SCOPED_TRACE(file);
    std::unique_ptr<Context> ctx = make_reference_context(test::reference_path(file), 512, 2);
    ASSERT_TRUE(ctx);
    ++n_models;
    int case_index = 0;
    for (const auto& c : model["cases"]) {
      SCOPED_TRACE("case " + std::to_string(case_index++));
      const double worst = test::check_case_rows(*ctx, c, tol);
      RecordProperty(file + ".worst_rel_err", std::to_string(worst));
    }
  }
  EXPECT_EQ(n_models, 17);
}

TEST(ReferenceLogits, GreedyGenerationMatchesGreedy16) {
  UBATCH_REQUIRE_REFERENCE();
  nlohmann::json man = reference_manifest();
  for (const auto& model : man["models"]) {
    const std::string file = model["file"];
    const double tol = model["tolerance"];
    SCOPED_TRACE(file);
    std::unique_ptr<Context> ctx = make_reference_context(test::reference_path(file), 7, 2);
    ASSERT_TRUE(ctx);
    for (const auto& c : model["cases"]) test::check_case_greedy(*ctx, c, tol);
  }
}

}  // namespace
}  // namespace ubatch
