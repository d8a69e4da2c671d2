// End to end: the real `ubatch logits` binary gives the same bytes under every instruction
// set (UBATCH_SIMD=scalar, avx2, avx512, amx on x86-64; scalar, neon, dotprod on aarch64) for
// every tiny reference model, with the KV
// cache in f16 and in q8_0. Levels this CPU lacks are skipped with a printed line; the whole
// test skips, visibly, without ../shared/reference.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "qwen35moe_from_dense.h"
#include "support.h"

namespace ubatch {
namespace {

// The tiny models of ../shared/reference/models (its README): every architecture, float and
// quantized weights.
const char* const kModels[] = {
    "tiny-gemma3-f16",   "tiny-gemma3-f32",   "tiny-gemma3-q4_k_m", "tiny-gemma3-q8_0",
    "tiny-llama-bf16",   "tiny-llama-f16",    "tiny-llama-f32",     "tiny-llama-q2_k",
    "tiny-llama-q3_k_m", "tiny-llama-q4_0",   "tiny-llama-q4_1",    "tiny-llama-q4_k_m",
    "tiny-llama-q5_0",   "tiny-llama-q5_1",   "tiny-llama-q5_k_m",  "tiny-llama-q6_k",
    "tiny-llama-q8_0",
    "tiny-qwen2-f32",    "tiny-qwen2-q8_0",   "tiny-qwen2-q4_k_m",
    "tiny-qwen3-f32",    "tiny-qwen3-q8_0",   "tiny-qwen3-q4_k_m",
    "tiny-phi3-f32",     "tiny-phi3-q8_0",    "tiny-phi3-q4_k_m",
    "tiny-llama3-f32",   "tiny-llama3-q8_0",  "tiny-llama3-q4_k_m",
    "tiny-gemma2-f32",   "tiny-gemma2-q8_0",  "tiny-gemma2-q4_k_m",
    "tiny-smollm3-f32",  "tiny-smollm3-q8_0", "tiny-smollm3-q4_k_m",
    // The hybrid recurrent architectures (reference/hybrid/models).
    "hybrid/tiny-qwen35-f32", "hybrid/tiny-qwen35-q8_0", "hybrid/tiny-qwen35-q4_k_m",
    "hybrid/tiny-lfm2-f32",   "hybrid/tiny-lfm2-q8_0",   "hybrid/tiny-lfm2-q4_k_m",
    // The mixture-of-experts architectures (reference/moe/models).
    "moe/tiny-qwen3moe-f32",  "moe/tiny-qwen3moe-q8_0",  "moe/tiny-qwen3moe-q4_k_m",
    "moe/tiny-gptoss-f32",    "moe/tiny-gptoss-mxfp4_moe", "moe/tiny-gptoss-q8_0"};

// reference/models/<name>.gguf, or reference/hybrid/models/<name>.gguf for "hybrid/<name>"
// (reference/moe/models/ for "moe/<name>").
std::string level_model_path(const std::string& param) {
  if (param.rfind("hybrid/", 0) == 0) return test::reference_path("hybrid/models/" + param.substr(7) + ".gguf");
  if (param.rfind("moe/", 0) == 0) return test::reference_path("moe/models/" + param.substr(4) + ".gguf");
  return test::reference_path("models/" + param + ".gguf");
}

// The levels this build and CPU run (scalar always); prints one line per level it skips.
std::vector<std::string> levels_here() {
  std::vector<std::string> levels = {"scalar"};
  const kernels::CpuFeatures& f = kernels::cpu_features();
#if defined(UBATCH_X86_KERNELS)
  if (f.avx2) levels.push_back("avx2");
  else std::printf("skipped level avx2: CPU has no AVX2/FMA/F16C\n");
  if (f.avx512) levels.push_back("avx512");
  else std::printf("skipped level avx512: CPU has no AVX-512 F/BW/VL/DQ\n");
  std::string why;
  // AMX only where the engine would use it (CPU, OS permission and the start-up self-check).
  if (kernels::cpu_simd_level(&why) == kernels::SimdLevel::Amx && kernels::amx_matmul_usable(&why))
    levels.push_back("amx");
  else std::printf("skipped level amx: %s\n", why.c_str());
#elif defined(UBATCH_ARM_KERNELS)
  if (f.neon) levels.push_back("neon");
  else std::printf("skipped level neon: CPU has no NEON (HWCAP_ASIMD)\n");
  if (f.dotprod) levels.push_back("dotprod");
  else std::printf("skipped level dotprod: CPU has no dot product (HWCAP_ASIMDDP)\n");
#else
  (void)f;
  std::printf("skipped the SIMD levels: this build has none (%s)\n", kernels::simd_level_names());
#endif
  return levels;
}

// `ubatch logits` of 70 tokens on `model` (label: `name`) at every level, with the KV cache in
// f16 and (where the heads take it) q8_0: the same bytes on every level.
// extra_args: more `ubatch logits` options (e.g. "--state-type bf16").
void check_levels(const std::string& model, const std::string& name, bool q8_kv, const std::string& extra_args = "");

class LevelsLogits : public ::testing::TestWithParam<const char*> {};

// 70 tokens: two chunks of the attention's online softmax (64 cells), the sliding window of
// the Gemma layers, one forward pass (prefill: the heads of a KV group share each pass).
TEST_P(LevelsLogits, SameBytesOnEveryLevel) {
  UBATCH_REQUIRE_REFERENCE();
  const std::string model = level_model_path(GetParam());
  ASSERT_TRUE(std::filesystem::exists(model)) << model;
  // The qwen3moe files' heads of 80 take no Q8_0 KV cache (refused by the context).
  check_levels(model, GetParam(), std::string(GetParam()).find("qwen3moe") == std::string::npos);
}

// The qwen35 files with a BF16 recurrent state (--state-type bf16): the state's rounding is the
// same on every level (AVX512_BF16's instruction where the CPU has it, integer arithmetic
// elsewhere), so the bytes are too.
TEST(LevelsLogitsBf16State, SameBytesOnEveryLevel) {
  UBATCH_REQUIRE_REFERENCE();
  std::printf("avx512_bf16 %s on this CPU\n", kernels::cpu_features().avx512_bf16 ? "present" : "absent");
  for (const char* name : {"hybrid/tiny-qwen35-f32", "hybrid/tiny-qwen35-q8_0"}) {
    SCOPED_TRACE(name);
    check_levels(level_model_path(name), std::string(name) + "_bf16_state", false, "--state-type bf16");
  }
  // The option reaches the model: other bytes than the F32 state's.
  std::vector<uint8_t> bytes[2];
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("ubatch_levels_" + std::to_string(getpid()) + "_state_type.f32")).string();
  for (int i = 0; i < 2; ++i) {
    int status = -1;
    const std::string cmd = test::ubatch_command() + " logits -m " + level_model_path("hybrid/tiny-qwen35-f32") +
                            " -c 128 -t 1 --tokens 1,5,9,13,17,21,25,29 -o " + out +
                            (i ? " --state-type bf16" : " --state-type f32") + " 2>&1";
    const std::string log = test::run_command(cmd, &status);
    ASSERT_EQ(status, 0) << cmd << "\n" << log;
    bytes[i] = test::read_file(out);
  }
  std::filesystem::remove(out);
  EXPECT_FALSE(bytes[0] == bytes[1]) << "--state-type bf16 gave the F32 state's logits";
}

// qwen35moe has no reference files: files built from the qwen35 ones (tests/qwen35moe_from_dense.h)
// — experts that differ under a pseudo-random router with a gated shared expert (F32), and
// quantized experts that copy the dense FFN (Q4_K_M, Q8_0) — written to temporary files.
TEST(LevelsLogitsQwen35Moe, SameBytesOnEveryLevel) {
  UBATCH_REQUIRE_REFERENCE();
  test::Qwen35MoeFromDense distinct;
  distinct.expert_down_scale = {0.5f, 1.5f, -1.0f, 2.0f};
  distinct.shared_down_scale = 1;
  distinct.shared_gate_scale = 0.1f;
  const std::pair<const char*, test::Qwen35MoeFromDense> files[] = {
      {"tiny-qwen35-f32", distinct}, {"tiny-qwen35-q4_k_m", {}}, {"tiny-qwen35-q8_0", {}}};
  for (const auto& [dense, o] : files) {
    SCOPED_TRACE(dense);
    Result<std::unique_ptr<gguf::File>> f = gguf::File::open(level_model_path(std::string("hybrid/") + dense));
    ASSERT_TRUE(f.is_ok()) << f.message();
    const std::vector<uint8_t> bytes = test::qwen35moe_from_qwen35(*f.value(), o);
    ASSERT_FALSE(bytes.empty());
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("ubatch_levels_" + std::to_string(getpid()) + "_qwen35moe_" + dense + ".gguf"))
                                 .string();
    std::FILE* out = std::fopen(path.c_str(), "wb");
    ASSERT_TRUE(out);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), out), bytes.size());
    std::fclose(out);
    check_levels(path, std::string("qwen35moe_from_") + dense, true);
    std::filesystem::remove(path);
  }
}

