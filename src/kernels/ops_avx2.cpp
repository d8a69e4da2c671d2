// AVX2 + FMA instantiation of the per-row operations (bodies in ops_inl.h, vocabulary in
// simd16_avx2.h): the same arithmetic as the scalar references in ops.cpp, bit for bit.
#include <cstdint>

#include "kernels/ops_inl.h"
#include "kernels/simd16_avx2.h"

namespace ubatch::kernels::avx2 {

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  simd16::rms_norm_row<Simd16>(x, w, y, n, eps);
}

void softmax(float* x, int64_t n) { simd16::softmax_row<Simd16>(x, n); }

void gelu_tanh(const float* x, float* y, int64_t n) { simd16::gelu_tanh_row<Simd16>(x, y, n); }

void silu(const float* x, float* y, int64_t n) { simd16::silu_row<Simd16>(x, y, n); }

void softcap(const float* x, float* y, int64_t n, float cap) { simd16::softcap_row<Simd16>(x, y, n, cap); }

}  // namespace ubatch::kernels::avx2
