// AVX-512 matmul of float weights (F32, F16, BF16): the canonical 16-lane float dot of
// matmul_float_inl.h, kTile tokens per pass over a weight row. Quantized weights go through
// the packed GEMM (gemm_avx512.cpp).
//
// Compiled with the AVX-512 flags; only reached when the CPU has them.
// GCC 12 reports its own intrinsic headers' _mm*_undefined_*() self-initialisation as
// uninitialized use once inlined (a compiler bug fixed in GCC 13); nothing here reads
// undefined lanes.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/matmul_float_inl.h"
#include "kernels/matmul_internal.h"
#include "kernels/simd16_avx512.h"

namespace ubatch::kernels::detail {

namespace {

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

constexpr int kTile = 8;          // tokens per pass over a weight row
constexpr int kPrefetchRows = 4;  // how far ahead (in rows) the weights are prefetched

// ybuf[t][0 .. nb) (rows of kOutRows floats) -> y[t * n_out + 0 .. nb).
void store_rows(const float* ybuf, int64_t n_tokens, int64_t nb, float* y, int64_t n_out) {
  const __mmask16 m = static_cast<__mmask16>((1u << nb) - 1);
  for (int64_t t = 0; t < n_tokens; ++t)
    _mm512_mask_storeu_ps(y + t * n_out, m, _mm512_loadu_ps(ybuf + t * kOutRows));
}

// Float weights: acc[t] (16 lanes) += w[i .. i+15] * x[t][i .. i+15], masked tail, then the
// fixed reduction.
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
          _mm_prefetch(reinterpret_cast<const char*>(src + kPrefetchRows * w.row_bytes + off), _MM_HINT_T0);
      const float* wr = conv;
      if (w.type == TensorType::F32) {
        wr = reinterpret_cast<const float*>(src);
      } else {
        const auto* h = reinterpret_cast<const uint16_t*>(src);
        int64_t i = 0;
        if (w.type == TensorType::F16) {
          for (; i + 16 <= n_in; i += 16)
            _mm512_storeu_ps(conv + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
          for (; i < n_in; ++i) conv[i] = _cvtsh_ss(h[i]);
        } else {
          for (; i + 16 <= n_in; i += 16) {
            const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i)));
            _mm512_storeu_ps(conv + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
          }
          for (; i < n_in; ++i) {
            const uint32_t b = static_cast<uint32_t>(h[i]) << 16;
            __builtin_memcpy(conv + i, &b, 4);
          }
        }
      }
      // The canonical float dot of matmul_float_inl.h, kTile tokens per weight pass.
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kTile) {
        const int tt = static_cast<int>(min64(kTile, n_tokens - t0));
        simd16::float_dot_tile_any<avx512::Simd16, kTile>(tt, wr, n_in, x + t0 * n_in,
                                                  ybuf + t0 * kOutRows + (r - ob), kOutRows);
      }
    }
    store_rows(ybuf, n_tokens, ob_end - ob, y + ob, w.n_out);
  }
}

const Backend kBackend = {&rows_float};

}  // namespace

const Backend& backend_avx512() { return kBackend; }

}  // namespace ubatch::kernels::detail
