// matmul with F32/F16/BF16 weights: every SIMD level against the reference bit for bit (one
// arithmetic: the 16-lane float dot of matmul_float_inl.h), across input widths with tails of
// the 16-lane slices, token counts that cut the register tiles anywhere, and thread counts;
// special values in the activations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/thread_pool.h"
#include "kernel_test_data.h"

namespace ubatch::kernels {
namespace {

std::vector<SimdLevel> simd_levels() {
  std::vector<SimdLevel> levels;
  if (cpu_features().avx2) levels.push_back(SimdLevel::Avx2);
  if (cpu_features().avx512 && cpu_features().avx512_vnni) levels.push_back(SimdLevel::Avx512);
  if (cpu_features().neon) levels.push_back(SimdLevel::Neon);
  if (cpu_features().dotprod) levels.push_back(SimdLevel::Dotprod);
  return levels;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b, size_t& first) {
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(b[i]);
    if (!both_nan && std::memcmp(&a[i], &b[i], 4) != 0) {
      first = i;
      return false;
    }
  }
  return true;
}

TEST(MatmulFloat, EveryLevelSameBitsAsReference) {
  const std::vector<SimdLevel> levels = simd_levels();
  if (levels.empty()) GTEST_SKIP() << "no SIMD level on this CPU (scalar only)";
  for (SimdLevel l : levels) std::printf("level %s\n", simd_level_name(l));
  ThreadPool pool1(1), pool3(3);
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
    for (int64_t n_in : {1, 7, 15, 16, 17, 33, 100, 256, 640, 1000}) {
      const int64_t n_out = 37;  // more than two 16-row output blocks, with a tail
      const Weights w = random_weights(t, n_in, n_out, 600 + static_cast<uint32_t>(n_in));
      for (int64_t n_tokens : {1, 2, 3, 4, 5, 7, 8, 9, 13, 17}) {
        const std::vector<float> x = random_x(n_tokens, n_in, 700 + static_cast<uint32_t>(n_tokens));
        std::vector<float> ref(static_cast<size_t>(n_tokens * n_out));
        matmul_reference(w.view, x.data(), n_tokens, ref.data());
        for (SimdLevel level : levels) {
          for (ThreadPool* pool : {&pool1, &pool3}) {
            std::vector<float> y(ref.size(), -1.0f);
            detail::matmul_at_level(level, w.view, x.data(), n_tokens, y.data(), *pool);
            size_t i = 0;
            ASSERT_TRUE(same_bits(y, ref, i))
                << tensor_type_name(t) << " n_in=" << n_in << " n_tokens=" << n_tokens
                << " level=" << simd_level_name(level) << " threads=" << pool->n_threads()
                << " element " << i << ": " << y[i] << " vs " << ref[i];
          }
        }
      }
    }
  }
}

// Activations with zeros of both signs, subnormals, huge values and infinities.
TEST(MatmulFloat, SpecialActivationsSameBits) {
  const std::vector<SimdLevel> levels = simd_levels();
  if (levels.empty()) GTEST_SKIP() << "no SIMD level on this CPU (scalar only)";
  ThreadPool pool(2);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), -1e-40f,
                            1e30f, -1e30f, 3e38f, inf, -inf};
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
    for (int64_t n_in : {5, 16, 40}) {
      const int64_t n_out = 19, n_tokens = 6;
      const Weights w = random_weights(t, n_in, n_out, 800 + static_cast<uint32_t>(n_in));
      std::vector<float> x = random_x(n_tokens, n_in, 801);
      for (int64_t i = 0; i < n_tokens * n_in; i += 3) x[static_cast<size_t>(i)] = specials[i % 9];
      std::vector<float> ref(static_cast<size_t>(n_tokens * n_out));
      matmul_reference(w.view, x.data(), n_tokens, ref.data());
      for (SimdLevel level : levels) {
        std::vector<float> y(ref.size());
        detail::matmul_at_level(level, w.view, x.data(), n_tokens, y.data(), pool);
        size_t i = 0;
        ASSERT_TRUE(same_bits(y, ref, i)) << tensor_type_name(t) << " n_in=" << n_in
                                          << " level=" << simd_level_name(level) << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace ubatch::kernels
