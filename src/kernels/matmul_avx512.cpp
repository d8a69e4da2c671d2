// AVX-512 (F/BW/VL/DQ + VNNI) matmul kernels. See matmul_internal.h for the group layout.
//
// Per weight row: unpack to bytes + scales, transpose each group in registers so that step k
// holds 4 bytes of every position's segment, store the packed row (L1-resident). Per tile of
// up to 8 tokens: for each group, the S weight vectors stay in registers and each token's
// integer dot is S vpdpbusd; one cvt + mul + fma scales the 16 lanes into that token's float
// accumulator. Every token in a tile runs exactly the per-token instruction sequence of a
// 1-token tile, so results do not depend on n_tokens or the tiling.
//
// Compiled with the AVX-512 flags; only reached when the CPU has them (matmul_level()). Uses
// raw pointers and intrinsics only (no std templates: see matmul_unpack.h).
// GCC 12 reports its own intrinsic headers' _mm*_undefined_*() self-initialisation as
// uninitialized use once inlined (a compiler bug fixed in GCC 13); nothing here reads
// undefined lanes.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/matmul_internal.h"
#include "kernels/matmul_unpack.h"

namespace ubatch::kernels::detail {

namespace {

// Segment of position p for each S, as the transpositions below produce them.
constexpr SegmentLayout make_layout() {
  SegmentLayout l{};
  for (int p = 0; p < kPositions; ++p) {
    const int lane = p / 4, i = p % 4;
    l.seg_of_pos[0][p] = static_cast<int8_t>(p);                                       // S = 1
    l.seg_of_pos[1][p] = static_cast<int8_t>(2 * lane + (i & 1) + 8 * (i >> 1));        // S = 2
    l.seg_of_pos[2][p] = static_cast<int8_t>(4 * i + lane);                             // S = 4
    l.seg_of_pos[3][p] = static_cast<int8_t>(2 * i + (lane & 1) + 8 * (lane >> 1));     // S = 8
  }
  return l;
}
constexpr SegmentLayout kLayout = make_layout();

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// In each 128-bit lane, the 4x4 dword transpose of (a, b, c, d).
inline void transpose4(__m512i& a, __m512i& b, __m512i& c, __m512i& d) {
  const __m512i t0 = _mm512_unpacklo_epi32(a, b), t1 = _mm512_unpackhi_epi32(a, b);
  const __m512i t2 = _mm512_unpacklo_epi32(c, d), t3 = _mm512_unpackhi_epi32(c, d);
  a = _mm512_unpacklo_epi64(t0, t2);
  b = _mm512_unpackhi_epi64(t0, t2);
  c = _mm512_unpacklo_epi64(t1, t3);
  d = _mm512_unpackhi_epi64(t1, t3);
}

// 64 * S natural-order bytes at src -> S step vectors at dst (64-byte aligned).
template <int S>
inline void permute_group(const uint8_t* src, uint8_t* dst) {
  if constexpr (S == 8) {
    __m512i r[8];
    for (int j = 0; j < 8; ++j) r[j] = _mm512_loadu_si512(src + 64 * j);
    transpose4(r[0], r[1], r[2], r[3]);
    transpose4(r[4], r[5], r[6], r[7]);
    for (int k = 0; k < 4; ++k) {
      _mm512_store_si512(dst + 64 * k, _mm512_shuffle_i32x4(r[k], r[4 + k], 0x88));
      _mm512_store_si512(dst + 64 * (4 + k), _mm512_shuffle_i32x4(r[k], r[4 + k], 0xDD));
    }
  } else if constexpr (S == 4) {
    __m512i r[4];
    for (int j = 0; j < 4; ++j) r[j] = _mm512_loadu_si512(src + 64 * j);
    transpose4(r[0], r[1], r[2], r[3]);
    for (int k = 0; k < 4; ++k) _mm512_store_si512(dst + 64 * k, r[k]);
  } else if constexpr (S == 2) {
    const __m512 a = _mm512_castsi512_ps(_mm512_loadu_si512(src));
    const __m512 b = _mm512_castsi512_ps(_mm512_loadu_si512(src + 64));
    _mm512_store_ps(dst, _mm512_shuffle_ps(a, b, 0x88));
    _mm512_store_ps(dst + 64, _mm512_shuffle_ps(a, b, 0xDD));
  } else {
    _mm512_store_si512(dst, _mm512_loadu_si512(src));
  }
}

inline void permute_any(int steps, const uint8_t* src, uint8_t* dst) {
  switch (steps) {
    case 8: permute_group<8>(src, dst); return;
    case 4: permute_group<4>(src, dst); return;
    case 2: permute_group<2>(src, dst); return;
    default: permute_group<1>(src, dst); return;
  }
}

// Per-position values v[idx[p]] (0 where idx[p] < 0) from 16 floats at v.
inline __m512 gather_positions(const int8_t* idx8, const float* v) {
  const __m512i idx = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(idx8)));
  const __mmask16 valid = _mm512_cmpge_epi32_mask(idx, _mm512_setzero_si512());
  return _mm512_maskz_permutexvar_ps(valid, idx, _mm512_loadu_ps(v));
}

