// CPU feature detection, the SIMD level and its UBATCH_SIMD cap, and the AMX plumbing
// (kernels/cpu_features.h, kernels/amx.h). The first test prints what this machine has, so
// CTest's output records which paths the other tests exercised. The AMX tile test runs only
// where amx_available() and skips visibly, with the reason, elsewhere.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kernels/amx.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "support.h"

namespace ubatch::kernels {
namespace {

TEST(CpuFeatures, PrintsDetected) {
  const CpuFeatures& f = cpu_features();
  std::string why;
  const bool amx = amx_available(&why);
  std::printf("cpu features: avx2 %d, avx512 %d, avx512_vnni %d, avx_vnni %d, amx_int8 %d, os_amx %d\n", f.avx2,
              f.avx512, f.avx512_vnni, f.avx_vnni, f.amx_int8, f.os_amx);
  std::printf("cpu features: neon %d, dotprod %d, i8mm %d\n", f.neon, f.dotprod, f.i8mm);
  std::printf("amx available: %s%s\n", amx ? "yes" : "no: ", why.c_str());
  std::printf("simd level: %s (%s); this build's levels: %s\n", simd_level_name(simd_level()),
              *simd_level_reason() ? simd_level_reason() : "highest level", simd_level_names());
  // Feature implications that hold on every CPU.
  EXPECT_TRUE(!f.avx512 || f.avx2);
  EXPECT_TRUE(!f.avx512_vnni || f.avx512);
  EXPECT_TRUE(!f.avx_vnni || f.avx2);
  EXPECT_TRUE(!f.dotprod || f.neon);
  EXPECT_TRUE(!f.i8mm || f.neon);
  // One architecture's features at most.
  EXPECT_FALSE(f.avx2 && f.neon);
}

TEST(CpuFeatures, ParseSimdCap) {
  bool ok = false;
  EXPECT_EQ(parse_simd_cap("scalar", &ok), SimdLevel::Scalar);
  EXPECT_TRUE(ok);
  // Unset or empty: no cap, not an error.
  EXPECT_EQ(parse_simd_cap(nullptr, &ok), top_simd_level());
  EXPECT_TRUE(ok);
  EXPECT_EQ(parse_simd_cap("", &ok), top_simd_level());
  EXPECT_TRUE(ok);
  std::vector<const char*> bad = {"AVX2", "avx", "avx512vnni", "sse4", " avx2", "NEON", "dot", "sve"};
#if defined(UBATCH_X86_KERNELS)
  EXPECT_EQ(top_simd_level(), SimdLevel::Amx);
  EXPECT_STREQ(simd_level_names(), "amx, avx512, avx2, scalar");
  EXPECT_EQ(parse_simd_cap("amx", &ok), SimdLevel::Amx);
  EXPECT_TRUE(ok);
  EXPECT_EQ(parse_simd_cap("avx512", &ok), SimdLevel::Avx512);
  EXPECT_TRUE(ok);
  EXPECT_EQ(parse_simd_cap("avx2", &ok), SimdLevel::Avx2);
  EXPECT_TRUE(ok);
  EXPECT_EQ(parse_simd_cap("avx2", nullptr), SimdLevel::Avx2);
  bad.insert(bad.end(), {"neon", "dotprod"});  // another architecture's levels
#elif defined(UBATCH_ARM_KERNELS)
  EXPECT_EQ(top_simd_level(), SimdLevel::Dotprod);
  EXPECT_STREQ(simd_level_names(), "dotprod, neon, scalar");
  EXPECT_EQ(parse_simd_cap("dotprod", &ok), SimdLevel::Dotprod);
  EXPECT_TRUE(ok);
  EXPECT_EQ(parse_simd_cap("neon", &ok), SimdLevel::Neon);
  EXPECT_TRUE(ok);
  EXPECT_EQ(parse_simd_cap("neon", nullptr), SimdLevel::Neon);
  bad.insert(bad.end(), {"avx2", "avx512", "amx"});
#else
  EXPECT_EQ(top_simd_level(), SimdLevel::Scalar);
  bad.insert(bad.end(), {"avx2", "neon"});
#endif
  // Anything else: no cap, reported.
  for (const char* b : bad) {
    ok = true;
    EXPECT_EQ(parse_simd_cap(b, &ok), top_simd_level()) << b;
    EXPECT_FALSE(ok) << b;
  }
}

TEST(CpuFeatures, LevelNames) {
  EXPECT_STREQ(simd_level_name(SimdLevel::Scalar), "scalar");
  EXPECT_STREQ(simd_level_name(SimdLevel::Avx2), "avx2");
  EXPECT_STREQ(simd_level_name(SimdLevel::Avx512), "avx512");
  EXPECT_STREQ(simd_level_name(SimdLevel::Amx), "amx");
  EXPECT_STREQ(simd_level_name(SimdLevel::Neon), "neon");
  EXPECT_STREQ(simd_level_name(SimdLevel::Dotprod), "dotprod");
  // Each architecture's ladder, above Scalar.
  EXPECT_GT(SimdLevel::Avx2, SimdLevel::Scalar);
  EXPECT_GT(SimdLevel::Amx, SimdLevel::Avx512);
  EXPECT_GT(SimdLevel::Neon, SimdLevel::Scalar);
  EXPECT_GT(SimdLevel::Dotprod, SimdLevel::Neon);
}

TEST(CpuFeatures, LevelFollowsTheCpu) {
  const CpuFeatures& f = cpu_features();
  std::string why;
  const SimdLevel cpu = cpu_simd_level(&why);
  EXPECT_LE(simd_level(), cpu);
  EXPECT_EQ(why.empty(), cpu == top_simd_level()) << why;
  EXPECT_EQ(*simd_level_reason() == '\0', simd_level() == top_simd_level()) << simd_level_reason();
#if defined(UBATCH_X86_KERNELS)
  EXPECT_EQ(cpu >= SimdLevel::Avx2, f.avx2);
  EXPECT_EQ(cpu >= SimdLevel::Avx512, f.avx512);
  EXPECT_EQ(cpu == SimdLevel::Amx, f.avx512_vnni && amx_available());
  if (!f.amx_int8) {
    EXPECT_NE(cpu, SimdLevel::Amx);
    if (f.avx512_vnni) {
      EXPECT_EQ(why, "amx not used: CPU has no AMX-INT8");
    }
  }
#elif defined(UBATCH_ARM_KERNELS)
  EXPECT_EQ(cpu >= SimdLevel::Neon, f.neon);
  EXPECT_EQ(cpu == SimdLevel::Dotprod, f.dotprod);
  if (f.neon && !f.dotprod) {
    EXPECT_EQ(why, "dotprod not used: CPU has no dot product (HWCAP_ASIMDDP)");
  }
#else
  (void)f;
  EXPECT_EQ(cpu, SimdLevel::Scalar);
#endif
}

TEST(CpuAmx, TileConfigLayout) {
  static_assert(offsetof(AmxTileConfig, palette_id) == 0);
  static_assert(offsetof(AmxTileConfig, start_row) == 1);
  static_assert(offsetof(AmxTileConfig, colsb) == 16);
  static_assert(offsetof(AmxTileConfig, rows) == 48);
  AmxTileConfig cfg;
  EXPECT_EQ(cfg.palette_id, 1);
  EXPECT_TRUE(cfg.valid());
  cfg.set_tile(0, 16, 64).set_tile(7, 8, 32);
  EXPECT_EQ(cfg.rows[0], 16);
  EXPECT_EQ(cfg.colsb[0], 64);
  EXPECT_EQ(cfg.rows[7], 8);
  EXPECT_EQ(cfg.colsb[7], 32);
  EXPECT_TRUE(cfg.valid());
  AmxTileConfig other = cfg;
  EXPECT_TRUE(other == cfg);
  other.set_tile(1, 4, 16);
  EXPECT_FALSE(other == cfg);
  AmxTileConfig bad = cfg;
  bad.rows[0] = 17;
  EXPECT_FALSE(bad.valid());
  bad = cfg;
  bad.colsb[8] = 4;  // palette 1 has 8 tiles
  EXPECT_FALSE(bad.valid());
  bad = cfg;
  bad.palette_id = 0;
  EXPECT_FALSE(bad.valid());
}

TEST(CpuAmx, AvailabilityHasAReason) {
  std::string why;
  const bool ok = amx_available(&why);
  EXPECT_EQ(ok, amx_available());  // cached: same answer
  if (ok) {
    EXPECT_TRUE(cpu_features().amx_int8 && cpu_features().os_amx);
  } else {
    EXPECT_FALSE(why.empty());
#if defined(__linux__) && defined(__x86_64__)
    if (!cpu_features().amx_int8) {
      EXPECT_EQ(why, "CPU has no AMX-INT8");
    }
#else
    EXPECT_EQ(why, "AMX needs Linux on x86-64");
#endif
  }
}

// c += A·B computed with plain integers, in the layouts of amx_dot_tile_u8s8.
void reference_dot(const std::vector<uint8_t>& a, const std::vector<int8_t>& b, std::vector<int32_t>& c) {
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      int32_t sum = 0;
      for (int k = 0; k < 64; ++k) sum += int32_t{a[m * 64 + k]} * int32_t{b[(k / 4) * 64 + n * 4 + k % 4]};
      c[m * 16 + n] += sum;
    }
}

TEST(CpuAmx, TileProductMatchesIntegerLoop) {
  std::string why;
  if (!amx_available(&why)) GTEST_SKIP() << "AMX not available: " << why;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> a(16 * 64);
  std::vector<int8_t> b(16 * 64);
  std::vector<int32_t> c(16 * 16), expect(16 * 16);
  for (uint8_t& v : a) v = static_cast<uint8_t>(byte(rng));
  for (int8_t& v : b) v = static_cast<int8_t>(byte(rng) - 128);
  for (size_t i = 0; i < c.size(); ++i) c[i] = expect[i] = static_cast<int32_t>(i) * 1000 - 77777;
  reference_dot(a, b, expect);
  amx_dot_tile_u8s8(a.data(), b.data(), c.data());
  EXPECT_EQ(c, expect);
  // Again: the configuration is cached for this thread, the product accumulates.
  reference_dot(a, b, expect);
  amx_dot_tile_u8s8(a.data(), b.data(), c.data());
  EXPECT_EQ(c, expect);
  // A released thread configures its tiles again on the next use.
  amx_release();
  reference_dot(a, b, expect);
  amx_dot_tile_u8s8(a.data(), b.data(), c.data());
  EXPECT_EQ(c, expect);
  amx_release();
}

TEST(CpuAmx, TileUseWithoutAmxAborts) {
  if (amx_available()) GTEST_SKIP() << "AMX is available here: nothing to refuse";
  GTEST_FLAG_SET(death_test_style, test::emulated() ? "fast" : "threadsafe");
  AmxTileConfig cfg;
  cfg.set_tile(0, 16, 64);
  EXPECT_DEATH(amx_load_config(cfg), "without AMX");
  EXPECT_DEATH(amx_ensure_config(cfg), "without AMX");
  amx_release();  // no-op without a loaded configuration
}

// The UBATCH_SIMD cap as the binary applies it (simd_level() is cached per process).
class CpuSimdCap : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::ubatch_binary())) GTEST_SKIP() << "binary not built: " << test::ubatch_binary();
  }
  // `ubatch bench --peaks-only -o json` with a given bandwidth and short int8 probes on one
  // thread: stdout and stderr together.
  std::string run(const std::string& env) {
    int status = 0;
    const std::string out = test::run_command(env + " " + test::ubatch_command() +
                                                  " bench --peaks-only --bw-gbps 1 -t 1 --probe-runs 1 -o json 2>&1",
                                              &status);
    EXPECT_EQ(status, 0) << out;
    return out;
  }
};

