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

#include "kernels/matmul_float_inl.h"
#include "kernels/matmul_internal.h"
#include "kernels/matmul_unpack.h"
#include "kernels/simd16_avx512.h"

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

// Loaders: load64(e) returns the unpacked bytes u of elements e .. e+63 (e % 64 == 0) in
// natural order; load32(e) the 32 bytes of elements e .. e+31 and zeros (a row's last block).
// Fused loaders read the blocks directly; NaturalLoader reads a row unpack_row() wrote.
struct NaturalLoader {
  const uint8_t* u;  // zero-padded past the row
  __m512i load64(int64_t e) const { return _mm512_loadu_si512(u + e); }
  __m512i load32(int64_t e) const { return _mm512_loadu_si512(u + e); }
};

inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

struct LoaderQ8_0 {  // u = q ^ 0x80
  const BlockQ8_0* b;
  __m512i load64(int64_t e) const {
    const BlockQ8_0* p = b + e / kQK;
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(loadu256(p[0].qs)), loadu256(p[1].qs), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  __m512i load32(int64_t e) const {
    const __m256i v = _mm256_xor_si256(loadu256(b[e / kQK].qs), _mm256_set1_epi8(static_cast<char>(0x80)));
    return _mm512_zextsi256_si512(v);
  }
};

struct LoaderQ5_0 {  // u = nibble | fifth bit << 4
  const BlockQ5_0* b;
  static __m512i nibbles(__m512i v) {  // 128-bit lanes [qs, qs, qs', qs'] -> [lo, hi, lo', hi']
    const __m512i shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    return _mm512_and_si512(_mm512_srlv_epi64(v, shift), _mm512_set1_epi8(0x0F));
  }
  __m512i load64(int64_t e) const {
    const BlockQ5_0* p = b + e / kQK;
    const __m512i q = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(loadu128(p[0].qs))),
        _mm256_broadcastsi128_si256(loadu128(p[1].qs)), 1);
    uint32_t h0, h1;
    __builtin_memcpy(&h0, p[0].qh, 4);
    __builtin_memcpy(&h1, p[1].qh, 4);
    const __mmask64 hb = _cvtu64_mask64(uint64_t(h0) | (uint64_t(h1) << 32));
    const __m512i v = nibbles(q);
    return _mm512_mask_add_epi8(v, hb, v, _mm512_set1_epi8(16));
  }
  __m512i load32(int64_t e) const {
    const BlockQ5_0* p = b + e / kQK;
    const __m512i q = _mm512_zextsi256_si512(_mm256_broadcastsi128_si256(loadu128(p[0].qs)));
    uint32_t h0;
    __builtin_memcpy(&h0, p[0].qh, 4);
    const __m512i v = _mm512_maskz_mov_epi8(_cvtu64_mask64(0xFFFFFFFFull), nibbles(q));
    return _mm512_mask_add_epi8(v, _cvtu64_mask64(h0), v, _mm512_set1_epi8(16));
  }
};

struct LoaderQ4_K {  // u = nibble
  const BlockQ4_K* b;
  __m512i load64(int64_t e) const {
    const uint8_t* q = b[e / kQK_K].qs + 32 * ((e % kQK_K) / 64);
    const __m512i v = _mm512_broadcast_i64x4(loadu256(q));
    const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    return _mm512_and_si512(_mm512_srlv_epi64(v, shift), _mm512_set1_epi8(0x0F));
  }
  __m512i load32(int64_t e) const { return load64(e); }  // never used: rows are 256-multiples
};

struct LoaderQ6_K {  // u = 6-bit q
  const BlockQ6_K* b;
  __m512i load64(int64_t e) const {
    const BlockQ6_K& B = b[e / kQK_K];
    const int h = static_cast<int>((e % kQK_K) / 128), m = static_cast<int>((e % 128) / 64);
    // Elements 128h + 64m + l: c = 2m (l < 32) from ql[l], c = 2m + 1 from ql[32 + l];
    // nibble m; high bits (qh[l] >> 2c) & 3.
    const __m512i ql = _mm512_loadu_si512(B.ql + 64 * h);
    const __m512i low = _mm512_and_si512(_mm512_srli_epi16(ql, static_cast<unsigned>(4 * m)), _mm512_set1_epi8(0x0F));
    const __m512i qh = _mm512_broadcast_i64x4(loadu256(B.qh + 32 * h));
    const int64_t c0 = 4 * m, c1 = 4 * m + 2;
    const __m512i shift = _mm512_setr_epi64(c0, c0, c0, c0, c1, c1, c1, c1);
    const __m512i high = _mm512_and_si512(_mm512_srlv_epi64(qh, shift), _mm512_set1_epi8(3));
    return _mm512_or_si512(low, _mm512_slli_epi16(high, 4));
  }
  __m512i load32(int64_t e) const { return load64(e); }  // never used: rows are 256-multiples
};