struct RowScratch {
  uint8_t* u;       // [n_in + 1024] natural bytes, zero past n_in
  float* dw;        // [n_sub + 64]
  float* mw;        // [n_sub + 64]
  uint8_t* packed;  // [rows][w_row_bytes_packed]
};

RowScratch carve(const Plan& plan, uint8_t* scratch) {
  const int64_t n_sub = plan.n_in / plan.info.sub_block;
  RowScratch s;
  s.u = scratch;
  s.dw = reinterpret_cast<float*>(scratch + plan.n_in + 1024);
  s.mw = s.dw + n_sub + 64;
  uint8_t* end = reinterpret_cast<uint8_t*>(s.mw + n_sub + 64);
  s.packed = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(end) + 63) & ~uintptr_t(63));
  for (int64_t i = plan.n_in; i < plan.n_in + 1024; ++i) s.u[i] = 0;
  for (int64_t i = n_sub; i < n_sub + 64; ++i) s.dw[i] = s.mw[i] = 0.0f;
  return s;
}

void pack_weight_row(const Plan& plan, const void* row, const RowScratch& s, uint8_t* out) {
  unpack_row(plan.type, row, plan.n_in, true, s.u, s.dw, s.mw);
  const int sub = plan.info.sub_block;
  for (int g = 0; g < plan.n_groups; ++g) {
    const Group& G = plan.groups[g];
    uint8_t* rec = out + G.w_offset;
    permute_any(G.steps, s.u + G.elem_start, rec);
    const int64_t first_sub = G.elem_start / sub;
    _mm512_store_ps(rec + 64 * G.steps, gather_positions(G.pos_sub, s.dw + first_sub));
    if (plan.info.has_min)
      _mm512_store_ps(rec + 64 * G.steps + 64, gather_positions(G.pos_sub, s.mw + first_sub));
  }
}

void pack_acts(const Plan& plan, const float* x, int64_t t0, int64_t t1, uint8_t* x_packed,
               uint8_t* tmp) {
  const int64_t n_in = plan.n_in;
  int8_t* q = reinterpret_cast<int8_t*>(tmp);  // [n_in + 1024], zero past n_in
  float* d = reinterpret_cast<float*>(tmp + n_in + 1024);
  for (int64_t i = n_in; i < n_in + 1024; ++i) q[i] = 0;
  const int act = plan.info.act_block;
  for (int64_t t = t0; t < t1; ++t) {
    quantize_act_row(x + t * n_in, n_in, act, q, d);
    uint8_t* out = x_packed + t * plan.x_row_bytes_packed;
    for (int g = 0; g < plan.n_groups; ++g) {
      const Group& G = plan.groups[g];
      uint8_t* rec = out + G.x_offset;
      permute_any(G.steps, reinterpret_cast<const uint8_t*>(q) + G.elem_start, rec);
      int32_t* init = reinterpret_cast<int32_t*>(rec + 64 * G.steps);
      float* dx = reinterpret_cast<float*>(rec + 64 * G.steps + 64);
      float* xs = reinterpret_cast<float*>(rec + 64 * G.steps + 128);
      const int seg_len = 4 * G.steps;
      const int64_t first_act = G.elem_start / act;
      for (int p = 0; p < kPositions; ++p) {
        int32_t sum = 0;
        float dp = 0.0f;
        if (G.pos_seg[p] >= 0) {
          const int8_t* seg = q + G.elem_start + G.pos_seg[p] * seg_len;
          for (int e = 0; e < seg_len; ++e) sum += seg[e];
          dp = d[first_act + G.pos_act[p]];
        }
        init[p] = -plan.info.offset * sum;
        dx[p] = dp;
        if (plan.info.has_min) xs[p] = dp * static_cast<float>(sum);
      }
    }
  }
}

