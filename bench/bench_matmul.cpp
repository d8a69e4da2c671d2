// Micro-benchmark of kernels::matmul: time per call, weight GB/s and GFLOP/s-equivalent
// (2 * n_out * n_in * n_tokens per call), for one weight shape and several n_tokens.
//
// Not part of the default build. Build against the kernels library of a build directory:
//   cmake --build build --target ubatch_kernels
//   g++ -O2 -std=c++20 -Isrc bench/bench_matmul.cpp build/libubatch_kernels.a \
//       build/libubatch_common.a -lfmt -pthread -o build/bench_matmul
// Run:
//   build/bench_matmul TYPE N_OUT N_IN THREADS N_TOKENS...    e.g. Q8_0 262144 640 2 1 8 32
// UBATCH_SIMD=scalar|avx2|avx512|amx caps the SIMD level as for the engine. Quantized weights
// are repacked first (kernels/packed_weight.h), as the model does at load; GB/s counts the
// packed bytes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#include "common/tensor_type.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/packed_weight.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"

using namespace ubatch;
using namespace ubatch::kernels;

namespace {

bool parse_type(const std::string& s, TensorType& t) {
  for (uint32_t id = 0; id < 64; ++id) {
    const TensorTypeTraits* tr = tensor_type_traits(id);
    if (tr && tr->name == s) {
      t = static_cast<TensorType>(id);
      return can_matmul(t);
    }
  }
  return false;
}

// Random weights with sane scales: every block's f16 fields set to a small value.
std::vector<uint8_t> make_weights(TensorType t, int64_t n_in, int64_t n_out) {
  const size_t row_bytes = tensor_row_bytes(t, n_in);
  std::vector<uint8_t> data(row_bytes * n_out);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= data.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(data.data() + i, &v, 8);
  }
  const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(t));
  const uint16_t h = fp32_to_fp16(0.01f);
  auto set = [&](int off) {
    for (int64_t b = 0; b < n_in * n_out / tr->block_size; ++b)
      std::memcpy(data.data() + b * tr->type_size + off, &h, 2);
  };
  switch (t) {
    case TensorType::Q4_0: case TensorType::Q5_0: case TensorType::Q8_0: set(0); break;
    case TensorType::Q4_1: case TensorType::Q5_1: case TensorType::Q4_K: case TensorType::Q5_K:
      set(0); set(2); break;
    case TensorType::Q2_K: set(80); set(82); break;
    case TensorType::Q3_K: set(108); break;
    case TensorType::Q6_K: set(208); break;
    case TensorType::MXFP4:  // the E8M0 scale byte: 2^(120 - 127)
      for (int64_t b = 0; b < n_in * n_out / tr->block_size; ++b) data[b * tr->type_size] = 120;
      break;
    case TensorType::F16:
      for (int64_t i = 0; i < n_in * n_out; ++i) std::memcpy(data.data() + 2 * i, &h, 2);
      break;
    case TensorType::BF16: {
      const uint16_t b = fp32_to_bf16(0.01f);
      for (int64_t i = 0; i < n_in * n_out; ++i) std::memcpy(data.data() + 2 * i, &b, 2);
      break;
    }
    case TensorType::F32: {
      const float f = 0.01f;
      for (int64_t i = 0; i < n_in * n_out; ++i) std::memcpy(data.data() + 4 * i, &f, 4);
      break;
    }
    default: break;
  }
  return data;
}

// CPU time of the calling thread: with THREADS = 1 it excludes the time the thread was not
// running, which dominates wall time on a busy shared machine.
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s TYPE N_OUT N_IN THREADS N_TOKENS...\n", argv[0]);
    return 2;
  }
  TensorType type;
  if (!parse_type(argv[1], type)) {
    std::fprintf(stderr, "unsupported type %s\n", argv[1]);
    return 2;
  }
  const int64_t n_out = std::atoll(argv[2]), n_in = std::atoll(argv[3]);
  const int threads = std::atoi(argv[4]);
  const std::vector<uint8_t> data = make_weights(type, n_in, n_out);
  WeightView w;
  w.type = type;
  w.data = data.data();
  w.n_in = n_in;
  w.n_out = n_out;
  w.row_bytes = tensor_row_bytes(type, n_in);
  ThreadPool pool(threads);
  double gbytes = double(data.size()) / 1e9;
  std::unique_ptr<PackedWeight> packed;
  {
    PackedFormat f;
    if (packed_format(type, f)) {
      auto pw = pack_weight(type, data.data(), n_in, n_out);
      if (!pw) {
        std::fprintf(stderr, "%s\n", pw.message().c_str());
        return 2;
      }
      packed = std::move(pw.value());
      w.packed = packed.get();
      gbytes = double(packed->bytes()) / 1e9;
      std::printf("packed: %.1f MB\n", packed->bytes() / 1e6);
    }
  }
  std::printf("%s [%lld x %lld] %.1f MB, %d threads, matmul levels %s\n", argv[1], (long long)n_out,
              (long long)n_in, data.size() / 1e6, threads, describe_matmul_levels().c_str());
  std::printf("median / min wall time per call (the min is the best guide on a shared machine);\n"
              "GB/s (weights), GFLOP/s and us/token from the min\n");
  std::printf("%8s %10s %10s %10s %10s %10s %12s\n", "n_tokens", "median ms", "min ms", "GB/s",
              "GFLOP/s", "us/token", "cpu ms (1t)");
  for (int a = 5; a < argc; ++a) {
    const int64_t n_tokens = std::atoll(argv[a]);
    std::vector<float> x(n_tokens * n_in), y(n_tokens * n_out);
    std::mt19937 rng(2);
    std::normal_distribution<float> nd;
    for (auto& v : x) v = nd(rng);
    matmul(w, x.data(), n_tokens, y.data(), pool);  // warm-up (scratch, page faults)
    // Repeat for at least ~1 s of work (and 3 calls); report the median call.
    std::vector<double> times, cpu_times;
    double total = 0;
    while ((total < 1.0 || times.size() < 3) && times.size() < 1000) {
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = thread_cpu_seconds();
      matmul(w, x.data(), n_tokens, y.data(), pool);
      cpu_times.push_back(thread_cpu_seconds() - c0);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      times.push_back(s);
      total += s;
    }
    std::sort(times.begin(), times.end());
    std::sort(cpu_times.begin(), cpu_times.end());
    const double s = times[times.size() / 2];
    const double flop = 2.0 * double(n_out) * double(n_in) * double(n_tokens);
    const double best = times.front();
    std::printf("%8lld %10.3f %10.3f %10.2f %10.1f %10.1f %12.3f\n", (long long)n_tokens, s * 1e3,
                best * 1e3, gbytes / best, flop / best / 1e9, best * 1e6 / double(n_tokens),
                cpu_times[cpu_times.size() / 2] * 1e3);
  }
  return 0;
}
