// Micro-benchmark of the activation quantization in front of the packed int8 GEMM
// (kernels::detail::pack_acts_avx2 and pack_acts_avx512, kernels/gemm_internal.h): N_TOKENS rows of
// N_IN normally distributed floats quantized into the layout of TYPE's packed weights (Q8_0: 32-value
// blocks; the K-quants: 256-value blocks with segment sums), one thread. Prints the best of 50
// passes of 100 calls, per call, for each level this CPU runs.
//
// Not part of the default build. Build against the kernels library of a build directory:
//   cmake --build build --target ubatch_kernels
//   g++ -O2 -std=c++20 -Isrc bench/bench_pack_acts.cpp build/libubatch_kernels.a
//       build/libubatch_common.a -lfmt -pthread -o build/bench_pack_acts   (one command line)
// Run:
//   build/bench_pack_acts [N_IN [N_TOKENS]]     (default 1024 32)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/gemm_internal.h"

using namespace ubatch;
using namespace ubatch::kernels;

int main(int argc, char** argv) {
  const int64_t n_in = argc > 1 ? std::atoll(argv[1]) : 1024;
  const int64_t n_tokens = argc > 2 ? std::atoll(argv[2]) : 32;
  if (n_in <= 0 || n_in % 256 != 0 || n_tokens <= 0)
    return std::fprintf(stderr, "N_IN must be a positive multiple of 256, N_TOKENS positive\n"), 2;
  std::vector<float> x(static_cast<size_t>(n_in * n_tokens));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  for (TensorType type : {TensorType::Q8_0, TensorType::Q4_K}) {
    PackedFormat f;
    packed_format(type, f);
    const detail::ActLayout a = detail::act_layout(f, n_in);
    const size_t bytes = (static_cast<size_t>(a.stride * n_tokens) + 64 + 63) / 64 * 64;
    auto* out = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
    struct Level {
      const char* name;
      bool here;
      decltype(&detail::pack_acts_avx2) fn;
    };
    const Level levels[] = {{"avx2", cpu_features().avx2, &detail::pack_acts_avx2},
                            {"avx512", cpu_features().avx512, &detail::pack_acts_avx512}};
    for (const Level& l : levels) {
      if (!l.here) {
        std::printf("skipped level %s: this CPU lacks it\n", l.name);
        continue;
      }
      double best = 1e30;
      for (int pass = 0; pass < 50; ++pass) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < 100; ++k) l.fn(f, a, x.data(), 0, n_tokens, out);
        best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 100);
      }
      std::printf("%s %s, %lld tokens x %lld: %.2f us\n", type == TensorType::Q8_0 ? "Q8_0" : "Q4_K", l.name,
                  static_cast<long long>(n_tokens), static_cast<long long>(n_in), best);
    }
    std::free(out);
  }
  return 0;
}