// One group for a tile of TT tokens: acc[t] += cvt(init + sum_k dpbusd(w_k, x_k)) * (dw * dx)
// [+ mw * xs].
template <int S, int TT, bool MIN>
inline void group_tile(const uint8_t* wrec, const uint8_t* xrec, int64_t xstride, __m512* acc) {
  __m512i v[S];
  for (int k = 0; k < S; ++k) v[k] = _mm512_load_si512(wrec + 64 * k);
  const __m512 dw = _mm512_load_ps(wrec + 64 * S);
  __m512 mw = _mm512_setzero_ps();
  if constexpr (MIN) mw = _mm512_load_ps(wrec + 64 * S + 64);
  for (int t = 0; t < TT; ++t) {
    const uint8_t* xr = xrec + t * xstride;
    __m512i ia = _mm512_load_si512(xr + 64 * S);
    if constexpr (TT <= 2 && S >= 4) {
      // A second integer chain shortens the latency when few tokens share the weights;
      // integer sums are exact, so the split does not change any result.
      __m512i ib = _mm512_setzero_si512();
      for (int k = 0; k < S; k += 2) {
        ia = _mm512_dpbusd_epi32(ia, v[k], _mm512_load_si512(xr + 64 * k));
        ib = _mm512_dpbusd_epi32(ib, v[k + 1], _mm512_load_si512(xr + 64 * (k + 1)));
      }
      ia = _mm512_add_epi32(ia, ib);
    } else {
      for (int k = 0; k < S; ++k) ia = _mm512_dpbusd_epi32(ia, v[k], _mm512_load_si512(xr + 64 * k));
    }
    const __m512 s = _mm512_mul_ps(dw, _mm512_load_ps(xr + 64 * S + 64));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), s, acc[t]);
    if constexpr (MIN) acc[t] = _mm512_fmadd_ps(mw, _mm512_load_ps(xr + 64 * S + 128), acc[t]);
  }
}

template <int TT, bool MIN>
void row_tile(const Plan& plan, const uint8_t* wp, const uint8_t* xp, int64_t xstride, float* y,
              int64_t ystride) {
  __m512 acc[TT];
  for (int t = 0; t < TT; ++t) acc[t] = _mm512_setzero_ps();
  const Group* G = plan.groups;
  const int n = plan.n_groups;
  int g = 0;
  for (; g < n && G[g].steps == 8; ++g) group_tile<8, TT, MIN>(wp + G[g].w_offset, xp + G[g].x_offset, xstride, acc);
  for (; g < n && G[g].steps == 4; ++g) group_tile<4, TT, MIN>(wp + G[g].w_offset, xp + G[g].x_offset, xstride, acc);
  for (; g < n && G[g].steps == 2; ++g) group_tile<2, TT, MIN>(wp + G[g].w_offset, xp + G[g].x_offset, xstride, acc);
  for (; g < n && G[g].steps == 1; ++g) group_tile<1, TT, MIN>(wp + G[g].w_offset, xp + G[g].x_offset, xstride, acc);
  for (int t = 0; t < TT; ++t) y[t * ystride] = _mm512_reduce_add_ps(acc[t]);
}

template <bool MIN>
void row_tile_any(int tt, const Plan& plan, const uint8_t* wp, const uint8_t* xp, int64_t xstride,
                  float* y, int64_t ystride) {
  switch (tt) {
    case 1: return row_tile<1, MIN>(plan, wp, xp, xstride, y, ystride);
    case 2: return row_tile<2, MIN>(plan, wp, xp, xstride, y, ystride);
    case 3: return row_tile<3, MIN>(plan, wp, xp, xstride, y, ystride);
    case 4: return row_tile<4, MIN>(plan, wp, xp, xstride, y, ystride);
    case 5: return row_tile<5, MIN>(plan, wp, xp, xstride, y, ystride);
    case 6: return row_tile<6, MIN>(plan, wp, xp, xstride, y, ystride);
    case 7: return row_tile<7, MIN>(plan, wp, xp, xstride, y, ystride);
    default: return row_tile<8, MIN>(plan, wp, xp, xstride, y, ystride);
  }
}

