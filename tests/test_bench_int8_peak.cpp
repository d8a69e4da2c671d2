// The int8 peak probes (bench/int8_peak.h): each ISA loop's checksum against plain integer
// arithmetic (which proves the MACs counted per iteration are really done), the probes on a
// pool, and the int8 shares in the bench reports. Loops the CPU lacks skip visibly.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/int8_peak.h"
#include "bench/int8_peak_loops.h"
#include "bench/llm_bench.h"
#include "kernels/amx.h"
#include "kernels/cpu_features.h"

namespace ubatch::bench {
namespace {

#if defined(UBATCH_X86_KERNELS)
// The 4 bytes of a broadcast 32-bit pattern, low byte first.
uint8_t byte_of(uint32_t pattern, int k) { return static_cast<uint8_t>(pattern >> (8 * k)); }

int32_t sat16(int32_t v) { return v < -32768 ? -32768 : v > 32767 ? 32767 : v; }

constexpr int64_t kIters = 1000;

TEST(BenchInt8Peak, VnniLoopDoesItsMacs) {
  if (!kernels::cpu_features().avx512_vnni) GTEST_SKIP() << "CPU has no AVX-512 VNNI";
  const int32_t seed = 3;
  const uint32_t a = static_cast<uint32_t>(seed) | 0x01010101u, b = 0x01fe01feu ^ static_cast<uint32_t>(seed);
  int32_t dot = 0;  // one lane of one vpdpbusd: 4 u8·s8 products
  for (int k = 0; k < 4; ++k) dot += int32_t{byte_of(a, k)} * int32_t{static_cast<int8_t>(byte_of(b, k))};
  // 16 accumulators × 16 lanes, kIters steps each (int32 wrap-around as in the registers).
  const uint32_t expect = static_cast<uint32_t>(dot) * 16u * 16u * static_cast<uint32_t>(kIters);
  EXPECT_EQ(static_cast<uint32_t>(avx512::vnni_loop(kIters, seed)), expect);
  EXPECT_EQ(avx512::kVnniMacsPerIter, 16 * 16 * 4);  // 16 vpdpbusd × 16 lanes × 4 products
}

TEST(BenchInt8Peak, Avx2LoopDoesItsMacs) {
  if (!kernels::cpu_features().avx2) GTEST_SKIP() << "CPU has no AVX2";
  const int32_t seed = 5;
  const uint32_t a = static_cast<uint32_t>(seed) | 0x01010101u, b = 0x01fe01feu ^ static_cast<uint32_t>(seed);
  auto prod = [&](int k) { return int32_t{byte_of(a, k)} * int32_t{static_cast<int8_t>(byte_of(b, k))}; };
  const int32_t lane = sat16(prod(0) + prod(1)) + sat16(prod(2) + prod(3));  // vpmaddubsw, vpmaddwd
  // 4 chains × 8 int32 lanes, kIters steps each.
  const uint32_t expect = static_cast<uint32_t>(lane) * 4u * 8u * static_cast<uint32_t>(kIters);
  EXPECT_EQ(static_cast<uint32_t>(avx2::maddubs_loop(kIters, seed)), expect);
  EXPECT_EQ(avx2::kMaddubsMacsPerIter, 4 * 32);  // 4 vpmaddubsw × 32 u8·s8 products
}

TEST(BenchInt8Peak, AmxLoopDoesItsMacs) {
  std::string why;
  if (!kernels::amx_available(&why)) GTEST_SKIP() << "AMX not available: " << why;
  const int32_t seed = 9;
  uint32_t one_tile = 0;  // Σ over C of one product A·B, data as the loop builds it
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n)
      for (int k = 0; k < 64; ++k) {
        const int ia = m * 64 + k, ib = (k / 4) * 64 + n * 4 + k % 4;
        const int32_t av = static_cast<uint8_t>(ia + seed), bv = static_cast<int8_t>(ib * 7 - seed);
        one_tile += static_cast<uint32_t>(av * bv);
      }
  const uint32_t expect = one_tile * 4u * static_cast<uint32_t>(kIters);  // 4 C tiles
  EXPECT_EQ(static_cast<uint32_t>(amx::tdpbusd_loop(kIters, seed)), expect);
  kernels::amx_release();
  EXPECT_EQ(amx::kTdpbusdMacsPerIter, 4 * 16 * 16 * 64);
}
#else
// The probe loops are x86-64 code: other builds report every probe as not measurable, with
// the reason, and never run one.
TEST(BenchInt8Peak, ProbesAreX86Only) {
  for (Int8Isa isa : {Int8Isa::Avx512Vnni, Int8Isa::Avx2, Int8Isa::Amx}) {
    std::string why;
    EXPECT_FALSE(int8_isa_supported(isa, &why)) << int8_isa_name(isa);
    EXPECT_EQ(why, "x86-64 probe, not built for this architecture");
  }
}
#endif

TEST(BenchInt8Peak, MeasuresWhatTheCpuHas) {
  kernels::ThreadPool pool(2);
  Result<Int8Peaks> peaks = measure_int8_peaks(pool, 1, 0.005);
  ASSERT_TRUE(peaks) << peaks.message();
  EXPECT_EQ(peaks->n_threads, 2);
  for (const Int8Peak* p : {&peaks->avx512_vnni, &peaks->avx2, &peaks->amx}) {
    std::string why;
    const bool supported = int8_isa_supported(p->isa, &why);
    EXPECT_EQ(p->measured, supported) << int8_isa_name(p->isa);
    if (supported) {
      EXPECT_GT(p->gmacs, 0) << int8_isa_name(p->isa);
      EXPECT_DOUBLE_EQ(p->gops(), 2 * p->gmacs);
      EXPECT_TRUE(p->why.empty());
      EXPECT_EQ(p->n_runs, 1);
    } else {
      EXPECT_EQ(p->gmacs, 0);
      EXPECT_EQ(p->why, why);
      EXPECT_FALSE(why.empty());
    }
  }
  std::printf("int8 peaks (2 threads, short runs): %s\n", describe_int8_peaks(peaks.value()).c_str());
}

TEST(BenchInt8Peak, RejectsBadArguments) {
  kernels::ThreadPool pool(1);
  EXPECT_FALSE(measure_int8_peak(Int8Isa::Avx2, pool, 0));
  EXPECT_FALSE(measure_int8_peak(Int8Isa::Avx2, pool, 1, 0.0));
  EXPECT_FALSE(measure_int8_peaks(pool, 0));
}

Int8Peaks sample_peaks() {
  Int8Peaks p;
  p.n_threads = 2;
  p.avx512_vnni.measured = true;
  p.avx512_vnni.gmacs = 200;  // 400 GOP/s
  p.avx512_vnni.n_runs = 3;
  p.avx2.measured = true;
  p.avx2.gmacs = 50;
  p.avx2.n_runs = 3;
  p.amx.why = "CPU has no AMX-INT8";
  return p;
}

TEST(BenchInt8Peak, DescribeAndJson) {
  Int8Peaks p = sample_peaks();
  EXPECT_EQ(describe_int8_peaks(p), "avx512-vnni 400.0 GOP/s, avx2 100.0 GOP/s, amx: not available: CPU has no AMX-INT8");
  EXPECT_EQ(p.best_vector(), &p.avx512_vnni);
  nlohmann::json j = int8_peaks_json(p);
  EXPECT_EQ(j["n_threads"], 2);
  EXPECT_EQ(j["best_vector_isa"], "avx512-vnni");
  EXPECT_DOUBLE_EQ(j["avx512_vnni"]["gops"].get<double>(), 400.0);
  EXPECT_FALSE(j["amx"]["measured"].get<bool>());
  EXPECT_EQ(j["amx"]["why"], "CPU has no AMX-INT8");
  p.avx512_vnni.measured = false;
  EXPECT_EQ(p.best_vector(), &p.avx2);
  p.avx2.measured = false;
  EXPECT_EQ(p.best_vector(), nullptr);
  EXPECT_TRUE(int8_peaks_json(p)["best_vector_isa"].is_null());
}

TEST(BenchInt8Peak, SharesInReports) {
  BenchReport rep;
  rep.model.desc = "llama 1M Q8_0";
  rep.machine.simd = "avx512";
  rep.machine.simd_reason = "amx not used: CPU has no AMX-INT8";
  rep.machine.int8_peaks.push_back(sample_peaks());
  BenchResult pp;
  pp.config = {2, 512, 128};
  pp.test = {64, 0, 1, false};
  pp.n_threads = 2;
  pp.prompt_s = {0.5};
  pp.gen_s = {0};
  compute_rates(pp);
  pp.prompt_gflops = 40;
  pp.prompt_peak_share = 0.4;
  apply_int8_roofline(pp, rep.machine.int8_peaks_for(2), false);
  EXPECT_EQ(pp.int8_isa, "avx512-vnni");
  EXPECT_DOUBLE_EQ(pp.prompt_int8_share, 0.1);
  EXPECT_EQ(pp.prompt_amx_share, 0.0);
  // amx level with a measured AMX peak: that share too.
  BenchResult amx = pp;
  Int8Peaks with_amx = sample_peaks();
  with_amx.amx.measured = true;
  with_amx.amx.gmacs = 1000;
  apply_int8_roofline(amx, &with_amx, true);
  EXPECT_DOUBLE_EQ(amx.prompt_amx_share, 0.02);
  apply_int8_roofline(amx, nullptr, true);  // unknown peaks: cleared
  EXPECT_EQ(amx.prompt_int8_share, 0.0);
  EXPECT_TRUE(amx.int8_isa.empty());
  // Which level ran where (issue 24): the plan in the header, the phase's level per row.
  pp.prompt_level = "prefill avx512";
  rep.machine.matmul_levels = "decode avx2, small-batch avx512, prefill avx512";
  rep.machine.matmul_levels_source = "measured now in 40 ms";
  rep.machine.matmul_level_by_class = {{"decode", "avx2"}, {"small-batch", "avx512"}, {"prefill", "avx512"}};
  rep.results = {pp};

  const std::string md = format_markdown(rep);
  EXPECT_NE(md.find("SIMD avx512 (amx not used: CPU has no AMX-INT8)"), std::string::npos) << md;
  EXPECT_NE(md.find("- matmul levels: decode avx2, small-batch avx512, prefill avx512 (measured now in 40 ms)\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 40.00 GFLOP/s (40% peak, 10% avx512-vnni) | prefill avx512 |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("- int8 peak (2 threads): avx512-vnni 400.0 GOP/s, avx2 100.0 GOP/s, amx: not available: "),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("40.00 GFLOP/s (40% peak, 10% avx512-vnni)"), std::string::npos) << md;

  const std::string csv = format_csv(rep);
  const std::string header = csv.substr(0, csv.find('\n'));
  EXPECT_NE(header.find(",simd,int8_isa,int8_peak_gops,prompt_int8_share,amx_peak_gops,prompt_amx_share"),
            std::string::npos);
  EXPECT_NE(csv.find(",\"avx512\",\"avx512-vnni\",400.0000,0.1000,0.0000,0.0000,\"prefill avx512\",\"\"\n"),
            std::string::npos)
      << csv;

  nlohmann::json j = to_json(rep);
  EXPECT_EQ(j["machine"]["simd_reason"], "amx not used: CPU has no AMX-INT8");
  EXPECT_EQ(j["machine"]["matmul_levels"]["small-batch"], "avx512");
  EXPECT_EQ(j["machine"]["matmul_levels"]["source"], "measured now in 40 ms");
  EXPECT_EQ(j["results"][0]["prompt_level"], "prefill avx512");
  EXPECT_EQ(j["results"][0]["gen_level"], "");
  EXPECT_DOUBLE_EQ(j["machine"]["int8_peak"][0]["avx2"]["gops"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(j["results"][0]["prompt_int8_share"].get<double>(), 0.1);
  EXPECT_EQ(j["results"][0]["int8_isa"], "avx512-vnni");

  const std::string peaks_csv = format_peaks_csv(rep.machine);
  EXPECT_NE(peaks_csv.find("int8_peak,2,avx512-vnni,1,,200.0000,400.0000,\"\"\n"), std::string::npos) << peaks_csv;
  EXPECT_NE(peaks_csv.find("int8_peak,2,amx,0,,0.0000,0.0000,\"CPU has no AMX-INT8\"\n"), std::string::npos) << peaks_csv;
}

}  // namespace
}  // namespace ubatch::bench
