// AMX level of the packed GEMM: full blocks of 16 tokens through int8 tiles, the rest through
// the AVX-512 VNNI level (same arithmetic, so the same bits: gemm_internal.h).
//
// The unpacked panel is already an AMX B operand: segment s is S rows of 64 bytes, row k =
// step k = "4 bytes × 16 output rows" (VNNI layout, K = 4S = one segment). The A operand is
// 16 tokens' activation bytes of that segment, read in place from the packed activation rows
// (stride = row stride). One TDPBSUD (signed A × unsigned B) per (panel, 16 tokens, segment)
// gives C[token][row] = Σ xq · u over the segment — exactly one segment's integer dot, so the
// per-segment float step that follows (init, cvt, scale, fma; for the K-quants the fma into the
// super-block's bacc, and at its end the d and min terms) is the one every level runs.
//
// Tile use: tmm0/tmm3 C (16 × 64 B, two segments in flight), tmm1/tmm4 A (16 × 4S B),
// tmm2/tmm5 B (S × 64 B). Compiled with the AVX-512 and AMX flags; only reached when
// amx_available() (kernels/amx.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/amx.h"
#include "kernels/gemm_internal.h"

namespace ubatch::kernels::detail {

namespace {

constexpr int kTokens = 16;  // tokens per AMX block (tile rows)

AmxTileConfig config_for(int steps) {
  AmxTileConfig c;
  c.set_tile(0, kTokens, 64).set_tile(3, kTokens, 64);        // C: [16 tokens][16 rows] int32
  c.set_tile(1, kTokens, 4 * steps).set_tile(4, kTokens, 4 * steps);  // A: [16 tokens][seg] int8
  c.set_tile(2, steps, 64).set_tile(5, steps, 64);            // B: [S][16 rows × 4] uint8
  return c;
}

inline __m512 bcast_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_ps(v);
}
inline __m512i bcast_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// acc[t] (16 rows) += the float step of segment s for 16 tokens, from C rows c[t][16].
template <bool MIN>
inline void epilogue(const int32_t* c, const uint8_t* wseg, int steps, const ActLayout& a,
                     const uint8_t* x, int64_t s, __m512* acc) {
  const __m512 dw = _mm512_load_ps(wseg + 64 * steps);
  __m512 mw = _mm512_setzero_ps();
  if constexpr (MIN) mw = _mm512_load_ps(wseg + 64 * steps + 64);
  for (int t = 0; t < kTokens; ++t) {
    const uint8_t* xr = x + t * a.stride;
    const __m512i ia = _mm512_add_epi32(_mm512_load_si512(c + 16 * t), bcast_i32(xr + a.init_off + 4 * s));
    const __m512 scale = _mm512_mul_ps(dw, bcast_f32(xr + a.dx_off + 4 * s));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), scale, acc[t]);
    if constexpr (MIN) acc[t] = _mm512_fmadd_ps(mw, bcast_f32(xr + a.xs_off + 4 * s), acc[t]);
  }
}

// K-quants (gemm_internal.h): bacc[t] (16 rows) takes segment s's fma(float(ia), float(sc), ·).
inline void epilogue_kq(const int32_t* c, const uint8_t* wseg, int steps, const ActLayout& a,
                        const uint8_t* x, int64_t s, __m512* bacc) {
  const __m512 scf = _mm512_load_ps(wseg + 64 * steps);
  for (int t = 0; t < kTokens; ++t) {
    const uint8_t* xr = x + t * a.stride;
    const __m512i ia = _mm512_add_epi32(_mm512_load_si512(c + 16 * t), bcast_i32(xr + a.init_off + 4 * s));
    bacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), scf, bacc[t]);
  }
}

// K-quants: the end of super-block b (its area at ba: d, −dmin, mn pairs; packed_weight.h):
// accm[t] = fma(bacc[t], d · dx, accm[t]), then the min term; bacc restarts at +0.
template <bool MIN>
inline void block_end_kq(const uint8_t* ba, int segs, const ActLayout& a, const uint8_t* x, int64_t b,
                         __m512* bacc, float (*accm)[16]) {
  const __m512 d = _mm512_load_ps(ba);
  for (int t = 0; t < kTokens; ++t) {
    const uint8_t* xr = x + t * a.stride;
    const __m512 dx = bcast_f32(xr + a.dx_off + 4 * b * segs);
    __m512 v = _mm512_fmadd_ps(bacc[t], _mm512_mul_ps(d, dx), _mm512_load_ps(accm[t]));
    if constexpr (MIN) {
      __m512i msum = _mm512_setzero_si512();
      for (int j = 0; j < segs / 2; ++j)
        msum = _mm512_dpwssd_epi32(msum, _mm512_load_si512(ba + 128 + 64 * j),
                                   bcast_i32(xr + a.xs_off + 2 * b * segs + 4 * j));
      v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(_mm512_load_ps(ba + 64), dx), v);
    }
    _mm512_store_ps(accm[t], v);
    bacc[t] = _mm512_setzero_ps();
  }
}

