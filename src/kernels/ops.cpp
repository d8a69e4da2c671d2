// Element-wise and per-row operations: the scalar references and run-time dispatch.
//
// rms_norm, softmax, gelu_tanh and silu are written once (ops_inl.h) over the 16-lane
// vocabulary of simd16.h; the references here are its scalar instantiation and
// ops_avx2.cpp / ops_avx512.cpp / ops_neon.cpp instantiate the same bodies, so every level gives the same
// bits (accuracy notes in ops_inl.h). rope has a single implementation: the dispatched
// version is the reference (cos/sin in double, the rotation in float).
#include "kernels/ops.h"

#include <cmath>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ops_inl.h"
#include "kernels/simd16_scalar.h"

namespace ubatch::kernels {

// Per-ISA entry points (ops_avx2.cpp, ops_avx512.cpp, ops_neon.cpp), built for their
// architecture only; called only when the CPU has the ISA.
namespace avx2 {
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
void softmax(float* x, int64_t n);
void gelu_tanh(const float* x, float* y, int64_t n);
void silu(const float* x, float* y, int64_t n);
void softcap(const float* x, float* y, int64_t n, float cap);
}  // namespace avx2
namespace avx512 {
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
void softmax(float* x, int64_t n);
void gelu_tanh(const float* x, float* y, int64_t n);
void silu(const float* x, float* y, int64_t n);
void softcap(const float* x, float* y, int64_t n, float cap);
}  // namespace avx512
namespace neon {
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
void softmax(float* x, int64_t n);
void gelu_tanh(const float* x, float* y, int64_t n);
void silu(const float* x, float* y, int64_t n);
void softcap(const float* x, float* y, int64_t n, float cap);
}  // namespace neon

namespace ref {

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  simd16::rms_norm_row<scalar::Simd16>(x, w, y, n, eps);
}

void rope(float* x, int n_head, int head_dim, int n_rot, int32_t pos, float base, float freq_scale,
          RopeStyle style) {
  if (n_rot <= 0) return;
  constexpr int kStack = 512;  // angles on the stack for n_rot <= 1024 (no allocation per row)
  float cs[2 * kStack];
  std::vector<float> heap;
  float* c = cs;
  if (n_rot / 2 > kStack) {
    heap.resize(static_cast<size_t>(n_rot));
    c = heap.data();
  }
  float* s = c + n_rot / 2;
  kernels::rope_angles(pos, n_rot, base, freq_scale, c, s);
  kernels::rope_apply(x, n_head, head_dim, n_rot, c, s, style);
}

void softmax(float* x, int64_t n) { simd16::softmax_row<scalar::Simd16>(x, n); }

void gelu_tanh(const float* x, float* y, int64_t n) {
  simd16::gelu_tanh_row<scalar::Simd16>(x, y, n);
}

void silu(const float* x, float* y, int64_t n) { simd16::silu_row<scalar::Simd16>(x, y, n); }

void softcap(const float* x, float* y, int64_t n, float cap) {
  simd16::softcap_row<scalar::Simd16>(x, y, n, cap);
}

}  // namespace ref

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  switch (simd_level()) {
#if defined(UBATCH_X86_KERNELS)
    case SimdLevel::Amx:  // no tile path: the AVX-512 one
    case SimdLevel::Avx512: return avx512::rms_norm(x, w, y, n, eps);
    case SimdLevel::Avx2: return avx2::rms_norm(x, w, y, n, eps);
#elif defined(UBATCH_ARM_KERNELS)
    case SimdLevel::Dotprod:  // no dot products here: the NEON one
    case SimdLevel::Neon: return neon::rms_norm(x, w, y, n, eps);
#endif
    default: break;
  }
  ref::rms_norm(x, w, y, n, eps);
}

void rope_angles(int32_t pos, int n_rot, float base, float freq_scale, float* cos, float* sin,
                 const float* freq_factors, float mscale) {
  const int half = n_rot / 2;
  const double p = static_cast<double>(pos) * static_cast<double>(freq_scale);
  for (int i = 0; i < half; ++i) {
    double theta = p * std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / n_rot);
    if (freq_factors) theta /= static_cast<double>(freq_factors[i]);
    cos[i] = static_cast<float>(std::cos(theta)) * mscale;
    sin[i] = static_cast<float>(std::sin(theta)) * mscale;
  }
}

