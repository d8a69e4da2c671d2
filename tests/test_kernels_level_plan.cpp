// The matmul level plan (kernels/level_plan.h, issue 24): the choice rule with injected
// timings (fastest per shape class, ties to the lower level, self-check failures, missing
// levels, the UBATCH_SIMD cap), the cache file's text and place, and the real measurement on
// this CPU (every level it runs passes its self-check and gets a time per class).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/gemm_internal.h"
#include "kernels/level_plan.h"
#include "kernels/matmul.h"

namespace ubatch::kernels {
namespace {

using L = SimdLevel;

LevelTiming timing(L level, double decode, double small, double prefill, bool passed = true) {
  LevelTiming t;
  t.level = level;
  t.passed = passed;
  t.seconds[0] = decode;
  t.seconds[1] = small;
  t.seconds[2] = prefill;
  return t;
}

void expect_plan(const LevelPlan& p, L decode, L small, L prefill) {
  EXPECT_EQ(p.of(ShapeClass::Decode), decode) << describe_level_plan(p);
  EXPECT_EQ(p.of(ShapeClass::SmallBatch), small) << describe_level_plan(p);
  EXPECT_EQ(p.of(ShapeClass::Prefill), prefill) << describe_level_plan(p);
}

TEST(LevelPlan, ShapeClassesByRows) {
  EXPECT_EQ(shape_class(0), ShapeClass::Decode);
  EXPECT_EQ(shape_class(1), ShapeClass::Decode);
  EXPECT_EQ(shape_class(2), ShapeClass::Decode);
  EXPECT_EQ(shape_class(3), ShapeClass::SmallBatch);
  EXPECT_EQ(shape_class(33), ShapeClass::SmallBatch);
  EXPECT_EQ(shape_class(64), ShapeClass::SmallBatch);
  EXPECT_EQ(shape_class(65), ShapeClass::Prefill);
  EXPECT_EQ(shape_class(512), ShapeClass::Prefill);
  LevelPlan p;
  p.level[0] = L::Avx2;
  p.level[1] = L::Avx512;
  p.level[2] = L::Amx;
  EXPECT_EQ(p.at(1), L::Avx2);
  EXPECT_EQ(p.at(17), L::Avx512);
  EXPECT_EQ(p.at(100), L::Amx);
  EXPECT_EQ(describe_level_plan(p), "decode avx2, small-batch avx512, prefill amx");
}

// The case: AMX newest but slower at prefill; each class gets its fastest level.
TEST(LevelPlan, FastestLevelPerClassNotTheNewest) {
  const std::vector<LevelTiming> t = {timing(L::Amx, 1.00, 0.90, 1.25), timing(L::Avx512, 1.00, 1.00, 1.00),
                                      timing(L::Avx2, 0.80, 1.50, 2.00), timing(L::Scalar, 9.0, 30.0, 60.0)};
  // decode: avx2 fastest; small batch: amx; prefill: avx512 (amx 25% slower).
  expect_plan(choose_level_plan(t, L::Amx), L::Avx2, L::Amx, L::Avx512);
  // The order of the entries does not matter.
  const std::vector<LevelTiming> r(t.rbegin(), t.rend());
  expect_plan(choose_level_plan(r, L::Amx), L::Avx2, L::Amx, L::Avx512);
}

TEST(LevelPlan, TiesGoToTheLowerLevel) {
  // Exact ties, and times within the tie fraction (3%), pick the lower level.
  expect_plan(choose_level_plan({timing(L::Avx512, 1.0, 1.0, 1.0), timing(L::Avx2, 1.0, 1.02, 0.98)}, L::Amx),
              L::Avx2, L::Avx2, L::Avx2);
  // Outside the tie fraction the faster (here the higher) level wins.
  expect_plan(choose_level_plan({timing(L::Avx512, 1.0, 1.0, 1.0), timing(L::Avx2, 1.04, 1.5, 1.031)}, L::Amx),
              L::Avx512, L::Avx512, L::Avx512);
  // Three-way: the lowest of those within the fraction of the fastest, not of each other.
  expect_plan(choose_level_plan({timing(L::Amx, 1.00, 1.0, 1.0), timing(L::Avx512, 1.025, 1.0, 1.0),
                                 timing(L::Avx2, 1.05, 1.0, 1.0)},
                                L::Amx),
              L::Avx512, L::Avx2, L::Avx2);
  // tie = 0: only exact ties.
  expect_plan(choose_level_plan({timing(L::Avx512, 1.0, 1.0, 0.99), timing(L::Avx2, 1.001, 1.0, 1.0)}, L::Amx, 0.0),
              L::Avx512, L::Avx2, L::Avx512);
}

TEST(LevelPlan, LevelFailingItsSelfCheckIsNeverChosen) {
  const std::vector<LevelTiming> t = {timing(L::Avx512, 0.1, 0.1, 0.1, /*passed=*/false),
                                      timing(L::Avx2, 1.0, 1.0, 1.0), timing(L::Scalar, 5.0, 5.0, 5.0)};
  expect_plan(choose_level_plan(t, L::Amx), L::Avx2, L::Avx2, L::Avx2);
  // Every SIMD level failed: the scalar reference.
  const std::vector<LevelTiming> all_failed = {timing(L::Avx512, 0.1, 0.1, 0.1, false),
                                               timing(L::Avx2, 1.0, 1.0, 1.0, false),
                                               timing(L::Scalar, 5.0, 5.0, 5.0)};
  expect_plan(choose_level_plan(all_failed, L::Amx), L::Scalar, L::Scalar, L::Scalar);
}

TEST(LevelPlan, MissingLevelsAndClasses) {
  // AVX-512 not measured at all (absent), AVX2 measured at decode only (0 = not measured).
  const std::vector<LevelTiming> t = {timing(L::Amx, 2.0, 0.5, 0.0), timing(L::Avx2, 1.0, 0.0, 0.0),
                                      timing(L::Scalar, 5.0, 5.0, 5.0)};
  expect_plan(choose_level_plan(t, L::Amx), L::Avx2, L::Amx, L::Scalar);
  // Negative times count as missing too; nothing at all: scalar everywhere.
  expect_plan(choose_level_plan({timing(L::Avx2, -1.0, -1.0, -1.0)}, L::Amx), L::Scalar, L::Scalar, L::Scalar);
  expect_plan(choose_level_plan({}, L::Amx), L::Scalar, L::Scalar, L::Scalar);
  // A level listed twice: its first entry counts.
  expect_plan(choose_level_plan({timing(L::Avx2, 3.0, 3.0, 3.0), timing(L::Scalar, 2.0, 2.0, 2.0),
                                 timing(L::Avx2, 1.0, 1.0, 1.0)},
                                L::Amx),
              L::Scalar, L::Scalar, L::Scalar);
}

TEST(LevelPlan, SimdCapIsHonoured) {
  const std::vector<LevelTiming> t = {timing(L::Amx, 0.5, 0.5, 0.5), timing(L::Avx512, 0.8, 0.9, 0.7),
                                      timing(L::Avx2, 1.0, 0.8, 1.0), timing(L::Scalar, 5.0, 5.0, 5.0)};
  expect_plan(choose_level_plan(t, L::Amx), L::Amx, L::Amx, L::Amx);
  expect_plan(choose_level_plan(t, L::Avx512), L::Avx512, L::Avx2, L::Avx512);
  expect_plan(choose_level_plan(t, L::Avx2), L::Avx2, L::Avx2, L::Avx2);
  expect_plan(choose_level_plan(t, L::Scalar), L::Scalar, L::Scalar, L::Scalar);
  // aarch64's ladder the same way.
  const std::vector<LevelTiming> arm = {timing(L::Dotprod, 0.5, 0.6, 0.5), timing(L::Neon, 0.6, 0.5, 1.0),
                                        timing(L::Scalar, 5.0, 5.0, 5.0)};
  expect_plan(choose_level_plan(arm, L::Dotprod), L::Dotprod, L::Neon, L::Dotprod);
  expect_plan(choose_level_plan(arm, L::Neon), L::Neon, L::Neon, L::Neon);
}

// Two levels of this build: the top one and Scalar.
std::vector<LevelTiming> sample_timings() {
  return {timing(top_simd_level(), 1.25e-4, 5.5e-4, 0.0), timing(L::Scalar, 5.0e-3, 3.0e-2, 1.1e-1, false)};
}

TEST(LevelPlan, CacheTextRoundTrip) {
  const std::string key = "x86-64 \"Test CPU\" family 25 model 1 stepping 1 | levels | layout 1 | probe 1";
  const std::string text = format_level_cache(key, sample_timings());
  std::vector<LevelTiming> back;
  ASSERT_TRUE(parse_level_cache(text, key, &back)) << text;
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].level, top_simd_level());
  EXPECT_TRUE(back[0].passed);
  EXPECT_NEAR(back[0].seconds[0], 1.25e-4, 1e-9);
  EXPECT_NEAR(back[0].seconds[1], 5.5e-4, 1e-9);
  EXPECT_EQ(back[0].seconds[2], 0.0);  // "-": not measured
  EXPECT_EQ(back[1].level, L::Scalar);
  EXPECT_FALSE(back[1].passed);
  EXPECT_NEAR(back[1].seconds[2], 0.11, 1e-9);
  EXPECT_NE(text.find(std::string("level ") + simd_level_name(top_simd_level()) + " passed 1.2500e-04 5.5000e-04 -\n"),
            std::string::npos)
      << text;
}

