// Random weights and activations for the matmul tests (shared by the reference and the
// packed-GEMM tests).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/tensor_type.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

namespace ubatch::kernels {
namespace {

// Offsets of the f16 scale fields in one block, so random blocks get finite scales.
inline std::vector<int> half_fields(TensorType t) {
  switch (t) {
    case TensorType::Q4_0: case TensorType::Q5_0: case TensorType::Q8_0: return {0};
    case TensorType::Q4_1: case TensorType::Q5_1: case TensorType::Q4_K: case TensorType::Q5_K:
      return {0, 2};
    case TensorType::Q2_K: return {80, 82};
    case TensorType::Q3_K: return {108};
    case TensorType::Q6_K: return {208};
    default: return {};
  }
}

// Random weights: random bytes for the quants with finite random f16 scales; random values
// for the float types.
struct Weights {
  std::vector<uint8_t> data;
  WeightView view;
};

inline Weights random_weights(TensorType t, int64_t n_in, int64_t n_out, uint32_t seed) {
  Weights w;
  std::mt19937 rng(seed);
  const size_t row_bytes = tensor_row_bytes(t, n_in);
  w.data.resize(row_bytes * n_out);
  for (auto& b : w.data) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  const int64_t n = n_in * n_out;
  if (t == TensorType::F32) {
    auto* f = reinterpret_cast<float*>(w.data.data());
    for (int64_t i = 0; i < n; ++i) f[i] = ud(rng);
  } else if (t == TensorType::F16 || t == TensorType::BF16) {
    auto* h = reinterpret_cast<uint16_t*>(w.data.data());
    for (int64_t i = 0; i < n; ++i)
      h[i] = t == TensorType::F16 ? fp32_to_fp16(ud(rng)) : fp32_to_bf16(ud(rng));
  } else if (t == TensorType::MXFP4) {
    // E8M0 exponents of real weights (scales 2^-10 .. 2^-3), one all-zero block with e = 255.
    for (int64_t b = 0; b < n / 32; ++b) w.data[b * 17] = static_cast<uint8_t>(118 + rng() % 8);
    if (n >= 64) {
      std::memset(w.data.data() + 17, 0, 17);
      w.data[17] = 255;
    }
  } else {
    const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(t));
    for (int64_t b = 0; b < n / tr->block_size; ++b)
      for (int off : half_fields(t)) {
        const uint16_t h = fp32_to_fp16(ud(rng) * 0.05f);
        std::memcpy(w.data.data() + b * tr->type_size + off, &h, 2);
      }
  }
  w.view.type = t;
  w.view.data = w.data.data();
  w.view.n_in = n_in;
  w.view.n_out = n_out;
  w.view.row_bytes = row_bytes;
  return w;
}

inline std::vector<float> random_x(int64_t n_tokens, int64_t n_in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n_tokens * n_in);
  for (auto& v : x) v = nd(rng);
  // Rows of different magnitudes, one all-zero row.
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t i = 0; i < n_in; ++i) x[t * n_in + i] *= t == 2 ? 0.0f : std::ldexp(1.0f, int(t % 5) - 2);
  return x;
}

}  // namespace
}  // namespace ubatch::kernels
