// NEON matmul of float weights (F32, F16, BF16): the canonical 16-lane float dot of
// matmul_float_inl.h on four 4-lane registers, kFloatTile tokens per pass over a weight row.
// Quantized weights go through the packed GEMM (gemm_neon.cpp, gemm_dotprod.cpp).
// aarch64 builds only.
#include <arm_neon.h>

#include <cstring>

#include "kernels/matmul_float_inl.h"
#include "kernels/matmul_internal.h"
#include "kernels/simd16_neon.h"

namespace ubatch::kernels::detail {

namespace {

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

constexpr int kFloatTile = 4;     // tokens per pass over a weight row
constexpr int kPrefetchRows = 4;  // how far ahead (in rows) the weights are prefetched

// ybuf[t][0 .. nb) (rows of kOutRows floats) -> y[t * n_out + 0 .. nb).
void store_rows(const float* ybuf, int64_t n_tokens, int64_t nb, float* y, int64_t n_out) {
  for (int64_t t = 0; t < n_tokens; ++t)
    std::memcpy(y + t * n_out, ybuf + t * kOutRows, sizeof(float) * static_cast<size_t>(nb));
}

void rows_float(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t r0,
                int64_t r1, uint8_t* scratch) {
  const int64_t n_in = w.n_in;
  float* conv = reinterpret_cast<float*>(scratch);
  float* ybuf = conv + n_in + 16;  // [n_tokens][kOutRows]: results of kOutRows rows, stored together
  for (int64_t ob = r0; ob < r1; ob += kOutRows) {
    const int64_t ob_end = min64(ob + kOutRows, r1);
    for (int64_t r = ob; r < ob_end; ++r) {
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
      if (r + kPrefetchRows < r1)
        for (size_t off = 0; off < w.row_bytes; off += 64)
          __builtin_prefetch(src + kPrefetchRows * w.row_bytes + off, 0, 3);
      const float* wr = conv;
      if (w.type == TensorType::F32) {
        wr = reinterpret_cast<const float*>(src);
      } else {
        // F16 / BF16 widened exactly to f32 (FCVT, or a 16-bit shift), 8 at a time.
        const auto* h = reinterpret_cast<const uint16_t*>(src);
        const bool f16 = w.type == TensorType::F16;
        int64_t i = 0;
        for (; i + 8 <= n_in; i += 8) {
          const uint16x8_t v = vld1q_u16(h + i);
          if (f16) {
            vst1q_f32(conv + i, neon::Simd16::cvt_f16x4(vget_low_u16(v)));
            vst1q_f32(conv + i + 4, neon::Simd16::cvt_f16x4(vget_high_u16(v)));
          } else {
            vst1q_f32(conv + i, neon::Simd16::bf16x4(vget_low_u16(v)));
            vst1q_f32(conv + i + 4, neon::Simd16::bf16x4(vget_high_u16(v)));
          }
        }
        for (; i < n_in; ++i) {
          if (f16) {
            conv[i] = neon::Simd16::f16_to_f32(h[i]);
          } else {
            const uint32_t b = static_cast<uint32_t>(h[i]) << 16;
            std::memcpy(conv + i, &b, 4);
          }
        }
      }
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kFloatTile) {
        const int tt = static_cast<int>(min64(kFloatTile, n_tokens - t0));
        simd16::float_dot_tile_any<neon::Simd16, kFloatTile>(tt, wr, n_in, x + t0 * n_in,
                                                             ybuf + t0 * kOutRows + (r - ob), kOutRows);
      }
    }
    store_rows(ybuf, n_tokens, ob_end - ob, y + ob, w.n_out);
  }
}

const Backend kBackend = {&rows_float};

}  // namespace

const Backend& backend_neon() { return kBackend; }

}  // namespace ubatch::kernels::detail
