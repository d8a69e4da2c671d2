// AVX2 matmul kernels. Same scheme as matmul_avx512.cpp (see matmul_internal.h), with the 16
// positions of a group held as two 8-lane halves and the integer dots done by vpmaddubsw +
// vpmaddwd (no VNNI). Q8_0 weights stay signed (offset 0) and are multiplied as
// |w| * sign(x, w), so the 16-bit pair sums cannot saturate (|w| <= 128, |x| <= 127).
//
// Compiled with -mavx2 -mfma -mf16c; only reached when the CPU has them. Raw pointers and
// intrinsics only (see matmul_unpack.h for why).
// GCC 12 reports its own intrinsic headers' _mm*_undefined_*() self-initialisation as
// uninitialized use once inlined (a compiler bug fixed in GCC 13); nothing here reads
// undefined lanes.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/matmul_float_inl.h"
#include "kernels/matmul_internal.h"
#include "kernels/matmul_unpack.h"
#include "kernels/simd16_avx2.h"

namespace ubatch::kernels::detail {

namespace {

constexpr SegmentLayout make_layout() {
  SegmentLayout l{};
  for (int p = 0; p < kPositions; ++p) {
    const int half = p / 8, q = p % 8, lane = q / 4, i = q % 4;
    l.seg_of_pos[0][p] = static_cast<int8_t>(p);                                             // S = 1
    l.seg_of_pos[1][p] = static_cast<int8_t>(8 * half + 2 * lane + (i & 1) + 4 * (i >> 1));  // S = 2
    l.seg_of_pos[2][p] = static_cast<int8_t>(8 * half + 2 * i + lane);                       // S = 4
    l.seg_of_pos[3][p] = static_cast<int8_t>(p);                                             // S = 8
  }
  return l;
}
constexpr SegmentLayout kLayout = make_layout();

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

inline __m256i load256(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i loadu256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store256(uint8_t* p, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }

// In each 128-bit lane, the 4x4 dword transpose of (a, b, c, d).
inline void transpose4(__m256i& a, __m256i& b, __m256i& c, __m256i& d) {
  const __m256i t0 = _mm256_unpacklo_epi32(a, b), t1 = _mm256_unpackhi_epi32(a, b);
  const __m256i t2 = _mm256_unpacklo_epi32(c, d), t3 = _mm256_unpackhi_epi32(c, d);
  a = _mm256_unpacklo_epi64(t0, t2);
  b = _mm256_unpackhi_epi64(t0, t2);
  c = _mm256_unpacklo_epi64(t1, t3);
  d = _mm256_unpackhi_epi64(t1, t3);
}

// 8 positions (one half) of a group: natural bytes at src -> steps at dst (+64 per step).
template <int S>
inline void permute_half(const uint8_t* src, uint8_t* dst) {
  if constexpr (S == 8) {
    __m256i r[8];
    for (int j = 0; j < 8; ++j) r[j] = loadu256(src + 32 * j);
    transpose4(r[0], r[1], r[2], r[3]);
    transpose4(r[4], r[5], r[6], r[7]);
    for (int k = 0; k < 4; ++k) {
      store256(dst + 64 * k, _mm256_permute2x128_si256(r[k], r[4 + k], 0x20));
      store256(dst + 64 * (4 + k), _mm256_permute2x128_si256(r[k], r[4 + k], 0x31));
    }
  } else if constexpr (S == 4) {
    __m256i r[4];
    for (int j = 0; j < 4; ++j) r[j] = loadu256(src + 32 * j);
    transpose4(r[0], r[1], r[2], r[3]);
    for (int k = 0; k < 4; ++k) store256(dst + 64 * k, r[k]);
  } else if constexpr (S == 2) {
    const __m256 a = _mm256_castsi256_ps(loadu256(src));
    const __m256 b = _mm256_castsi256_ps(loadu256(src + 32));
    store256(dst, _mm256_castps_si256(_mm256_shuffle_ps(a, b, 0x88)));
    store256(dst + 64, _mm256_castps_si256(_mm256_shuffle_ps(a, b, 0xDD)));
  } else {
    store256(dst, loadu256(src));
  }
}

inline void permute_any(int steps, const uint8_t* src, uint8_t* dst) {
  const int64_t half_bytes = 32 * steps;  // natural bytes per half
  switch (steps) {
    case 8: permute_half<8>(src, dst); permute_half<8>(src + half_bytes, dst + 32); return;
    case 4: permute_half<4>(src, dst); permute_half<4>(src + half_bytes, dst + 32); return;
    case 2: permute_half<2>(src, dst); permute_half<2>(src + half_bytes, dst + 32); return;
    default: permute_half<1>(src, dst); permute_half<1>(src + half_bytes, dst + 32); return;
  }
}

// Per-position values v[idx[p]] (0 where idx[p] < 0).
inline void gather_positions(const int8_t* idx, const float* v, float* out) {
  for (int p = 0; p < kPositions; ++p) out[p] = idx[p] >= 0 ? v[idx[p]] : 0.0f;
}

struct RowScratch {
  uint8_t* u;
  float* dw;
  float* mw;
  uint8_t* packed;
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
  unpack_row(plan.type, row, plan.n_in, false, s.u, s.dw, s.mw);
  const int sub = plan.info.sub_block;
  for (int g = 0; g < plan.n_groups; ++g) {
    const Group& G = plan.groups[g];
    uint8_t* rec = out + G.w_offset;
    permute_any(G.steps, s.u + G.elem_start, rec);
    const int64_t first_sub = G.elem_start / sub;
    gather_positions(G.pos_sub, s.dw + first_sub, reinterpret_cast<float*>(rec + 64 * G.steps));
    if (plan.info.has_min)
      gather_positions(G.pos_sub, s.mw + first_sub, reinterpret_cast<float*>(rec + 64 * G.steps + 64));
  }
}

void pack_acts(const Plan& plan, const float* x, int64_t t0, int64_t t1, uint8_t* x_packed,
               uint8_t* tmp) {
  const int64_t n_in = plan.n_in;
  int8_t* q = reinterpret_cast<int8_t*>(tmp);
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

// Integer dot of one half (8 positions) of a group for one token, added to ia.
template <int S, bool SIGNED>
inline __m256i half_dot(const uint8_t* w, const uint8_t* x, __m256i ia) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (SIGNED) {
    for (int k = 0; k < S; ++k) {
      const __m256i wv = load256(w + 64 * k);
      const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(load256(x + 64 * k), wv));
      ia = _mm256_add_epi32(ia, _mm256_madd_epi16(p, ones));
    }
  } else if constexpr (S == 1) {
    ia = _mm256_add_epi32(ia, _mm256_madd_epi16(_mm256_maddubs_epi16(load256(w), load256(x)), ones));
  } else {
    // u <= 63 and |x| <= 127: two steps' 16-bit pair sums stay below 2^15.
    for (int k = 0; k < S; k += 2) {
      const __m256i p0 = _mm256_maddubs_epi16(load256(w + 64 * k), load256(x + 64 * k));
      const __m256i p1 = _mm256_maddubs_epi16(load256(w + 64 * (k + 1)), load256(x + 64 * (k + 1)));
      ia = _mm256_add_epi32(ia, _mm256_madd_epi16(_mm256_add_epi16(p0, p1), ones));
    }
  }
  return ia;
}

template <int S, int TT, bool MIN, bool SIGNED>
inline void group_tile(const uint8_t* wrec, const uint8_t* xrec, int64_t xstride, __m256* acc) {
  const float* dwp = reinterpret_cast<const float*>(wrec + 64 * S);
  const __m256 dw_lo = _mm256_load_ps(dwp), dw_hi = _mm256_load_ps(dwp + 8);
  for (int t = 0; t < TT; ++t) {
    const uint8_t* xr = xrec + t * xstride;
    const __m256i ia_lo = half_dot<S, SIGNED>(wrec, xr, load256(xr + 64 * S));
    const __m256i ia_hi = half_dot<S, SIGNED>(wrec + 32, xr + 32, load256(xr + 64 * S + 32));
    const float* dx = reinterpret_cast<const float*>(xr + 64 * S + 64);
    acc[2 * t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia_lo), _mm256_mul_ps(dw_lo, _mm256_load_ps(dx)), acc[2 * t]);
    acc[2 * t + 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia_hi), _mm256_mul_ps(dw_hi, _mm256_load_ps(dx + 8)), acc[2 * t + 1]);
    if constexpr (MIN) {
      const float* mw = reinterpret_cast<const float*>(wrec + 64 * S + 64);
      const float* xs = reinterpret_cast<const float*>(xr + 64 * S + 128);
      acc[2 * t] = _mm256_fmadd_ps(_mm256_load_ps(mw), _mm256_load_ps(xs), acc[2 * t]);
      acc[2 * t + 1] = _mm256_fmadd_ps(_mm256_load_ps(mw + 8), _mm256_load_ps(xs + 8), acc[2 * t + 1]);
    }
  }
}