constexpr int kTile = 8;      // tokens per tile
constexpr int kRowBlock = kMaxRowBlock;  // weight rows packed together when there are several tiles

void rows_quant(const Plan& plan, const WeightView& w, const uint8_t* x_packed, int64_t n_tokens,
                float* y, int64_t r0, int64_t r1, uint8_t* scratch) {
  const RowScratch s = carve(plan, scratch);
  const int64_t rb = n_tokens > kTile ? kRowBlock : 1;
  const int64_t wpb = plan.w_row_bytes_packed, xstride = plan.x_row_bytes_packed;
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  for (int64_t r = r0; r < r1; r += rb) {
    const int64_t nr = min64(rb, r1 - r);
    for (int64_t i = 0; i < nr; ++i)
      pack_weight_row(plan, wdata + (r + i) * w.row_bytes, s, s.packed + i * wpb);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTile) {
      const int tt = static_cast<int>(min64(kTile, n_tokens - t0));
      for (int64_t i = 0; i < nr; ++i) {
        float* yo = y + t0 * w.n_out + r + i;
        const uint8_t* xp = x_packed + t0 * xstride;
        if (plan.info.has_min)
          row_tile_any<true>(tt, plan, s.packed + i * wpb, xp, xstride, yo, w.n_out);
        else
          row_tile_any<false>(tt, plan, s.packed + i * wpb, xp, xstride, yo, w.n_out);
      }
    }
  }
}

// Float weights: acc[t] (16 lanes) += w[i .. i+15] * x[t][i .. i+15], masked tail, then the
// fixed reduction.
template <int TT>
void float_tile(const float* w, int64_t n_in, const float* x, int64_t xstride, float* y,
                int64_t ystride) {
  __m512 acc[TT];
  for (int t = 0; t < TT; ++t) acc[t] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n_in; i += 16) {
    const __m512 wv = _mm512_loadu_ps(w + i);
    for (int t = 0; t < TT; ++t) acc[t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + t * xstride + i), acc[t]);
  }
  if (i < n_in) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n_in - i)) - 1);
    const __m512 wv = _mm512_maskz_loadu_ps(m, w + i);
    for (int t = 0; t < TT; ++t)
      acc[t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + t * xstride + i), acc[t]);
  }
  for (int t = 0; t < TT; ++t) y[t * ystride] = _mm512_reduce_add_ps(acc[t]);
}

void float_tile_any(int tt, const float* w, int64_t n_in, const float* x, float* y, int64_t ystride) {
  switch (tt) {
    case 1: return float_tile<1>(w, n_in, x, n_in, y, ystride);
    case 2: return float_tile<2>(w, n_in, x, n_in, y, ystride);
    case 3: return float_tile<3>(w, n_in, x, n_in, y, ystride);
    case 4: return float_tile<4>(w, n_in, x, n_in, y, ystride);
    case 5: return float_tile<5>(w, n_in, x, n_in, y, ystride);
    case 6: return float_tile<6>(w, n_in, x, n_in, y, ystride);
    case 7: return float_tile<7>(w, n_in, x, n_in, y, ystride);
    default: return float_tile<8>(w, n_in, x, n_in, y, ystride);
  }
}

void rows_float(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t r0,
                int64_t r1, uint8_t* scratch) {
  const int64_t n_in = w.n_in;
  float* conv = reinterpret_cast<float*>(scratch);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* src = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
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
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTile) {
      const int tt = static_cast<int>(min64(kTile, n_tokens - t0));
      float_tile_any(tt, wr, n_in, x + t0 * n_in, y + t0 * w.n_out + r, w.n_out);
    }
  }
}

const Backend kBackend = {&kLayout, true, &pack_acts, &rows_quant, &rows_float};

}  // namespace

const Backend& backend_avx512() { return kBackend; }

}  // namespace ubatch::kernels::detail
