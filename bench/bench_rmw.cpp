// Micro-benchmark of the machine's read-modify-write rate: one pass over a buffer that each
// thread reads, scales and writes back in place — what a decode step does to every sequence's
// recurrent state (the Gated DeltaNet state, docs/BENCHMARKS.md, "The DeltaNet state
// prefetched"). Reports the best of five passes, in ms and GB/s of traffic (read + written).
//
// Not part of the default build:
//   g++ -O3 -march=native -std=c++20 bench/bench_rmw.cpp -pthread -o build/bench_rmw
//   build/bench_rmw MIB THREADS      (e.g. 576 2: 32 sequences of Qwen3.5-0.8B's state)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MIB THREADS\n", argv[0]);
    return 2;
  }
  const size_t n = static_cast<size_t>(std::atol(argv[1])) << 20 >> 2;  // floats
  const int threads = std::atoi(argv[2]);
  if (n == 0 || threads < 1) return 2;
  std::unique_ptr<float[]> buf(new float[n]);
  std::fill(buf.get(), buf.get() + n, 1.0f);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        float* p = buf.get() + n / threads * t;
        const size_t m = t == threads - 1 ? n - n / threads * t : n / threads;
        for (size_t i = 0; i < m; ++i) p[i] = p[i] * 0.999f + 1e-3f;
      });
    for (std::thread& th : pool) th.join();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("%zu MiB, %d threads: best pass %.1f ms, %.1f GB/s of traffic (read + written)\n", (n * 4) >> 20,
              threads, best * 1e3, 2.0 * 4.0 * static_cast<double>(n) / best / 1e9);
  return 0;
}