TEST(LevelPlan, CacheTextRejectsAnythingElse) {
  const std::string key = "k1";
  const std::string good = format_level_cache(key, sample_timings());
  std::vector<LevelTiming> out = {timing(L::Avx2, 1, 1, 1)};
  EXPECT_FALSE(parse_level_cache(good, "k2", &out));  // another CPU model or build
  EXPECT_FALSE(parse_level_cache("", key, &out));
  EXPECT_FALSE(parse_level_cache("ubatch kernel level timings v0\nkey k1\n", key, &out));
  const std::string head = "ubatch kernel level timings v1\nkey k1\n";
  EXPECT_FALSE(parse_level_cache(head + "level avx9000 passed 1 1 1\n", key, &out));
  EXPECT_FALSE(parse_level_cache(head + "level scalar maybe 1 1 1\n", key, &out));
  EXPECT_FALSE(parse_level_cache(head + "level scalar passed 1 1\n", key, &out));
  EXPECT_FALSE(parse_level_cache(head + "level scalar passed 1 1 1 1\n", key, &out));
  EXPECT_FALSE(parse_level_cache(head + "level scalar passed 1 x 1\n", key, &out));
  EXPECT_FALSE(parse_level_cache(head + "level scalar passed 1 nan 1\n", key, &out));
  EXPECT_FALSE(parse_level_cache(head + "level scalar passed 1 -2 1\n", key, &out));
  EXPECT_FALSE(parse_level_cache(head + "scalar passed 1 1 1\n", key, &out));
  ASSERT_EQ(out.size(), 1u);  // untouched by every failure
  EXPECT_EQ(out[0].level, L::Avx2);
  EXPECT_TRUE(parse_level_cache(head, key, &out));  // no levels: valid, empty
  EXPECT_TRUE(out.empty());
}