inline float reduce8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int TT, bool MIN, bool SIGNED>
void row_tile(const Plan& plan, const uint8_t* wp, const uint8_t* xp, int64_t xstride, float* y,
              int64_t ystride) {
  __m256 acc[2 * TT];
  for (int t = 0; t < 2 * TT; ++t) acc[t] = _mm256_setzero_ps();
  const Group* G = plan.groups;
  const int n = plan.n_groups;
  int g = 0;
  for (; g < n && G[g].steps == 8; ++g) group_tile<8, TT, MIN, SIGNED>(wp + G[g].w_offset, xp + G[g].x_offset, xstride, acc);
  for (; g < n && G[g].steps == 4; ++g) group_tile<4, TT, MIN, SIGNED>(wp + G[g].w_offset, xp + G[g].x_offset, xstride, acc);
  for (; g < n && G[g].steps == 2; ++g) group_tile<2, TT, MIN, SIGNED>(wp + G[g].w_offset, xp + G[g].x_offset, xstride, acc);
  for (; g < n && G[g].steps == 1; ++g) group_tile<1, TT, MIN, SIGNED>(wp + G[g].w_offset, xp + G[g].x_offset, xstride, acc);
  for (int t = 0; t < TT; ++t) y[t * ystride] = reduce8(_mm256_add_ps(acc[2 * t], acc[2 * t + 1]));
}