// The f16 at offset 0 of n blocks of `stride` bytes -> floats (16 at a time, gathered).
inline void block_halves(const uint8_t* base, int stride, int64_t n, float* out) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(stride));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, base + i * stride, 1);
    _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)));
  }
}

// Natural per-sub-block scales of the K-quants the fused loaders handle.
inline void scales_q4_k(const BlockQ4_K* b, int64_t n_sb, float* dw, float* mw) {
  for (int64_t i = 0; i < n_sb; ++i, dw += 8, mw += 8) {
    uint8_t sm[16];  // 8 scales, then 8 mins
    k4_scales_mins(b[i].scales, sm, sm + 8);
    const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(loadu128(sm)));
    const __m512 f = _mm512_setr_ps(_cvtsh_ss(b[i].d), 0, 0, 0, 0, 0, 0, 0, -_cvtsh_ss(b[i].dmin), 0, 0, 0, 0, 0, 0, 0);
    const __m512 r = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8), f), v);
    _mm256_storeu_ps(dw, _mm512_castps512_ps256(r));
    _mm256_storeu_ps(mw, _mm512_extractf32x8_ps(r, 1));
  }
}
inline void scales_q6_k(const BlockQ6_K* b, int64_t n_sb, float* dw) {
  for (int64_t i = 0; i < n_sb; ++i, dw += 16) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(loadu128(b[i].scales)));
    _mm512_storeu_ps(dw, _mm512_mul_ps(d, sc));
  }
}

// 64 * S bytes of elements e .. (n_elems of them) -> S step vectors at dst (64-byte aligned).
template <int S, class L>
inline void permute_group(const L& ld, int64_t e, int64_t n_elems, uint8_t* dst) {
  if constexpr (S == 8) {
    __m512i r[8];
    for (int j = 0; j < 8; ++j) r[j] = ld.load64(e + 64 * j);
    transpose4(r[0], r[1], r[2], r[3]);
    transpose4(r[4], r[5], r[6], r[7]);
    for (int k = 0; k < 4; ++k) {
      _mm512_store_si512(dst + 64 * k, _mm512_shuffle_i32x4(r[k], r[4 + k], 0x88));
      _mm512_store_si512(dst + 64 * (4 + k), _mm512_shuffle_i32x4(r[k], r[4 + k], 0xDD));
    }
  } else if constexpr (S == 4) {
    __m512i r[4];
    for (int j = 0; j < 4; ++j) r[j] = ld.load64(e + 64 * j);
    transpose4(r[0], r[1], r[2], r[3]);
    for (int k = 0; k < 4; ++k) _mm512_store_si512(dst + 64 * k, r[k]);
  } else if constexpr (S == 2) {
    const __m512 a = _mm512_castsi512_ps(ld.load64(e));
    const __m512 b = _mm512_castsi512_ps(ld.load64(e + 64));
    _mm512_store_ps(dst, _mm512_shuffle_ps(a, b, 0x88));
    _mm512_store_ps(dst + 64, _mm512_shuffle_ps(a, b, 0xDD));
  } else {
    _mm512_store_si512(dst, n_elems == 64 ? ld.load64(e) : ld.load32(e));
  }
}

