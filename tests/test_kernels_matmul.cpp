// matmul: the scalar reference against exact arithmetic, every SIMD level against the
// reference, and batch invariance (bit-identical rows whatever the batch and thread count).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/tensor_type.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/matmul_unpack.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "kernel_test_data.h"

namespace ubatch::kernels {
namespace {

const TensorType kTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                             TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                             TensorType::Q5_1, TensorType::Q8_0, TensorType::Q2_K,
                             TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                             TensorType::Q6_K, TensorType::MXFP4};

bool is_k_quant(TensorType t) {
  return t == TensorType::Q2_K || t == TensorType::Q3_K || t == TensorType::Q4_K ||
         t == TensorType::Q5_K || t == TensorType::Q6_K;
}

// Row lengths to try: every tail shape of the 32-element types (640 = 512 + 128 is the Gemma
// 3 270M width), multiples of 256 for the K-quants, odd widths for the float types.
std::vector<int64_t> widths(TensorType t) {
  if (is_k_quant(t)) return {256, 512, 768, 1280, 2048};
  if (t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16)
    return {7, 32, 100, 640, 1000};
  return {32, 64, 96, 160, 224, 480, 640, 992, 2048};
}

// Exact value the reference approximates, in double, and the magnitude sum(|w_i x_i|) that
// scales the tolerances: W dequantized; x as the kernels see it (quantized per activation
// block for the quantized types).
void exact_dot(const Weights& w, const std::vector<float>& x, int64_t n_tokens,
               std::vector<double>& exact, std::vector<double>& mag) {
  const int64_t n_in = w.view.n_in, n_out = w.view.n_out;
  std::vector<float> xs(x);
  detail::QuantInfo info;
  if (detail::quant_info(w.view.type, true, info)) {
    std::vector<int8_t> q(n_in);
    std::vector<float> d(n_in / info.act_block);
    for (int64_t t = 0; t < n_tokens; ++t) {
      detail::quantize_act_row(x.data() + t * n_in, n_in, info.act_block, q.data(), d.data());
      for (int64_t i = 0; i < n_in; ++i) xs[t * n_in + i] = float(q[i]) * d[i / info.act_block];
    }
  }
  exact.assign(n_tokens * n_out, 0.0);
  mag.assign(n_tokens * n_out, 0.0);
  std::vector<float> wr(n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    dequantize_row(w.view.type, w.data.data() + o * w.view.row_bytes, wr.data(), n_in);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double s = 0, m = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        const double p = double(wr[i]) * double(xs[t * n_in + i]);
        s += p;
        m += std::fabs(p);
      }
      exact[t * n_out + o] = s;
      mag[t * n_out + o] = m;
    }
  }
}

std::vector<SimdLevel> available_levels() {
  std::vector<SimdLevel> levels = {SimdLevel::Scalar};
  if (cpu_features().avx2) levels.push_back(SimdLevel::Avx2);
  if (cpu_features().avx512 && cpu_features().avx512_vnni) levels.push_back(SimdLevel::Avx512);
  if (cpu_features().neon) levels.push_back(SimdLevel::Neon);
  if (cpu_features().dotprod) levels.push_back(SimdLevel::Dotprod);
  return levels;
}

std::string describe_matmul(TensorType t, int64_t n_in, SimdLevel l) {
  return std::string(tensor_type_name(t)) + " n_in=" + std::to_string(n_in) + " level=" +
         simd_level_name(l);
}

// The reference is exact arithmetic up to float rounding: |ref - exact| <= 1e-5 * sum|w x|.
TEST(MatmulReference, MatchesExactArithmetic) {
  for (TensorType t : kTypes) {
    for (int64_t n_in : widths(t)) {
      const int64_t n_out = 5, n_tokens = 4;
      const Weights w = random_weights(t, n_in, n_out, 11);
      const std::vector<float> x = random_x(n_tokens, n_in, 12);
      std::vector<double> exact, mag;
      exact_dot(w, x, n_tokens, exact, mag);
      std::vector<float> y(n_tokens * n_out);
      matmul_reference(w.view, x.data(), n_tokens, y.data());
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_LE(std::fabs(y[i] - exact[i]), 1e-5 * mag[i] + 1e-30)
            << tensor_type_name(t) << " n_in=" << n_in << " i=" << i;
    }
  }
}

