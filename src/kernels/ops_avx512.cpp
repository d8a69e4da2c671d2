// AVX-512 instantiation of the per-row operations (bodies in ops_inl.h, vocabulary in
// simd16_avx512.h): the same arithmetic as the scalar references in ops.cpp, bit for bit.
#include <cstdint>
#include <limits>

#include "kernels/ops_inl.h"
#include "kernels/simd16_avx512.h"

namespace ubatch::kernels::avx512 {

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  simd16::rms_norm_row<Simd16>(x, w, y, n, eps);
}

void softmax(float* x, int64_t n) { simd16::softmax_row<Simd16>(x, n); }

void gelu_tanh(const float* x, float* y, int64_t n) { simd16::gelu_tanh_row<Simd16>(x, y, n); }

void silu(const float* x, float* y, int64_t n) { simd16::silu_row<Simd16>(x, y, n); }

// x[i] = e^(x[i] − shift) for i < n; returns Σ x[i] (summed in double). Used by
// attention_avx512.cpp's softmax over chunks of scores.
double exp_shift_sum(float* x, int64_t n, float shift) {
  using V = Simd16;
  const V::F vs = V::set1(shift);
  V::D acc = V::dzero();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const V::F e = simd16::exp<V>(V::sub(V::load(x + i), vs));
    V::store(x + i, e);
    V::dadd(acc, e);
  }
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    // Padding lanes hold -inf: e^-inf = 0 adds nothing.
    const V::F e = simd16::exp<V>(
        V::sub(V::load_n(x + i, rest, -std::numeric_limits<float>::infinity()), vs));
    V::store_n(x + i, e, rest);
    V::dadd(acc, e);
  }
  return V::dhsum(acc);
}

}  // namespace ubatch::kernels::avx512