template <bool MIN, bool SIGNED>
void row_tile_any(int tt, const Plan& plan, const uint8_t* wp, const uint8_t* xp, int64_t xstride,
                  float* y, int64_t ystride) {
  switch (tt) {
    case 1: return row_tile<1, MIN, SIGNED>(plan, wp, xp, xstride, y, ystride);
    case 2: return row_tile<2, MIN, SIGNED>(plan, wp, xp, xstride, y, ystride);
    case 3: return row_tile<3, MIN, SIGNED>(plan, wp, xp, xstride, y, ystride);
    default: return row_tile<4, MIN, SIGNED>(plan, wp, xp, xstride, y, ystride);
  }
}

constexpr int kTile = 4;
constexpr int kRowBlock = kMaxRowBlock;
constexpr int kPrefetchRows = 4;  // how far ahead (in rows) the weights are prefetched

// Weight rows packed at a time: one while all packed activations stay in L1 (each row's tiles
// then read them from there); else kRowBlock, and each tile of activations is read from L2
// once per block instead of once per row. Results do not depend on it.
int64_t row_block(const Plan& plan, int64_t n_tokens) {
  return n_tokens > kTile && n_tokens * plan.x_row_bytes_packed > 24 * 1024 ? kRowBlock : 1;
}

// ybuf[t][0 .. nb) (rows of kOutRows floats) -> y[t * n_out + 0 .. nb).
void store_rows(const float* ybuf, int64_t n_tokens, int64_t nb, float* y, int64_t n_out) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* src = ybuf + t * kOutRows;
    float* dst = y + t * n_out;
    if (nb == kOutRows) {
      _mm256_storeu_ps(dst, _mm256_loadu_ps(src));
      _mm256_storeu_ps(dst + 8, _mm256_loadu_ps(src + 8));
    } else {
      for (int64_t i = 0; i < nb; ++i) dst[i] = src[i];
    }
  }
}