void rope_apply(float* x, int n_head, int head_dim, int n_rot, const float* cos, const float* sin,
                RopeStyle style) {
  const int half = n_rot / 2;
  for (int h = 0; h < n_head; ++h) {
    float* xh = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int i0 = style == RopeStyle::Normal ? 2 * i : i;
      const int i1 = style == RopeStyle::Normal ? 2 * i + 1 : i + half;
      const float x0 = xh[i0], x1 = xh[i1], c = cos[i], s = sin[i];
      xh[i0] = x0 * c - x1 * s;
      xh[i1] = x0 * s + x1 * c;
    }
  }
}

void rope(float* x, int n_head, int head_dim, int n_rot, int32_t pos, float base, float freq_scale,
          RopeStyle style) {
  // A handful of sin/cos per token shared by all heads: not worth a SIMD variant, and one
  // implementation keeps every level bit-identical.
  ref::rope(x, n_head, head_dim, n_rot, pos, base, freq_scale, style);
}

void softmax(float* x, int64_t n) {
  switch (simd_level()) {
#if defined(UBATCH_X86_KERNELS)
    case SimdLevel::Amx:  // no tile path: the AVX-512 one
    case SimdLevel::Avx512: return avx512::softmax(x, n);
    case SimdLevel::Avx2: return avx2::softmax(x, n);
#elif defined(UBATCH_ARM_KERNELS)
    case SimdLevel::Dotprod:  // no dot products here: the NEON one
    case SimdLevel::Neon: return neon::softmax(x, n);
#endif
    default: break;
  }
  ref::softmax(x, n);
}

void gelu_tanh(const float* x, float* y, int64_t n) {
  switch (simd_level()) {
#if defined(UBATCH_X86_KERNELS)
    case SimdLevel::Amx:  // no tile path: the AVX-512 one
    case SimdLevel::Avx512: return avx512::gelu_tanh(x, y, n);
    case SimdLevel::Avx2: return avx2::gelu_tanh(x, y, n);
#elif defined(UBATCH_ARM_KERNELS)
    case SimdLevel::Dotprod:  // no dot products here: the NEON one
    case SimdLevel::Neon: return neon::gelu_tanh(x, y, n);
#endif
    default: break;
  }
  ref::gelu_tanh(x, y, n);
}

void silu(const float* x, float* y, int64_t n) {
  switch (simd_level()) {
#if defined(UBATCH_X86_KERNELS)
    case SimdLevel::Amx:  // no tile path: the AVX-512 one
    case SimdLevel::Avx512: return avx512::silu(x, y, n);
    case SimdLevel::Avx2: return avx2::silu(x, y, n);
#elif defined(UBATCH_ARM_KERNELS)
    case SimdLevel::Dotprod:  // no dot products here: the NEON one
    case SimdLevel::Neon: return neon::silu(x, y, n);
#endif
    default: break;
  }
  ref::silu(x, y, n);
}

void softcap(const float* x, float* y, int64_t n, float cap) {
  switch (simd_level()) {
#if defined(UBATCH_X86_KERNELS)
    case SimdLevel::Amx:  // no tile path: the AVX-512 one
    case SimdLevel::Avx512: return avx512::softcap(x, y, n, cap);
    case SimdLevel::Avx2: return avx2::softcap(x, y, n, cap);
#elif defined(UBATCH_ARM_KERNELS)
    case SimdLevel::Dotprod:  // no dot products here: the NEON one
    case SimdLevel::Neon: return neon::softcap(x, y, n, cap);
#endif
    default: break;
  }
  ref::softcap(x, y, n, cap);
}

// Exact element-wise arithmetic (one rounding per element): the compiler's vectorization
// cannot change the results, so there is one implementation for every level.
void mul(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void scale(const float* a, float s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * s;
}

}  // namespace ubatch::kernels