TEST(LevelPlan, CachePath) {
  const std::string a = level_cache_path("/x/cache", "/home/u", "key one");
  EXPECT_EQ(a.rfind("/x/cache/ubatch/kernel-levels-", 0), 0u) << a;
  EXPECT_EQ(a.size(), std::string("/x/cache/ubatch/kernel-levels-").size() + 16 + 4) << a;
  EXPECT_EQ(a.substr(a.size() - 4), ".txt");
  EXPECT_NE(level_cache_path("/x/cache", "/home/u", "key two"), a);  // one file per CPU model
  // The build part of the key (" | build ..."): the same file, rewritten by another build.
  EXPECT_EQ(level_cache_path("/x/cache", "/home/u", "key one | build 123 456"), a);
  EXPECT_EQ(level_cache_path("/x/cache", "/home/u", "key one | build 789 1"), a);
  EXPECT_NE(level_cache_key().find(" | build "), std::string::npos) << level_cache_key();
  EXPECT_EQ(level_cache_path("", "/home/u", "key one").rfind("/home/u/.cache/ubatch/kernel-levels-", 0), 0u);
  EXPECT_EQ(level_cache_path(nullptr, "/home/u", "key one").rfind("/home/u/.cache/ubatch/kernel-levels-", 0), 0u);
  EXPECT_EQ(level_cache_path(nullptr, nullptr, "key one"), "");
  EXPECT_EQ(level_cache_path("", "", "key one"), "");
  // The key names the CPU model and this build's levels.
  EXPECT_NE(level_cache_key().find(simd_level_names()), std::string::npos) << level_cache_key();
}

// The levels this CPU runs in this build (AMX only after its self-check).
std::vector<L> levels_here() {
  std::vector<L> out = {L::Scalar};
#if defined(UBATCH_X86_KERNELS)
  if (cpu_features().avx2) out.push_back(L::Avx2);
  if (cpu_features().avx512 && cpu_features().avx512_vnni) out.push_back(L::Avx512);
  if (amx_matmul_usable()) out.push_back(L::Amx);
#elif defined(UBATCH_ARM_KERNELS)
  if (cpu_features().neon) out.push_back(L::Neon);
  if (cpu_features().dotprod) out.push_back(L::Dotprod);
#endif
  return out;
}

TEST(LevelPlan, MeasurementOnThisCpu) {
  const std::vector<L> levels = levels_here();
  double spent = 0;
  const std::vector<LevelTiming> t = detail::measure_levels(levels, &spent);
  std::printf("measured in %.1f ms:\n%s", 1000 * spent, format_level_cache(level_cache_key(), t).c_str());
  ASSERT_EQ(t.size(), levels.size());
  for (size_t i = 0; i < t.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(t[i].level, t[i - 1].level);  // highest first
    }
    EXPECT_TRUE(t[i].passed) << simd_level_name(t[i].level) << " failed its self-check";
    for (double s : t[i].seconds) EXPECT_GT(s, 0.0) << simd_level_name(t[i].level);
  }
  EXPECT_EQ(t.back().level, L::Scalar);
  EXPECT_LT(spent, 2.0);
  // Scalar is always measured, as the self-check's reference.
  EXPECT_EQ(detail::measure_levels({}, nullptr).size(), 1u);
  // The plan this process runs: within the ceiling, decided somehow, said how.
  const MatmulLevels& m = matmul_levels();
  for (L l : m.plan.level) EXPECT_LE(l, m.ceiling);
  EXPECT_EQ(m.ceiling, matmul_simd_level());
  EXPECT_FALSE(m.source.empty());
  std::printf("this process: %s\n", describe_matmul_levels().c_str());
}

}  // namespace
}  // namespace ubatch::kernels