// The quantized path differs from plain float math only by the activation quantization.
TEST(MatmulReference, CloseToFloatMath) {
  const int64_t n_in = 512, n_out = 8, n_tokens = 3;
  for (TensorType t : kTypes) {
    const Weights w = random_weights(t, n_in, n_out, 21);
    const std::vector<float> x = random_x(n_tokens, n_in, 22);
    std::vector<float> y(n_tokens * n_out), wr(n_in);
    matmul_reference(w.view, x.data(), n_tokens, y.data());
    for (int64_t o = 0; o < n_out; ++o) {
      dequantize_row(t, w.data.data() + o * w.view.row_bytes, wr.data(), n_in);
      for (int64_t tk = 0; tk < n_tokens; ++tk) {
        double s = 0, m = 0;
        for (int64_t i = 0; i < n_in; ++i) {
          s += double(wr[i]) * x[tk * n_in + i];
          m += std::fabs(double(wr[i]) * x[tk * n_in + i]);
        }
        ASSERT_NEAR(y[tk * n_out + o], s, 0.02 * m + 1e-30) << tensor_type_name(t);
      }
    }
  }
}

TEST(Matmul, EveryLevelMatchesReference) {
  ThreadPool pool(2);
  for (SimdLevel level : available_levels()) {
    for (TensorType t : kTypes) {
      for (int64_t n_in : widths(t)) {
        const int64_t n_out = 13;
        for (int64_t n_tokens : {1, 3, 9, 17}) {
          const Weights w = random_weights(t, n_in, n_out, 31 + uint32_t(n_in));
          const std::vector<float> x = random_x(n_tokens, n_in, 32 + uint32_t(n_tokens));
          std::vector<double> exact, mag;
          exact_dot(w, x, n_tokens, exact, mag);
          std::vector<float> ref(n_tokens * n_out), y(n_tokens * n_out, -1.0f);
          matmul_reference(w.view, x.data(), n_tokens, ref.data());
          detail::matmul_at_level(level, w.view, x.data(), n_tokens, y.data(), pool);
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_LE(std::fabs(y[i] - ref[i]), 1e-5 * mag[i] + 1e-30)
                << describe_matmul(t, n_in, level) << " n_tokens=" << n_tokens << " i=" << i
                << " y=" << y[i] << " ref=" << ref[i];
          }
        }
      }
    }
  }
}

// y[t] must be bit-identical whatever else is in the batch, where t sits in it, the batch
// size and the thread count.
TEST(Matmul, BatchInvariance) {
  ThreadPool pool1(1), pool2(2), pool3(3);
  ThreadPool* pools[] = {&pool1, &pool2, &pool3};
  std::mt19937 rng(41);
  for (SimdLevel level : available_levels()) {
    for (TensorType t : kTypes) {
      const int64_t n_in = is_k_quant(t) ? 768 : 640;
      const int64_t n_out = 29;
      const Weights w = random_weights(t, n_in, n_out, 42);
      const int64_t n_max = 37;
      const std::vector<float> x = random_x(n_max, n_in, 43);
      // Each row alone, one thread: the reference bits.
      std::vector<float> single(n_max * n_out);
      for (int64_t r = 0; r < n_max; ++r)
        detail::matmul_at_level(level, w.view, x.data() + r * n_in, 1, single.data() + r * n_out, pool1);
      for (int64_t n_tokens : {1, 2, 5, 8, 9, 16, 23, 37}) {
        // A random selection of rows, in random order.
        std::vector<int64_t> rows(n_tokens);
        for (auto& r : rows) r = static_cast<int64_t>(rng() % n_max);
        std::vector<float> xb(n_tokens * n_in);
        for (int64_t i = 0; i < n_tokens; ++i)
          std::memcpy(xb.data() + i * n_in, x.data() + rows[i] * n_in, n_in * 4);
        for (ThreadPool* pool : pools) {
          std::vector<float> y(n_tokens * n_out);
          detail::matmul_at_level(level, w.view, xb.data(), n_tokens, y.data(), *pool);
          for (int64_t i = 0; i < n_tokens; ++i)
            ASSERT_EQ(std::memcmp(y.data() + i * n_out, single.data() + rows[i] * n_out, n_out * 4), 0)
                << describe_matmul(t, n_in, level) << " n_tokens=" << n_tokens << " row " << i
                << " threads=" << pool->n_threads();
        }
      }
    }
  }
}

TEST(Matmul, DispatchedEntryPointIsInvariant) {
  ThreadPool pool(2);
  const Weights w = random_weights(TensorType::Q8_0, 640, 50, 51);
  const std::vector<float> x = random_x(12, 640, 52);
  std::vector<float> y(12 * 50), y1(50);
  matmul(w.view, x.data(), 12, y.data(), pool);
  for (int64_t t = 0; t < 12; ++t) {
    matmul(w.view, x.data() + t * 640, 1, y1.data(), pool);
    ASSERT_EQ(std::memcmp(y1.data(), y.data() + t * 50, 50 * 4), 0) << t;
  }
  EXPECT_TRUE(can_matmul(TensorType::Q6_K));
  EXPECT_FALSE(can_matmul(TensorType::Q8_K));
}

}  // namespace
}  // namespace ubatch::kernels
