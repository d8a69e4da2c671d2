// Micro-benchmark of kernels::attention in a decode step: T sequences, one query token each,
// over N_CELLS cached cells per sequence, for L layers whose KV caches together exceed the
// last-level cache (so the K/V rows come from memory, as in a real step). Tasks are dealt to
// the threads as block_attention.cpp deals them: (token, heads_per_task heads of one KV head)
// round-robin (attention_heads_per_task). Reports the time per step and the K/V bytes read per
// second.
//
// Not part of the default build. Build against the kernels library of a build directory:
//   cmake --build build --target ubatch_kernels
//   g++ -O2 -std=c++20 -Isrc bench/bench_attention.cpp build/libubatch_kernels.a
//       build/libubatch_common.a -lfmt -pthread -o build/bench_attention   (one command line)
// Run:
//   build/bench_attention N_HEAD N_KV_HEAD HEAD_DIM N_CELLS T LAYERS THREADS [f16|q8_0|f32 [REPS]]
//   e.g. LLaMA-2-7B, 4 sequences at 230 cells: 32 32 128 230 4 32 2
// UBATCH_SIMD=scalar|avx2|avx512 caps the SIMD level as for the engine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/tensor_type.h"
#include "kernels/attention.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"

using namespace ubatch;
using namespace ubatch::kernels;

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: %s N_HEAD N_KV_HEAD HEAD_DIM N_CELLS T LAYERS THREADS [f16|q8_0|f32 [REPS]]\n", argv[0]);
    return 2;
  }
  const int n_head = std::atoi(argv[1]), n_kv = std::atoi(argv[2]), hd = std::atoi(argv[3]);
  const int n_cells = std::atoi(argv[4]), T = std::atoi(argv[5]), L = std::atoi(argv[6]);
  const int threads = std::atoi(argv[7]);
  const std::string kv = argc > 8 ? argv[8] : "f16";
  if (n_head <= 0 || n_kv <= 0 || n_head % n_kv != 0 || hd <= 0 || hd % 32 != 0 || n_cells <= 0 || T <= 0 ||
      L <= 0 || threads <= 0 || (kv != "f16" && kv != "q8_0" && kv != "f32")) {
    std::fprintf(stderr, "bad arguments\n");
    return 2;
  }
  const TensorType type = kv == "f16" ? TensorType::F16 : kv == "q8_0" ? TensorType::Q8_0 : TensorType::F32;
  const size_t head_bytes = tensor_row_bytes(type, hd);
  const size_t row_bytes = head_bytes * size_t(n_kv);
  const size_t cells_total = size_t(n_cells) * size_t(T);
  const size_t layer_bytes = row_bytes * cells_total;

  // K and V of every layer, filled with small valid values (f16 0.01 / Q8_0 d = 0.01, q random).
  std::vector<uint8_t> k(layer_bytes * L), v(layer_bytes * L);
  std::mt19937 rng(1);
  auto fill = [&](std::vector<uint8_t>& buf) {
    if (type == TensorType::F32) {
      auto* f = reinterpret_cast<float*>(buf.data());
      for (size_t i = 0; i < buf.size() / 4; ++i) f[i] = float(int(rng() % 200) - 100) * 0.001f;
    } else if (type == TensorType::F16) {
      auto* h = reinterpret_cast<uint16_t*>(buf.data());
      for (size_t i = 0; i < buf.size() / 2; ++i) h[i] = fp32_to_fp16(float(int(rng() % 200) - 100) * 0.001f);
    } else {
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(rng());
      const uint16_t d = fp32_to_fp16(0.01f);
      for (size_t b = 0; b < buf.size() / 34; ++b) std::memcpy(buf.data() + 34 * b, &d, 2);
    }
  };
  fill(k);
  fill(v);
  // Sequence t owns cells [t * n_cells, (t + 1) * n_cells), listed in order.
  std::vector<int32_t> cells(cells_total);
  for (size_t i = 0; i < cells_total; ++i) cells[i] = int32_t(i);
  std::vector<float> q(size_t(T) * n_head * hd), out(q.size());
  for (auto& x : q) x = float(int(rng() % 200) - 100) * 0.01f;

  AttentionShape shape;
  shape.n_head = n_head;
  shape.n_kv_head = n_kv;
  shape.head_dim = hd;
  shape.scale = 1.0f / std::sqrt(float(hd));
  shape.kv_type = type;
  shape.k_row_bytes = shape.v_row_bytes = row_bytes;

  ThreadPool pool(threads);
  const int heads_per_task = attention_heads_per_task(n_head, n_kv, T, threads);
  const int n_head_tasks = n_head / heads_per_task;
  auto step = [&] {
    for (int l = 0; l < L; ++l) {
      const uint8_t* kl = k.data() + layer_bytes * l;
      const uint8_t* vl = v.data() + layer_bytes * l;
      pool.run([&](int ith, int nth) {
        for (int64_t task = ith; task < int64_t(T) * n_head_tasks; task += nth) {
          const int64_t t = task / n_head_tasks;
          const int h = int(task % n_head_tasks) * heads_per_task;
          attention(shape, q.data() + t * n_head * hd, kl, vl, cells.data() + t * n_cells, n_cells,
                    out.data() + t * n_head * hd, nullptr, h, h + heads_per_task);
        }
      });
    }
  };
  step();  // warm-up (page faults)
  std::vector<double> ms;
  const int reps = argc > 9 ? std::max(1, std::atoi(argv[9])) : 7;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double bytes = 2.0 * double(layer_bytes) * L;
  std::printf("%s: %d heads (%d KV) x %d, %d cells x %d sequences, %d layers, %d threads: K+V %.1f MB per step\n",
              kv.c_str(), n_head, n_kv, hd, n_cells, T, L, threads, bytes / 1e6);
  std::printf("step ms: min %.3f  median %.3f  max %.3f   GB/s from the min %.2f\n", ms.front(), ms[ms.size() / 2],
              ms.back(), bytes / (ms.front() * 1e6));
  float sum = 0;
  for (float x : out) sum += x;
  std::printf("checksum %.6g\n", double(sum));
  return 0;
}