TEST_F(CpuSimdCap, EnvironmentCapsTheLevel) {
  std::string out = run("UBATCH_SIMD=scalar");
  EXPECT_NE(out.find("\"simd\": \"scalar\""), std::string::npos) << out;
  if (cpu_simd_level() > SimdLevel::Scalar) {
    EXPECT_NE(out.find("\"simd_reason\": \"capped by UBATCH_SIMD=scalar\""), std::string::npos) << out;
  }
  // The first level above Scalar of this build's ladder.
#if defined(UBATCH_X86_KERNELS)
  const SimdLevel first = SimdLevel::Avx2;
#elif defined(UBATCH_ARM_KERNELS)
  const SimdLevel first = SimdLevel::Neon;
#else
  const SimdLevel first = SimdLevel::Scalar;
#endif
  out = run(std::string("UBATCH_SIMD=") + simd_level_name(first));
  const SimdLevel expect = cpu_simd_level() >= first ? first : SimdLevel::Scalar;
  EXPECT_NE(out.find(std::string("\"simd\": \"") + simd_level_name(expect) + "\""), std::string::npos) << out;
  // The plan per shape class stays within the cap.
  EXPECT_NE(out.find("\"matmul_levels\""), std::string::npos) << out;
  if (expect == SimdLevel::Scalar) {
    EXPECT_NE(out.find("\"prefill\": \"scalar\""), std::string::npos) << out;
  }
  for (SimdLevel above : {SimdLevel::Avx512, SimdLevel::Amx, SimdLevel::Dotprod}) {
    if (above <= expect || above > top_simd_level()) continue;
    EXPECT_EQ(out.find(std::string(": \"") + simd_level_name(above) + "\""), std::string::npos) << out;
  }
  // A cap at (or above) the CPU's level changes nothing.
  out = run(std::string("UBATCH_SIMD=") + simd_level_name(top_simd_level()));
  EXPECT_NE(out.find(std::string("\"simd\": \"") + simd_level_name(cpu_simd_level()) + "\""), std::string::npos) << out;
}