// One panel (unpacked at wp) × 16 tokens at x, a K-quant: segments two at a time (a super-block
// has 8 or 16, so a pair never straddles two).
template <bool MIN>
void block16_kq(const uint8_t* wp, int64_t wstride, int steps, const ActLayout& a, const uint8_t* x,
                float* y, int64_t ldy, int rows) {
  alignas(64) int32_t c0[kTokens * 16], c1[kTokens * 16];
  alignas(64) float accm[kTokens][16] = {};
  __m512 bacc[kTokens];
  for (int t = 0; t < kTokens; ++t) bacc[t] = _mm512_setzero_ps();
  const int64_t n_seg = a.n_seg;
  const int segs = 64 / steps;
  const int64_t area = 64 + (MIN ? 64 + 32 * segs : 0);
  const uint8_t* blocks = wp + n_seg * wstride;
  for (int64_t s = 0; s < n_seg; s += 2) {
    _tile_zero(0);
    _tile_zero(3);
    _tile_loadd(1, x + s * a.seg, a.stride);
    _tile_loadd(2, wp + s * wstride, 64);
    _tile_loadd(4, x + (s + 1) * a.seg, a.stride);
    _tile_loadd(5, wp + (s + 1) * wstride, 64);
    _tile_dpbsud(0, 1, 2);
    _tile_dpbsud(3, 4, 5);
    _tile_stored(0, c0, 64);
    _tile_stored(3, c1, 64);
    epilogue_kq(c0, wp + s * wstride, steps, a, x, s, bacc);
    epilogue_kq(c1, wp + (s + 1) * wstride, steps, a, x, s + 1, bacc);
    if ((s + 2) % segs == 0) {
      const int64_t b = s / segs;
      block_end_kq<MIN>(blocks + b * area, segs, a, x, b, bacc, accm);
    }
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int t = 0; t < kTokens; ++t) _mm512_mask_storeu_ps(y + t * ldy, mask, _mm512_load_ps(accm[t]));
}

// One panel (unpacked at wp) × 16 tokens at x; y[t * ldy + r] for r < rows.
template <bool MIN>
void block16(const uint8_t* wp, int64_t wstride, int steps, const ActLayout& a, const uint8_t* x,
             float* y, int64_t ldy, int rows) {
  alignas(64) int32_t c0[kTokens * 16], c1[kTokens * 16];
  __m512 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm512_setzero_ps();
  const int64_t n_seg = a.n_seg;
  int64_t s = 0;
  for (; s + 2 <= n_seg; s += 2) {
    // Two segments' tile products, then both float steps in segment order.
    _tile_zero(0);
    _tile_zero(3);
    _tile_loadd(1, x + s * a.seg, a.stride);
    _tile_loadd(2, wp + s * wstride, 64);
    _tile_loadd(4, x + (s + 1) * a.seg, a.stride);
    _tile_loadd(5, wp + (s + 1) * wstride, 64);
    _tile_dpbsud(0, 1, 2);
    _tile_dpbsud(3, 4, 5);
    _tile_stored(0, c0, 64);
    _tile_stored(3, c1, 64);
    epilogue<MIN>(c0, wp + s * wstride, steps, a, x, s, acc);
    epilogue<MIN>(c1, wp + (s + 1) * wstride, steps, a, x, s + 1, acc);
  }
  if (s < n_seg) {
    _tile_zero(0);
    _tile_loadd(1, x + s * a.seg, a.stride);
    _tile_loadd(2, wp + s * wstride, 64);
    _tile_dpbsud(0, 1, 2);
    _tile_stored(0, c0, 64);
    epilogue<MIN>(c0, wp + s * wstride, steps, a, x, s, acc);
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int t = 0; t < kTokens; ++t) _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
}

}  // namespace

void gemm_panels_amx(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                     int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                     uint8_t* scratch) {
  const int64_t n_full = n_tokens / kTokens * kTokens;
  if (n_full > 0) {
    amx_ensure_config(config_for(w.fmt.steps));
    const int64_t wstride = unpacked_seg_stride(w.fmt);
    for (int64_t p = p0; p < p1; ++p) {
      const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, w.n_out - p * kPanelRows));
      unpack_panel_avx512(w, p, scratch);
      asm volatile("" ::: "memory");  // the tile loads below read what the unpacker stored
      for (int64_t t = 0; t < n_full; t += kTokens) {
        const uint8_t* x = x_packed + t * a.stride;
        float* yp = y + t * ldy + p * kPanelRows;
        if (w.fmt.k_quant && w.fmt.has_min) block16_kq<true>(scratch, wstride, w.fmt.steps, a, x, yp, ldy, rows);
        else if (w.fmt.k_quant) block16_kq<false>(scratch, wstride, w.fmt.steps, a, x, yp, ldy, rows);
        else if (w.fmt.has_min) block16<true>(scratch, wstride, w.fmt.steps, a, x, yp, ldy, rows);
        else block16<false>(scratch, wstride, w.fmt.steps, a, x, yp, ldy, rows);
      }
    }
  }
  if (n_full < n_tokens)
    gemm_panels_avx512(w, a, x_packed + n_full * a.stride, n_tokens - n_full, y + n_full * ldy, ldy,
                       p0, p1, scratch);
}

}  // namespace ubatch::kernels::detail