void check_levels(const std::string& model, const std::string& name, bool q8_kv, const std::string& extra_args) {
  std::string tokens;
  for (int i = 0; i < 70; ++i) {
    if (i > 0) tokens += ',';
    tokens += std::to_string(1 + (i * 37 + 11) % 500);
  }
  const std::vector<std::string> levels = levels_here();
  if (levels.size() < 2) GTEST_SKIP() << "only the scalar level runs on this CPU";
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("ubatch_levels_" + std::to_string(getpid()) + "_" +
                            std::filesystem::path(name).filename().string() + ".f32"))
                              .string();
  for (const char* kv : {"f16", "q8_0"}) {
    if (!q8_kv && std::string(kv) == "q8_0") continue;
    std::vector<uint8_t> first;
    for (const std::string& level : levels) {
      int status = -1;
      // UBATCH_KERNEL_TUNE=off: the level itself for every shape (not the fastest one up to it).
      const std::string cmd = "UBATCH_SIMD=" + level + " UBATCH_KERNEL_TUNE=off " + test::ubatch_command() +
                              " logits -m " + model + " -c 128 -t 1 --kv-type " + kv +
                              " --tokens " + tokens + " -o " + out + " " + extra_args + " 2>&1";
      const std::string log = test::run_command(cmd, &status);
      ASSERT_EQ(status, 0) << cmd << "\n" << log;
      const std::vector<uint8_t> bytes = test::read_file(out);
      ASSERT_EQ(bytes.size(), 70u * 512u * sizeof(float)) << cmd;
      if (first.empty())
        first = bytes;
      else
        EXPECT_TRUE(bytes == first) << name << " kv " << kv << ": level " << level
                                    << " differs from " << levels[0];
    }
  }
  std::filesystem::remove(out);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, LevelsLogits, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-' || c == '/') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace ubatch