// UBATCH_KERNEL_TUNE=off: the ceiling level for every shape class, no measurement; an
// unknown value warns and is ignored.
TEST_F(CpuSimdCap, KernelTuneOffUsesTheCeilingEverywhere) {
  std::string out = run("UBATCH_KERNEL_TUNE=off");
  const std::string level = simd_level_name(matmul_simd_level());
  for (const char* cls : {"decode", "small-batch", "prefill"})
    EXPECT_NE(out.find(std::string("\"") + cls + "\": \"" + level + "\""), std::string::npos) << cls << "\n" << out;
  EXPECT_NE(out.find("UBATCH_KERNEL_TUNE=off"), std::string::npos) << out;
  out = run("UBATCH_KERNEL_TUNE=sometimes");
  EXPECT_NE(out.find("warning: UBATCH_KERNEL_TUNE=sometimes is not one of off, measure; ignored"), std::string::npos)
      << out;
}

TEST_F(CpuSimdCap, UnknownValueWarnsAndIsIgnored) {
  const std::string out = run("UBATCH_SIMD=avx9000");
  EXPECT_NE(out.find(std::string("warning: UBATCH_SIMD=avx9000 is not one of ") + simd_level_names() + "; ignored"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(std::string("\"simd\": \"") + simd_level_name(cpu_simd_level()) + "\""), std::string::npos) << out;
}

}  // namespace
}  // namespace ubatch::kernels