void rows_quant(const Plan& plan, const WeightView& w, const uint8_t* x_packed, int64_t n_tokens,
                float* y, int64_t r0, int64_t r1, uint8_t* scratch) {
  const RowScratch s = carve(plan, scratch);
  // Results of kOutRows weight rows for every token, written out together: y's rows for
  // different tokens are n_out floats apart (often a multiple of 4 KiB), so writing them a
  // float at a time would keep n_tokens lines of one cache set open and thrash it.
  float* ybuf = reinterpret_cast<float*>(s.packed + kMaxRowBlock * plan.w_row_bytes_packed);
  const int64_t rb = row_block(plan, n_tokens);
  const int64_t wpb = plan.w_row_bytes_packed, xstride = plan.x_row_bytes_packed;
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  const bool is_signed = plan.type == TensorType::Q8_0;
  for (int64_t ob = r0; ob < r1; ob += kOutRows) {
    const int64_t ob_end = min64(ob + kOutRows, r1);
    for (int64_t r = ob; r < ob_end; r += rb) {
      const int64_t nr = min64(rb, ob_end - r);
      // Software prefetch, kPrefetchRows rows past the block, one row per row of work:
      // the rows stream from memory, and the work between loads would otherwise leave the
      // memory system idle (a burst of prefetches per block would only queue up).
      // Into L1 for one tile; into L2 when the packed activations of several tiles fill L1.
      auto prefetch_row = [&](int64_t pr) {
        if (pr >= r1) return;
        const char* p = reinterpret_cast<const char*>(wdata + pr * w.row_bytes);
        if (rb == 1)
          for (size_t off = 0; off < w.row_bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
        else
          for (size_t off = 0; off < w.row_bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
      };
      for (int64_t i = 0; i < nr; ++i) {
        if (rb == 1) prefetch_row(r + kPrefetchRows);
        pack_weight_row(plan, wdata + (r + i) * w.row_bytes, s, s.packed + i * wpb);
      }
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kTile) {
        const int tt = static_cast<int>(min64(kTile, n_tokens - t0));
        const uint8_t* xp = x_packed + t0 * xstride;
        for (int64_t i = 0; i < nr; ++i) {
          if (rb > 1 && t0 == 0) prefetch_row(r + nr + i + kPrefetchRows - 1);
          float* yo = ybuf + t0 * kOutRows + (r - ob) + i;
          const uint8_t* wp = s.packed + i * wpb;
          if (is_signed)
            row_tile_any<false, true>(tt, plan, wp, xp, xstride, yo, kOutRows);
          else if (plan.info.has_min)
            row_tile_any<true, false>(tt, plan, wp, xp, xstride, yo, kOutRows);
          else
            row_tile_any<false, false>(tt, plan, wp, xp, xstride, yo, kOutRows);
        }
      }
    }
    store_rows(ybuf, n_tokens, ob_end - ob, y + ob, w.n_out);
  }
}

void rows_float(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t r0,
                int64_t r1, uint8_t* scratch) {
  const int64_t n_in = w.n_in;
  float* conv = reinterpret_cast<float*>(scratch);
  float* ybuf = conv + n_in + 16;  // [n_tokens][kOutRows], as in rows_quant
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
          for (; i + 8 <= n_in; i += 8)
            _mm256_storeu_ps(conv + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
          for (; i < n_in; ++i) conv[i] = _cvtsh_ss(h[i]);
        } else {
          for (; i + 8 <= n_in; i += 8) {
            const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
            _mm256_storeu_ps(conv + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
          }
          for (; i < n_in; ++i) {
            const uint32_t b = static_cast<uint32_t>(h[i]) << 16;
            __builtin_memcpy(conv + i, &b, 4);
          }
        }
      }
      // The canonical float dot of matmul_float_inl.h, kFloatTile tokens per weight pass
      // (two ymm accumulators per token).
      constexpr int kFloatTile = 4;
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kFloatTile) {
        const int tt = static_cast<int>(min64(kFloatTile, n_tokens - t0));
        simd16::float_dot_tile_any<avx2::Simd16, kFloatTile>(tt, wr, n_in, x + t0 * n_in,
                                                       ybuf + t0 * kOutRows + (r - ob), kOutRows);
      }
    }
    store_rows(ybuf, n_tokens, ob_end - ob, y + ob, w.n_out);
  }
}

const Backend kBackend = {&kLayout, false, &pack_acts, &rows_quant, &rows_float};

}  // namespace

const Backend& backend_avx2() { return kBackend; }

}  // namespace ubatch::kernels::detail
