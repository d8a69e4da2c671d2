// Micro-benchmark of the gated delta rule in a decode step (kernels::delta_rule_tokens): one
// token through each of N_STATES head states of d × d (one per sequence, value head and layer:
// Qwen3.5-0.8B at 32 sequences is 32 × 16 × 18 = 9,216 states of 128 × 128), dealt round-robin to
// the threads with the next state prefetched, as model/block_deltanet.cpp deals them. The states
// together exceed the last-level cache, so they stream from memory as in a real step. Reports the
// best step time of REPS and the state bytes read and written per second.
//
// Not part of the default build. Build against the kernels library of a build directory:
//   cmake --build build --target ubatch_kernels
//   g++ -O2 -std=c++20 -Isrc bench/bench_delta_rule.cpp build/libubatch_kernels.a
//       build/libubatch_common.a -lfmt -pthread -o build/bench_delta_rule   (one command line)
// Run:
//   build/bench_delta_rule N_STATES f32|bf16|bf16-int [THREADS [REPS [D [OFFSET]]]]
//   e.g. 9216 bf16 2 5 128
// The states start on a 64-byte boundary, OFFSET bytes past it (a multiple of 4; default 0).
//   build/bench_delta_rule N_STEPS conv [N_CH [K [REPS]]]
//   e.g. 576 conv 6144 4 20: one thread through kernels::conv1d_step, N_STEPS sequences' and
//   layers' convolution steps of N_CH channels and kernel K (Qwen3.5-0.8B at 32 sequences: 576
//   of 6,144 channels, kernel 4), each with its own state; best pass of REPS.
// bf16: the state in BF16 through the dispatched kernel (AVX512_BF16's vcvtneps2bf16 where the CPU
// has it); bf16-int: the AVX-512 level's integer rounding (x86-64 with AVX-512 only), which gives
// the same bits.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/recurrent.h"
#include "kernels/thread_pool.h"

#if defined(UBATCH_X86_KERNELS) || defined(__x86_64__)
namespace ubatch::kernels::avx512 {
void delta_rule_tokens(const DeltaRuleArgs& args);
}
#endif

using namespace ubatch::kernels;

namespace {
int conv_bench(int n_steps, int n_ch, int k_size, int reps) {
  if (n_steps <= 0 || n_ch <= 0 || k_size <= 0 || reps <= 0) return std::fprintf(stderr, "bad arguments\n"), 2;
  const size_t ch = static_cast<size_t>(n_ch), prev = static_cast<size_t>(k_size - 1);
  std::vector<float> w(ch * static_cast<size_t>(k_size), 0.5f), state(static_cast<size_t>(n_steps) * prev * ch, 0.1f),
      x(static_cast<size_t>(n_steps) * ch, 0.2f);
  double best = 1e30;
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first pass touches the pages: not counted
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n_steps; ++i) {
      float* xi = x.data() + static_cast<size_t>(i) * ch;
      conv1d_step(xi, state.data() + static_cast<size_t>(i) * prev * ch, w.data(), xi, n_ch, k_size);
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, ms);
  }
  std::printf("conv: %d steps of %d channels, kernel %d, one thread: best pass %.3f ms\n", n_steps, n_ch, k_size, best);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s N_STATES f32|bf16|bf16-int [THREADS [REPS [D [OFFSET]]]]\n"
                         "       %s N_STEPS conv [N_CH [K [REPS]]]\n", argv[0], argv[0]);
    return 2;
  }
  const int n_states = std::atoi(argv[1]);
  const std::string mode = argv[2];
  if (mode == "conv")
    return conv_bench(n_states, argc > 3 ? std::atoi(argv[3]) : 6144, argc > 4 ? std::atoi(argv[4]) : 4,
                      argc > 5 ? std::atoi(argv[5]) : 20);
  const int n_threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 5;
  const int d = argc > 5 ? std::atoi(argv[5]) : 128;
  const int offset = argc > 6 ? std::atoi(argv[6]) : 0;
  const bool bf16 = mode != "f32";
  bool integer = mode == "bf16-int";
#if !(defined(UBATCH_X86_KERNELS) || defined(__x86_64__))
  if (integer) return std::fprintf(stderr, "bf16-int: x86-64 only\n"), 2;
#else
  if (integer && !cpu_features().avx512) return std::fprintf(stderr, "bf16-int: this CPU has no AVX-512\n"), 2;
#endif
  if (n_states <= 0 || d <= 0 || n_threads <= 0 || offset < 0 || offset % 4 != 0 || offset >= 64 ||
      (mode != "f32" && mode != "bf16" && mode != "bf16-int"))
    return std::fprintf(stderr, "bad arguments\n"), 2;
  // 4-byte words per state: d² floats, or d² BF16 values two to a word.
  const size_t words = bf16 ? (size_t(d) * d + 1) / 2 : size_t(d) * d;
  std::vector<float> storage(size_t(n_states) * words + 32, 0.0f);  // zeros are exact in both types
  const uintptr_t base = reinterpret_cast<uintptr_t>(storage.data());
  float* const S_base = reinterpret_cast<float*>((base + 63) / 64 * 64 + static_cast<uintptr_t>(offset));
  struct {
    float* p;
    float* data() const { return p; }
  } S{S_base};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  const size_t n = static_cast<size_t>(d);
  std::vector<float> q(n), k(n), v(n);
  for (int i = 0; i < d; ++i) {
    q[size_t(i)] = u(rng);
    k[size_t(i)] = u(rng);
    v[size_t(i)] = u(rng);
  }
  const float decay = 0.9f, beta = 0.5f;
  ThreadPool pool(n_threads);
  double best = 1e30;
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first pass touches the pages: not counted
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int ith, int nth) {
      std::vector<float> o(n);
      for (int t = ith; t < n_states; t += nth) {
        DeltaRuleArgs a;
        float* state = S.data() + size_t(t) * words;
        if (bf16) a.S_bf16 = reinterpret_cast<uint16_t*>(state);
        else a.S = state;
        a.d_k = a.d_v = d;
        a.n_tokens = 1;
        a.q = q.data();
        a.k = k.data();
        a.v = v.data();
        a.decay = &decay;
        a.beta = &beta;
        a.o = o.data();
        if (t + nth < n_states) a.prefetch = S.data() + size_t(t + nth) * words;
#if defined(UBATCH_X86_KERNELS) || defined(__x86_64__)
        if (integer) {
          avx512::delta_rule_tokens(a);
          continue;
        }
#endif
        delta_rule_tokens(a);
      }
    });
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, ms);
  }
  std::printf("%s: %d states of %d x %d, %d threads: best step %.2f ms, %.1f GB/s of state read and written\n",
              mode.c_str(), n_states, d, d, n_threads, best, 2.0 * double(n_states) * double(words) * 4.0 / best / 1e6);
  return 0;
}