template <class L>
inline void permute_any(const L& ld, const Group& G, uint8_t* dst) {
  switch (G.steps) {
    case 8: permute_group<8>(ld, G.elem_start, G.n_elems, dst); return;
    case 4: permute_group<4>(ld, G.elem_start, G.n_elems, dst); return;
    case 2: permute_group<2>(ld, G.elem_start, G.n_elems, dst); return;
    default: permute_group<1>(ld, G.elem_start, G.n_elems, dst); return;
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

template <class L>
void pack_groups(const Plan& plan, const L& ld, const RowScratch& s, uint8_t* out) {
  const int sub = plan.info.sub_block;
  for (int g = 0; g < plan.n_groups; ++g) {
    const Group& G = plan.groups[g];
    uint8_t* rec = out + G.w_offset;
    permute_any(ld, G, rec);
    const int64_t first_sub = G.elem_start / sub;
    _mm512_store_ps(rec + 64 * G.steps, gather_positions(G.pos_sub, s.dw + first_sub));
    if (plan.info.has_min)
      _mm512_store_ps(rec + 64 * G.steps + 64, gather_positions(G.pos_sub, s.mw + first_sub));
  }
}

void pack_weight_row(const Plan& plan, const void* row, const RowScratch& s, uint8_t* out) {
  const int64_t n_in = plan.n_in;
  switch (plan.type) {
    case TensorType::Q8_0: {
      const LoaderQ8_0 ld{static_cast<const BlockQ8_0*>(row)};
      block_halves(static_cast<const uint8_t*>(row), sizeof(BlockQ8_0), n_in / kQK, s.dw);
      return pack_groups(plan, ld, s, out);
    }
    case TensorType::Q5_0: {
      const LoaderQ5_0 ld{static_cast<const BlockQ5_0*>(row)};
      block_halves(static_cast<const uint8_t*>(row), sizeof(BlockQ5_0), n_in / kQK, s.dw);
      return pack_groups(plan, ld, s, out);
    }
    case TensorType::Q4_K: {
      const LoaderQ4_K ld{static_cast<const BlockQ4_K*>(row)};
      scales_q4_k(ld.b, n_in / kQK_K, s.dw, s.mw);
      return pack_groups(plan, ld, s, out);
    }
    case TensorType::Q6_K: {
      const LoaderQ6_K ld{static_cast<const BlockQ6_K*>(row)};
      scales_q6_k(ld.b, n_in / kQK_K, s.dw);
      return pack_groups(plan, ld, s, out);
    }
    default: {
      unpack_row(plan.type, row, n_in, true, s.u, s.dw, s.mw);
      return pack_groups(plan, NaturalLoader{s.u}, s, out);
    }
  }
}

void pack_acts(const Plan& plan, const float* x, int64_t t0, int64_t t1, uint8_t* x_packed,
               uint8_t* tmp) {
  const int64_t n_in = plan.n_in;
  int8_t* q = reinterpret_cast<int8_t*>(tmp);  // [n_in + 1024], zero past n_in
  float* d = reinterpret_cast<float*>(tmp + n_in + 1024);
  for (int64_t i = n_in; i < n_in + 1024; ++i) q[i] = 0;
  const int act = plan.info.act_block;
  for (int64_t i = n_in / act; i < n_in / act + 16; ++i) d[i] = 0.0f;
  const NaturalLoader ld{reinterpret_cast<const uint8_t*>(q)};
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t t = t0; t < t1; ++t) {
    quantize_act_row(x + t * n_in, n_in, act, q, d);
    uint8_t* out = x_packed + t * plan.x_row_bytes_packed;
    for (int g = 0; g < plan.n_groups; ++g) {
      const Group& G = plan.groups[g];
      uint8_t* rec = out + G.x_offset;
      permute_any(ld, G, rec);
      // Segment sums: one VNNI dot with ones per step (padding positions hold zeros).
      __m512i sum = _mm512_setzero_si512();
      for (int k = 0; k < G.steps; ++k) sum = _mm512_dpbusd_epi32(sum, ones, _mm512_load_si512(rec + 64 * k));
      _mm512_store_si512(rec + 64 * G.steps, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-plan.info.offset)));
      const int64_t first_act = G.elem_start / act;
      const __m512 dx = gather_positions(G.pos_act, d + first_act);
      _mm512_store_ps(rec + 64 * G.steps + 64, dx);
      if (plan.info.has_min)
        _mm512_store_ps(rec + 64 * G.steps + 128, _mm512_mul_ps(dx, _mm512_cvtepi32_ps(sum)));
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
constexpr int kPrefetchRows = 4;  // how far ahead (in rows) the weights are prefetched

// Weight rows packed at a time: one while all packed activations stay in L1 (each row's tiles
// then read them from there); else kRowBlock, and each tile of activations is read from L2
// once per block instead of once per row. Results do not depend on it.
int64_t row_block(const Plan& plan, int64_t n_tokens) {
  return n_tokens > kTile && n_tokens * plan.x_row_bytes_packed > 24 * 1024 ? kRowBlock : 1;
}

// ybuf[t][0 .. nb) (rows of kOutRows floats) -> y[t * n_out + 0 .. nb).
void store_rows(const float* ybuf, int64_t n_tokens, int64_t nb, float* y, int64_t n_out) {
  const __mmask16 m = static_cast<__mmask16>((1u << nb) - 1);
  for (int64_t t = 0; t < n_tokens; ++t)
    _mm512_mask_storeu_ps(y + t * n_out, m, _mm512_loadu_ps(ybuf + t * kOutRows));
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
          if (plan.info.has_min)
            row_tile_any<true>(tt, plan, s.packed + i * wpb, xp, xstride, yo, kOutRows);
          else
            row_tile_any<false>(tt, plan, s.packed + i * wpb, xp, xstride, yo, kOutRows);
        }
      }
    }
    store_rows(ybuf, n_tokens, ob_end - ob, y + ob, w.n_out);
  }
}

// Float weights: acc[t] (16 lanes) += w[i .. i+15] * x[t][i .. i+15], masked tail, then the
// fixed reduction.
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

const Backend kBackend = {&kLayout, true, &pack_acts, &rows_quant, &rows_float};

}  // namespace

const Backend& backend_avx512() { return kBackend; }

}  // namespace ubatch::kernels::detail
