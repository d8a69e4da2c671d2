// AVX-512 VNNI level of the packed GEMM (gemm_internal.h has the arithmetic, packed_weight.h
// the layout).
//
// Per panel pair (MR = 2 panels = 32 output rows): unpack both panels to step-interleaved
// bytes + f32 scales (L1/L2-resident scratch), then for each tile of NR tokens run the
// micro-kernel: per segment, MR × NR int32 accumulators (16 rows each) take S vpdpbusd with
// the 4 broadcast activation bytes of the step, then one cvt + mul + fma (+ fma for the min)
// per accumulator into MR × NR float accumulators that live for the whole row; for the
// K-quants one cvt + fma into a super-block accumulator, whose d and min terms join the row's
// accumulator (then in memory) once per super-block (tile_kq; the min by vpdpwssd).
// bench_matmul Q4_K 4096 4096 2 1 2 4 (L3-resident, best call) before the integer scales:
// 0.115 / 0.164 / 0.254 ms, a prototype of them 0.094 / 0.126 / 0.213 (docs/BENCHMARKS.md,
// "Integer K-quant scales"). Weights are
// read once per tile from the scratch (Q8_0: from its packed records, whose quants are already
// the unpacked layout), activations once per panel pair.
//
// Up to eight tokens (decode, small batches; up to 12 or 24 in passes, see kFusedPassTokens)
// skip the scratch: fused_tile unpacks the quants in registers straight from the packed stream,
// prefetched 32 KiB ahead into L2 (and not into L1: on the Zen 4 VM the L1 prefetches made one
// token 17% and four 19% slower, measured with bench_matmul Q4_K 32768 4096 2 1|4;
// docs/BENCHMARKS.md, "No L1 prefetch in the decode tile").
// A decode step is all fused_tile (91% of a LLaMA-2-7B Q4_K_M tg64 profile), and on
// Ice Lake its 512-bit operations issue on two ports only, so it counts operations: the format's
// record sizes and K-quant-ness are template constants (no branch, pointers in registers), B4's
// high nibbles are masked in place (16 × the value, one shift per segment instead of one per
// vector), B5/B6 merge their high bits with one ternary-logic operation, and one (token, panel)
// pair per panel (two panels × one token, and the passes over an odd last panel) runs two
// vpdpbusd chains per accumulator. `llvm-mca -mcpu=icelake-server` on the segment loop
// (two panels, one token): Q4_K 33.9 -> 28.6 cycles, Q6_K 25.1 -> 21.6, Q8_0 23.9 -> 18.1,
// Q4_0 27.7 -> 21.6, Q5_K 50.1 -> 39.2, MXFP4 35.2 -> 32.6.
// Activations are quantized here too (pack_acts_avx512), to the scalar pack_acts' bytes.
//
// Compiled with the AVX-512 flags; only reached when the CPU has AVX-512 F/BW/VL/DQ + VNNI.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "kernels/gemm_internal.h"

namespace ubatch::kernels::detail {

namespace {

// Tokens per tile: MR = 2 panels × 6 tokens keep 12 int32 and 12 float accumulators, the two
// weight vectors and a broadcast in registers (27 of 32; NR = 7 spills); each weight vector load then feeds six
// vpdpbusd. bench_matmul TYPE 512 4096 1 256 (L2-resident weights, one thread), best of five
// interleaved rounds: Q4_K 3.85 -> 3.58 ms, Q6_K 4.36 -> 4.04, Q8_0 3.84 -> 3.68 against 4 tokens
// (docs/BENCHMARKS.md, "Six tokens per prefill tile").
constexpr int kNR = 6;
constexpr int64_t kPrefetchBytes = 4096; // prefill: how far ahead unpacking prefetches into L1
constexpr int64_t kPrefetchL2Bytes = 32768; // decode: how far ahead fused_tile prefetches into L2 (more misses in flight per core)

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline void store512(void* p, __m512i v) { _mm512_storeu_si512(p, v); }

// vpternlog truth table of a | (b & c).
constexpr int kOrAnd = 0xF8;

// v with bit `from` of every byte at bit To (16-bit shifts; bits that cross a byte boundary are
// for the caller's mask to drop). `from` is a compile-time constant after unrolling.
template <int To>
inline __m512i shift_bits(__m512i v, int from) {
  if (from < To) return _mm512_slli_epi16(v, static_cast<unsigned>(To - from));
  if (from > To) return _mm512_srli_epi16(v, static_cast<unsigned>(from - To));
  return v;
}

// B4 as load_quants, but steps S/2.. hold 16 × the high nibble (the byte masked in place:
// one operation per vector less, none on the shift port).
template <int S>
inline void load_quants_b4_hi16(const uint8_t* q, __m512i* u) {
  const __m512i lo = _mm512_set1_epi8(0x0F), hi = _mm512_set1_epi8(static_cast<char>(0xF0));
  for (int j = 0; j < S / 2; ++j) {
    const __m512i v = load512(q + 64 * j);
    u[j] = _mm512_and_si512(v, lo);
    u[j + S / 2] = _mm512_and_si512(v, hi);
  }
}

// The high-bit vector of a B5/B6 segment record (after its S/2 low-nibble vectors); zero for the
// other formats, which have none.
template <PackedBits B, int S>
inline __m512i high_bits(const uint8_t* q) {
  if constexpr (B == PackedBits::B5 || B == PackedBits::B6) return load512(q + 64 * (S / 2));
  return _mm512_setzero_si512();
}

// Steps j and j + S/2 of a segment record's quants (step k = 4 bytes × 16 rows), the two that one
// loaded vector holds in the 4-bit formats. hb: the record's high-bit vector (high_bits; B5, B6
// only, unused otherwise), loaded once per segment by the caller.
template <PackedBits B, int S>
inline void quant_pair(const uint8_t* q, int j, __m512i hb, __m512i& lo, __m512i& hi) {
  constexpr int H = S / 2;
  if constexpr (B == PackedBits::B8) {
    lo = load512(q + 64 * j);
    hi = load512(q + 64 * (j + H));
  } else if constexpr (B == PackedBits::B2) {
    const __m512i v = load512(q);
    const __m512i m2 = _mm512_set1_epi8(3);
    lo = _mm512_and_si512(_mm512_srli_epi16(v, 2 * j), m2);
    hi = _mm512_and_si512(_mm512_srli_epi16(v, 2 * (j + H)), m2);
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v = load512(q + 64 * j);
    lo = _mm512_and_si512(v, m4);
    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if constexpr (B == PackedBits::B4T) {
      const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4U)));
      lo = _mm512_shuffle_epi8(lut, lo);
      hi = _mm512_shuffle_epi8(lut, hi);
    } else if constexpr (B == PackedBits::B5) {
      const __m512i m = _mm512_set1_epi8(0x10);
      lo = _mm512_ternarylogic_epi32(lo, shift_bits<4>(hb, j), m, kOrAnd);
      hi = _mm512_ternarylogic_epi32(hi, shift_bits<4>(hb, j + H), m, kOrAnd);
    } else if constexpr (B == PackedBits::B6) {
      const __m512i m = _mm512_set1_epi8(0x30);
      lo = _mm512_ternarylogic_epi32(lo, shift_bits<4>(hb, 2 * j), m, kOrAnd);
      hi = _mm512_ternarylogic_epi32(hi, shift_bits<4>(hb, 2 * (j + H)), m, kOrAnd);
    }
  }
}

// Step-interleaved bytes of one segment record's quants -> u[S], a step pair at a time.
template <PackedBits B, int S>
inline void load_quants(const uint8_t* q, __m512i* u) {
  const __m512i hb = high_bits<B, S>(q);
  for (int j = 0; j < S / 2; ++j) quant_pair<B, S>(q, j, hb, u[j], u[j + S / 2]);
}

template <PackedBits B, int S>
inline void unpack_quants(const uint8_t* q, uint8_t* out) {
  __m512i u[S];
  load_quants<B, S>(q, u);
  for (int k = 0; k < S; ++k) store512(out + 64 * k, u[k]);
}

// dw (and mw) of one segment record of a block record whose header gave d and m (f32; for the
// K-quants m = −dmin, header_m); sc: the record's sc[16] (then mn[16]), K-quants only.
template <bool KQ, bool MIN>
inline void seg_scales_t(const uint8_t* sc, __m512 d, __m512 m, __m512& dw, __m512& mw) {
  dw = d;
  mw = m;
  if constexpr (KQ) {
    dw = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)))));
    if constexpr (MIN) {  // (−dmin) · mn = −(dmin · mn): exact, the same bits (signed zeros too)
      const __m128i mn = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16));
      mw = _mm512_mul_ps(m, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)));
    }
  }
}
// The same with the format known at run time (q: the segment record).
inline void seg_scales(const PackedFormat& f, const uint8_t* q, __m512 d, __m512 m, __m512& dw,
                       __m512& mw) {
  const uint8_t* sc = q + f.seg_quant_bytes;
  if (!f.k_quant) seg_scales_t<false, false>(sc, d, m, dw, mw);
  else if (f.has_min) seg_scales_t<true, true>(sc, d, m, dw, mw);
  else seg_scales_t<true, false>(sc, d, m, dw, mw);
}

// float(sc) of a K-quant segment record's 16 rows (sc: its sc[16] i8).
inline __m512 seg_sc(const uint8_t* sc) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc))));
}
// The mn of two consecutive K-quant segment records (mn: the first's mn[16] u8; the second's is
// seg_bytes further) as 16 int16 pairs, one per row: the unpacked panel's mnp vector
// (packed_weight.h), a vpdpwssd operand against two segments' bsum words.
inline __m512i mn_pair(const uint8_t* mn, int64_t seg_bytes) {
  const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mn));
  const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mn + seg_bytes));
  return _mm512_cvtepu8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(a0, a1), _mm_unpacklo_epi8(a0, a1)));
}

inline __m512 header_d(const uint8_t* block) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block)));
}
// The header's m (Q4_1, Q5_1), or −dmin for the K-quants (negated once per block record rather
// than once per segment); 0 without a min.
inline __m512 header_m(const PackedFormat& f, const uint8_t* block) {
  if (!f.has_min) return _mm512_setzero_ps();
  const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 32)));
  return f.k_quant ? _mm512_xor_ps(m, _mm512_set1_ps(-0.0f)) : m;
}

template <PackedBits B, int S>
void unpack_panel_t(const PackedWeight& w, int64_t p, uint8_t* out) {
  const PackedFormat& f = w.fmt;
  const uint8_t* panel = w.panel(p);
  const int segs_per_block = f.block_elems / f.seg;
  const int64_t stride = unpacked_seg_stride(f);
  const int64_t n_blocks = w.n_in / f.block_elems;
  const char* pf_end = reinterpret_cast<const char*>(w.data + w.bytes());
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = panel + b * f.block_bytes;
    // Software prefetch of the bytes kPrefetchBytes ahead (the stream is sequential per
    // thread; more misses in flight than the hardware prefetcher alone keeps).
    for (int64_t off = 0; off < f.block_bytes; off += 64) {
      const char* pf = reinterpret_cast<const char*>(block) + kPrefetchBytes + off;
      if (pf < pf_end) _mm_prefetch(pf, _MM_HINT_T0);
    }
    const __m512 d = header_d(block), m = header_m(f, block);
    if (f.k_quant) {
      for (int s = 0; s < segs_per_block; ++s) {
        uint8_t* o = out + (b * segs_per_block + s) * stride;
        const uint8_t* q = block + f.header_bytes + s * f.seg_bytes;
        unpack_quants<B, S>(q, o);
        _mm512_storeu_ps(o + 64 * S, seg_sc(q + f.seg_quant_bytes));
      }
      uint8_t* ba = out + unpacked_block_off(f, w.n_in) + b * unpacked_block_area(f);
      _mm512_storeu_ps(ba, d);
      if (f.has_min) {
        _mm512_storeu_ps(ba + 64, m);
        for (int j = 0; j < segs_per_block / 2; ++j)
          store512(ba + 128 + 64 * j, mn_pair(block + f.header_bytes + 2 * j * f.seg_bytes + f.seg_quant_bytes + 16, f.seg_bytes));
      }
      continue;
    }
    for (int s = 0; s < segs_per_block; ++s) {
      uint8_t* o = out + (b * segs_per_block + s) * stride;
      const uint8_t* q = block + f.header_bytes + s * f.seg_bytes;
      unpack_quants<B, S>(q, o);
      __m512 dw, mw;
      seg_scales(f, q, d, m, dw, mw);
      _mm512_storeu_ps(o + 64 * S, dw);
      if (f.has_min) _mm512_storeu_ps(o + 64 * S + 64, mw);
    }
  }
}

using UnpackFn = void (*)(const PackedWeight&, int64_t, uint8_t*);

UnpackFn unpacker(const PackedFormat& f) {
  switch (f.bits) {
    case PackedBits::B8: return f.steps == 8 ? &unpack_panel_t<PackedBits::B8, 8> : &unpack_panel_t<PackedBits::B8, 4>;
    case PackedBits::B4: return f.steps == 8 ? &unpack_panel_t<PackedBits::B4, 8> : &unpack_panel_t<PackedBits::B4, 4>;
    case PackedBits::B5: return &unpack_panel_t<PackedBits::B5, 8>;
    case PackedBits::B4T: return &unpack_panel_t<PackedBits::B4T, 8>;
    case PackedBits::B6: return &unpack_panel_t<PackedBits::B6, 4>;
    case PackedBits::B2: return &unpack_panel_t<PackedBits::B2, 4>;
  }
  return nullptr;
}

inline __m512i bcast_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
inline __m512 bcast_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_ps(v);
}

// One segment's integer dots of the micro-kernels: ia[m][t] = init + Σ u · xq (exact) for MR
// panels' step-interleaved quants at w[m] (the unpacked scratch, or Q8_0's packed records, which
// need not be 64-byte aligned) and NR tokens whose int8 activations start at xq (init words at
// ip), rows xs bytes apart. A type with a min has offset 0, so its sums start from a zero idiom.
template <int MR, int NR, int S, bool MIN>
inline void segment_dots(const uint8_t* const* w, const uint8_t* xq, const uint8_t* ip, int64_t xs,
                         __m512i (&ia)[MR][NR]) {
  for (int t = 0; t < NR; ++t) {
    const __m512i init = MIN ? _mm512_setzero_si512() : bcast_i32(ip + t * xs);
    for (int m = 0; m < MR; ++m) ia[m][t] = init;
  }
  for (int k = 0; k < S; ++k) {
    __m512i wv[MR];
    for (int m = 0; m < MR; ++m) wv[m] = _mm512_loadu_si512(w[m] + 64 * k);
    for (int t = 0; t < NR; ++t) {
      const __m512i xb = bcast_i32(xq + t * xs + 4 * k);
      for (int m = 0; m < MR; ++m) ia[m][t] = _mm512_dpbusd_epi32(ia[m][t], wv[m], xb);
    }
  }
}

// The micro-kernel: MR panels × NR tokens, all segments. wp[m]: unpacked panel m;
// x: the first token's packed row; y: y[t * ldy + 16 m + r] for the tile's first row.
// The pointers advance by constants each segment (no address arithmetic from s), and a type
// with a min has offset 0, so its int32 sums start from zero (a zero idiom, no port) rather than
// a broadcast init: bench_matmul 4096 × 4096, 1 thread, Q4_K at 64 and 256 tokens 6–9% faster,
// the other types unchanged (docs/BENCHMARKS.md, "The prefill tile's segment loop").
// DIRECT (Q8_0 only): wp[m] points at the quants of a panel's first *packed* block record, whose
// step-interleaved bytes are already the unpacked layout; the segment's f16 scales d[16] are the
// 32 bytes before its quants (the record header), converted here exactly as the unpacker would,
// so the bits are the same with no unpack pass (docs/BENCHMARKS.md, "Q8_0 tiles straight from
// the packed weights"). Its prefetches go to L2: a panel pair of packed records outgrows L1.
template <int MR, int NR, int S, bool MIN, bool DIRECT = false>
void tile(const uint8_t* const* wp, int64_t n_seg, int64_t wstride, const ActLayout& a,
          const uint8_t* x, float* y, int64_t ldy, int rows_last, const char* pf, int64_t pf_bytes) {
  // [pf, pf + pf_bytes): prefetched a few lines per segment (tiles() says why).
  const char* const pf_end = pf + pf_bytes;
  const int64_t pf_per_seg = ((pf_bytes + 63) / 64 + n_seg - 1) / n_seg;
  __m512 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int t = 0; t < NR; ++t) acc[m][t] = _mm512_setzero_ps();
  const int64_t xs = a.stride;
  const uint8_t* w[MR];
  for (int m = 0; m < MR; ++m) w[m] = wp[m];
  const uint8_t* xq = x;               // the segment's int8 activations (token 0)
  const uint8_t* ip = x + a.init_off;  // its init, dx and xs words (token 0)
  const uint8_t* dp = x + a.dx_off;
  const uint8_t* sp = x + a.xs_off;
  static_assert(!DIRECT || (S == 8 && !MIN), "DIRECT reads Q8_0 block records");
  for (int64_t s = 0; s < n_seg; ++s) {
    for (int64_t i = 0; i < pf_per_seg && pf < pf_end; ++i, pf += 64) _mm_prefetch(pf, DIRECT ? _MM_HINT_T1 : _MM_HINT_T0);
    __m512i ia[MR][NR];
    segment_dots<MR, NR, S, MIN>(w, xq, ip, xs, ia);
    for (int m = 0; m < MR; ++m) {
      const __m512 dw = DIRECT ? header_d(w[m] - 32) : _mm512_load_ps(w[m] + 64 * S);
      const __m512 mw = MIN ? _mm512_load_ps(w[m] + 64 * S + 64) : dw;  // the mins (read with MIN only)
      for (int t = 0; t < NR; ++t) {
        const __m512 scale = _mm512_mul_ps(dw, bcast_f32(dp + t * xs));
        acc[m][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[m][t]), scale, acc[m][t]);
        if constexpr (MIN)
          acc[m][t] = _mm512_fmadd_ps(mw, bcast_f32(sp + t * xs), acc[m][t]);
      }
    }
    for (int m = 0; m < MR; ++m) w[m] += wstride;
    xq += a.seg;
    ip += 4;
    dp += 4;
    sp += 4;
  }
  for (int m = 0; m < MR; ++m) {
    const __mmask16 mask = m == MR - 1 ? static_cast<__mmask16>((1u << rows_last) - 1) : 0xFFFF;
    for (int t = 0; t < NR; ++t) _mm512_mask_storeu_ps(y + t * ldy + 16 * m, mask, acc[m][t]);
  }
}

// The K-quant micro-kernel (gemm_internal.h, K-quants): per segment bacc = fma(float(ia),
// float(sc), bacc), two float operations per (token, panel) instead of four; per super-block
// of kSegs segments the d term and the min term (msum by vpdpwssd of the mn pairs against the
// bsum words) go into acc, which lives in memory (one load and store per super-block): bacc and
// ia take the registers.
template <int MR, int NR, int S, bool MIN>
void tile_kq(const uint8_t* const* wp, int64_t n_seg, int64_t wstride, const ActLayout& a,
             const uint8_t* x, float* y, int64_t ldy, int rows_last, const char* pf, int64_t pf_bytes) {
  constexpr int kSegs = 64 / S;  // segments per 256-element super-block
  constexpr int64_t kArea = 64 + (MIN ? 64 + 32 * kSegs : 0);
  const char* const pf_end = pf + pf_bytes;
  const int64_t pf_per_seg = ((pf_bytes + 63) / 64 + n_seg - 1) / n_seg;
  alignas(64) float accm[MR][NR][16] = {};
  const int64_t xs = a.stride;
  const uint8_t* w[MR];
  const uint8_t* ba[MR];  // super-block areas
  for (int m = 0; m < MR; ++m) w[m] = wp[m], ba[m] = wp[m] + n_seg * wstride;
  const uint8_t* xq = x;
  const uint8_t* ip = x + a.init_off;
  for (int64_t b = 0; b < n_seg / kSegs; ++b) {
    __m512 bacc[MR][NR];
    for (int m = 0; m < MR; ++m)
      for (int t = 0; t < NR; ++t) bacc[m][t] = _mm512_setzero_ps();
    for (int si = 0; si < kSegs; ++si) {
      for (int64_t i = 0; i < pf_per_seg && pf < pf_end; ++i, pf += 64) _mm_prefetch(pf, _MM_HINT_T0);
      __m512i ia[MR][NR];
      segment_dots<MR, NR, S, MIN>(w, xq, ip, xs, ia);
      for (int m = 0; m < MR; ++m) {
        const __m512 scf = _mm512_load_ps(w[m] + 64 * S);
        for (int t = 0; t < NR; ++t) bacc[m][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[m][t]), scf, bacc[m][t]);
        w[m] += wstride;
      }
      xq += a.seg;
      ip += 4;
    }
    const uint8_t* dp = x + a.dx_off + 4 * b * kSegs;
    const uint8_t* bp = x + a.xs_off + 2 * b * kSegs;
    for (int m = 0; m < MR; ++m) {
      const __m512 d = _mm512_load_ps(ba[m] + b * kArea);
      for (int t = 0; t < NR; ++t) {
        const __m512 dx = bcast_f32(dp + t * xs);
        __m512 acc = _mm512_load_ps(accm[m][t]);
        acc = _mm512_fmadd_ps(bacc[m][t], _mm512_mul_ps(d, dx), acc);
        if constexpr (MIN) {
          const uint8_t* mp = ba[m] + b * kArea + 128;
          __m512i msum = _mm512_setzero_si512();
          for (int j = 0; j < kSegs / 2; ++j)
            msum = _mm512_dpwssd_epi32(msum, _mm512_load_si512(mp + 64 * j), bcast_i32(bp + t * xs + 4 * j));
          const __m512 nd = _mm512_load_ps(ba[m] + b * kArea + 64);
          acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(nd, dx), acc);
        }
        _mm512_store_ps(accm[m][t], acc);
      }
    }
  }
  for (int m = 0; m < MR; ++m) {
    const __mmask16 mask = m == MR - 1 ? static_cast<__mmask16>((1u << rows_last) - 1) : 0xFFFF;
    for (int t = 0; t < NR; ++t) _mm512_mask_storeu_ps(y + t * ldy + 16 * m, mask, _mm512_load_ps(accm[m][t]));
  }
}

// tile() or tile_kq(), as the format says.
template <int MR, int NR, int S, bool MIN, bool KQ, bool DIRECT>
inline void tile_of(const uint8_t* const* wp, int64_t n_seg, int64_t wstride, const ActLayout& a,
                    const uint8_t* x, float* y, int64_t ldy, int rows_last, const char* pf, int64_t pf_bytes) {
  if constexpr (KQ) tile_kq<MR, NR, S, MIN>(wp, n_seg, wstride, a, x, y, ldy, rows_last, pf, pf_bytes);
  else tile<MR, NR, S, MIN, DIRECT>(wp, n_seg, wstride, a, x, y, ldy, rows_last, pf, pf_bytes);
}

template <int MR, int S, bool MIN, bool KQ, bool DIRECT>
void tiles(const uint8_t* const* wp, int64_t n_seg, int64_t wstride, const ActLayout& a,
           const uint8_t* x, int64_t n_tokens, float* y, int64_t ldy, int rows_last,
           const char* pf, int64_t pf_bytes, int next_panels) {
  // The next panels' packed bytes [pf, pf + pf_bytes) (next_panels of them, 0 to 2) are
  // prefetched a slice per tile, so their unpacking (or Q8_0's direct tiles) finds them in cache
  // instead of waiting on memory. Each tile spreads its slice
  // over its segments (a line or a few per segment): issued as one burst before the tile, the
  // prefetches filled the core's line-fill buffers and the burst stalled until memory answered —
  // 10.9% of a Qwen3.5-0.8B B32 profile sat on it, against 0.3% spread (docs/BENCHMARKS.md,
  // "Prefetches spread over the prefill tile").
  // Before each whole tile, the lines of y that the next panel pair's tile of the same tokens
  // will write (one per panel and token) are fetched too: with many tokens y is large (the logits of 32
  // sequences over a 248,320-token vocabulary are 32 MiB) and a store that misses waits for its
  // line (bench_matmul Q8_0 248320 1024 2 32: 26.0-26.8 -> 24.3-25.0 ms). Only while the next
  // pair's bytes are still being prefetched: a variant that fetched y before every tile of the
  // pair, the remainder too, measured no gain (25.9-26.5 ms).
  const int64_t n_tiles = n_tokens / kNR;
  const int64_t pf_slice = n_tiles > 0 ? ((pf_bytes / n_tiles + 63) & ~int64_t(63)) : 0;
  int64_t t = 0;
  for (; t + kNR <= n_tokens; t += kNR) {
    const int64_t slice = std::min(pf_slice, pf_bytes);
    if (pf_bytes > 0)  // a next panel pair
      for (int64_t i = t; i < t + kNR; ++i)
        for (int m = 0; m < next_panels; ++m) _mm_prefetch(reinterpret_cast<const char*>(y + i * ldy + 16 * (MR + m)), _MM_HINT_T0);
    tile_of<MR, kNR, S, MIN, KQ, DIRECT>(wp, n_seg, wstride, a, x + t * a.stride, y + t * ldy, ldy, rows_last, pf, slice);
    pf += slice;
    pf_bytes -= slice;
  }
  // The remainder tile takes what is left of the range (nothing once a whole tile has run).
  static_assert(kNR <= 6, "the remainder switch below covers 1..5 tokens");
  switch (n_tokens - t) {
    case 5: tile_of<MR, 5, S, MIN, KQ, DIRECT>(wp, n_seg, wstride, a, x + t * a.stride, y + t * ldy, ldy, rows_last, pf, pf_bytes); break;
    case 4: tile_of<MR, 4, S, MIN, KQ, DIRECT>(wp, n_seg, wstride, a, x + t * a.stride, y + t * ldy, ldy, rows_last, pf, pf_bytes); break;
    case 3: tile_of<MR, 3, S, MIN, KQ, DIRECT>(wp, n_seg, wstride, a, x + t * a.stride, y + t * ldy, ldy, rows_last, pf, pf_bytes); break;
    case 2: tile_of<MR, 2, S, MIN, KQ, DIRECT>(wp, n_seg, wstride, a, x + t * a.stride, y + t * ldy, ldy, rows_last, pf, pf_bytes); break;
    case 1: tile_of<MR, 1, S, MIN, KQ, DIRECT>(wp, n_seg, wstride, a, x + t * a.stride, y + t * ldy, ldy, rows_last, pf, pf_bytes); break;
    default: break;
  }
}

// Few tokens (decode): MR panels × NR tokens straight from the packed bytes — the quants are
// unpacked in registers, nothing goes through the scratch. The per-(token, row) operations are
// those of tile(), so the results are the same bits.
template <PackedBits B, int MR, int NR, int S, bool MIN, bool KQ>
void fused_tile(const PackedWeight& w, int64_t p, const ActLayout& a, const uint8_t* x, float* y,
                int64_t ldy, int rows_last) {
  const PackedFormat& f = w.fmt;
  // The record sizes as constants (packed_weight.cpp packed_format), so the segment loop keeps
  // its pointers in registers and has no branch on the format.
  constexpr int64_t kQuantBytes = seg_quant_bytes_of(B, S);
  constexpr int64_t kSegBytes = kQuantBytes + (KQ ? (MIN ? 32 : 16) : 0);
  constexpr int64_t kHeaderBytes = MIN ? 64 : 32;
  assert(f.seg_quant_bytes == kQuantBytes && f.seg_bytes == kSegBytes && f.header_bytes == kHeaderBytes);
  constexpr int kSegsPerBlock = KQ ? 64 / S : 1;  // segments per block record
  const int segs_per_block = kSegsPerBlock;
  assert(segs_per_block == f.block_elems / f.seg);
  const int64_t n_blocks = w.n_in / f.block_elems;
  const int64_t xs = a.stride;
  constexpr bool kSplit = MR * NR <= 2;  // two vpdpbusd chains per (token, panel) pair
  // Block types: acc in registers. K-quants: bacc per super-block in registers, acc in
  // memory (accm; one load and store per super-block), as in tile_kq.
  __m512 acc[MR][NR];
  alignas(64) float accm[KQ ? MR : 1][KQ ? NR : 1][16];
  for (int m = 0; m < MR; ++m)
    for (int t = 0; t < NR; ++t) {
      if constexpr (KQ) _mm512_store_ps(accm[m][t], _mm512_setzero_ps());
      else acc[m][t] = _mm512_setzero_ps();
    }
  // Each of the MR panels is its own sequential stream; after panel p + m this thread reads
  // panel p + m + MR (gemm_t walks its panels MR at a time; MR = 1 is only an odd last panel,
  // read again for each pair of tokens, where the cursors' prefetches are merely wasted). A prefetch that runs past the end of
  // panel p + m continues into panel p + m + MR, not into p + m + 1 (which the next stream is
  // reading now): with panels longer than the prefetch distance (K = 4,096 Q4_K: 36 KiB) the
  // second stream would otherwise start every panel without anything prefetched. The distance is
  // whole block records (the same count of bytes, rounded up). Into L2 only: L1 prefetches a
  // few KiB ahead as well took the core's miss slots from the demand loads (Zen 4: one token
  // 17% slower, the file header says where measured).
  const int64_t ahead_l2 = (kPrefetchL2Bytes / MR + f.block_bytes - 1) / f.block_bytes;
  struct Cursor {  // the block record ahead_l2 records further along stream m
    int64_t panel, blk;
  };
  Cursor cursor[MR];
  for (int m = 0; m < MR; ++m) cursor[m] = {p + m + ahead_l2 / n_blocks * MR, ahead_l2 % n_blocks};
  auto prefetch_next = [&](Cursor& c) {
    if (c.panel < w.n_panels) {
      const char* base = reinterpret_cast<const char*>(w.panel(c.panel)) + c.blk * f.block_bytes;
      for (int64_t off = 0; off < f.block_bytes; off += 64) _mm_prefetch(base + off, _MM_HINT_T1);
    }
    if (++c.blk == n_blocks) c.blk = 0, c.panel += MR;
  };
  // This segment's init, dx, xs and quantized activations of the first token.
  const uint8_t *xi = x + a.init_off, *xd = x + a.dx_off, *xm = x + a.xs_off, *xq = x;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block[MR];
    __m512 d[MR], mn[MR];
    for (int m = 0; m < MR; ++m) {
      block[m] = w.panel(p + m) + b * f.block_bytes;
      prefetch_next(cursor[m]);
      d[m] = header_d(block[m]);
      mn[m] = header_m(f, block[m]);
    }
    const uint8_t* q[MR];
    for (int m = 0; m < MR; ++m) q[m] = block[m] + kHeaderBytes;
    __m512 bacc[KQ ? MR : 1][KQ ? NR : 1];
    if constexpr (KQ)
      for (int m = 0; m < MR; ++m)
        for (int t = 0; t < NR; ++t) bacc[m][t] = _mm512_setzero_ps();
    const uint8_t* const xd_block = xd;                             // the super-block's dx
    const uint8_t* const xb_block = x + a.xs_off + 2 * b * segs_per_block;  // its bsum words
    for (int si = 0; si < segs_per_block; ++si, xi += 4, xd += 4, xm += 4, xq += 4 * S) {
      __m512i ia[MR][NR];
      for (int t = 0; t < NR; ++t) {
        // A type with a min has offset 0 (gemm_t asserts it): its sums start from zero.
        const __m512i init = MIN ? _mm512_setzero_si512() : bcast_i32(xi + t * xs);
        for (int m = 0; m < MR; ++m) ia[m][t] = init;
      }
      if constexpr (kSplit) {
        __m512i u[MR][S];
        for (int m = 0; m < MR; ++m) {
          if constexpr (B == PackedBits::B4) load_quants_b4_hi16<S>(q[m], u[m]);
          else load_quants<B, S>(q[m], u[m]);
        }
        // Steps S/2.. on a second chain: with one or two (token, panel) pairs, a single
        // vpdpbusd chain per pair would leave its latency exposed. B4's second half holds
        // 16 × the high nibbles (no shift), so that chain sums 16 × the dot: shifted back,
        // exactly. Integer sums are exact, so ia is the same.
        __m512i ih[MR][NR];
        for (int m = 0; m < MR; ++m)
          for (int t = 0; t < NR; ++t) ih[m][t] = _mm512_setzero_si512();
        for (int k = 0; k < S / 2; ++k)
          for (int t = 0; t < NR; ++t) {
            const __m512i xl = bcast_i32(xq + t * xs + 4 * k);
            const __m512i xh = bcast_i32(xq + t * xs + 4 * (k + S / 2));
            for (int m = 0; m < MR; ++m) {
              ia[m][t] = _mm512_dpbusd_epi32(ia[m][t], u[m][k], xl);
              ih[m][t] = _mm512_dpbusd_epi32(ih[m][t], u[m][k + S / 2], xh);
            }
          }
        for (int m = 0; m < MR; ++m)
          for (int t = 0; t < NR; ++t)
            ia[m][t] = _mm512_add_epi32(ia[m][t], B == PackedBits::B4 ? _mm512_srai_epi32(ih[m][t], 4) : ih[m][t]);
      } else {
        // Step pairs (j, j + S/2), each quant vector loaded once: beside the MR × NR int32 and
        // float accumulators only the pair's 2 × MR step vectors (and B5/B6's high-bit vectors)
        // are live; MR = 2 panels share each activation broadcast. (From seven tokens on, the
        // accumulators alone outnumber the 32 registers and some spill; two panels still
        // measured faster there.) Integer sums are exact, so ia is the same in any step order.
        __m512i hb[MR];
        for (int m = 0; m < MR; ++m) hb[m] = high_bits<B, S>(q[m]);
        for (int j = 0; j < S / 2; ++j) {
          __m512i lo[MR], hi[MR];
          for (int m = 0; m < MR; ++m) quant_pair<B, S>(q[m], j, hb[m], lo[m], hi[m]);
          for (int t = 0; t < NR; ++t) {
            const __m512i xl = bcast_i32(xq + t * xs + 4 * j);
            for (int m = 0; m < MR; ++m) ia[m][t] = _mm512_dpbusd_epi32(ia[m][t], lo[m], xl);
          }
          for (int t = 0; t < NR; ++t) {
            const __m512i xh = bcast_i32(xq + t * xs + 4 * (j + S / 2));
            for (int m = 0; m < MR; ++m) ia[m][t] = _mm512_dpbusd_epi32(ia[m][t], hi[m], xh);
          }
        }
      }
      if constexpr (KQ) {
        for (int m = 0; m < MR; ++m) {
          const __m512 scf = seg_sc(q[m] + kQuantBytes);
          for (int t = 0; t < NR; ++t) bacc[m][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[m][t]), scf, bacc[m][t]);
          q[m] += kSegBytes;
        }
        continue;
      }
      for (int m = 0; m < MR; ++m) {
        __m512 dw, mw;
        seg_scales_t<KQ, MIN>(q[m] + kQuantBytes, d[m], mn[m], dw, mw);
        for (int t = 0; t < NR; ++t) {
          const __m512 scale = _mm512_mul_ps(dw, bcast_f32(xd + t * xs));
          acc[m][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[m][t]), scale, acc[m][t]);
        }
        if constexpr (MIN)
          for (int t = 0; t < NR; ++t) acc[m][t] = _mm512_fmadd_ps(mw, bcast_f32(xm + t * xs), acc[m][t]);
        q[m] += kSegBytes;
      }
    }
    if constexpr (KQ) {
      // The super-block's d term, and with a min its msum term (mn pairs of the segment records
      // against the bsum words, vpdpwssd: exact).
      for (int m = 0; m < MR; ++m) {
        __m512i mp[MIN ? kSegsPerBlock / 2 : 1];
        if constexpr (MIN)
          for (int j = 0; j < kSegsPerBlock / 2; ++j)
            mp[j] = mn_pair(block[m] + kHeaderBytes + 2 * j * kSegBytes + kQuantBytes + 16, kSegBytes);
        for (int t = 0; t < NR; ++t) {
          const __m512 dx = bcast_f32(xd_block + t * xs);
          __m512 v = _mm512_load_ps(accm[m][t]);
          v = _mm512_fmadd_ps(bacc[m][t], _mm512_mul_ps(d[m], dx), v);
          if constexpr (MIN) {
            __m512i msum = _mm512_setzero_si512();
            for (int j = 0; j < kSegsPerBlock / 2; ++j)
              msum = _mm512_dpwssd_epi32(msum, mp[j], bcast_i32(xb_block + t * xs + 4 * j));
            v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(mn[m], dx), v);
          }
          _mm512_store_ps(accm[m][t], v);
        }
      }
    }
  }
  for (int m = 0; m < MR; ++m) {
    const __mmask16 mask = m == MR - 1 ? static_cast<__mmask16>((1u << rows_last) - 1) : 0xFFFF;
    for (int t = 0; t < NR; ++t) {
      if constexpr (KQ) _mm512_mask_storeu_ps(y + t * ldy + 16 * m, mask, _mm512_load_ps(accm[m][t]));
      else _mm512_mask_storeu_ps(y + t * ldy + 16 * m, mask, acc[m][t]);
    }
  }
}

// Up to this many tokens take fused_tile, two panels at a time (MR = 2; an odd last panel one
// at a time, two tokens per pass): each activation broadcast feeds two vpdpbusd, and the
// step-pair loop keeps only 2 × MR quant vectors live beside the accumulators. A small batch of decodes then reads each
// weight byte once from memory, unpacked in registers, instead of once into the scratch and once
// from it. On the LLaMA-2-7B shape (Q4_K_M, 2 threads) four sequences went from 1.86x to 3.55x one
// sequence's tokens/s (docs/BENCHMARKS.md, "Small batches through the decode kernel"). On this
// Ice Lake host a 512-bit load (a broadcast too) issues once per cycle, measured: three to eight
// tokens one panel at a time spent more cycles on broadcasts than on vpdpbusd, and two panels at a
// time made them 10-25% faster (bench_matmul Q4_K 256 x 4096, 1 thread; docs/BENCHMARKS.md, "Two
// panels per activation broadcast").
constexpr int kFusedMaxTokens = 8;

// Past eight tokens, fused_tile still beats unpacking into the scratch for a while: the panel
// pair is run in passes of up to six tokens (seven and eight spill accumulators), the first pass
// streaming it from memory and the others finding it in L2, where the scratch path pays an
// unpack pass that a few tiles do not amortize. bench_matmul TYPE N_OUT N_IN 2 9 12 16 24 32
// (Zen 4, 2 threads, best of five, two interleaved rounds), scratch path -> passes, ms:
//   Q8_0 201088 x 2880 (gpt-oss's output matrix)  16 tokens 41.2 -> 29.6-30.1, 24: 47.6 -> 43.4, 32: 61.0 -> 60.3
//   Q8_0 65536 x 1024   9: 3.6-4.1 -> 2.5-2.7, 24: 6.2-6.4 -> 5.8, 32: 7.9 -> 8.1
//   Q4_0 32768 x 4096   9: 5.6-6.3 -> 4.2-4.5, 24: 10.4-10.7 -> 9.8-10.1
//   MXFP4 32768 x 2880  9: 3.9-4.2 -> 2.9, 24: 7.4-7.5 -> 7.3-7.4, 32: 9.7 -> 10.0
//   Q4_K 32768 x 4096   9: 5.7-6.4 -> 4.8-5.5, 12: 6.3-7.6 -> 6.2-6.7, 16: 8.0-8.3 -> 8.4-8.8
//   Q6_K 32768 x 4096   9: 7.7-8.6 -> 6.1-7.1, 12: 8.2-9.1 -> 7.5-9.5, 16: 10.0-10.9 -> 10.1-12.4
// The K-quants, whose passes each redo the scale conversion, stopped gaining sooner (at 12 with
// the float scales of before; now 16, kFusedKqMax). Either path
// gives the same bits per row (fused_tile's operations are tile()'s), so the choice is free.
// Only while a panel pair fits well inside L2 (1 MiB per core on Zen 4, 1.25 MiB on Ice Lake
// server); longer rows keep the scratch path past eight tokens. Q8_0 has since left both: past
// eight tokens its tiles read the packed records directly (gemm_t, kDirect).
constexpr int kFusedPassTokens = 6;
constexpr int64_t kFusedPassMaxPairBytes = 512 * 1024;
// The K-quants up to 16 tokens: with the integer scales (two float operations per segment, token
// and row) their passes gain like the others' up to 16; past it Q6_K's do not (bench_matmul
// TYPE 4096 4096 1 N, best call, limit 12 -> 24: Q4_K 13 tokens 1.608 -> 1.369 ms, 16: 1.798 ->
// 1.684, 20: 2.228 -> 2.042; Q6_K 13: 1.739 -> 1.615, 16: 1.936 -> 1.860, 20: 2.323 -> 2.376,
// 24: 2.706 -> 2.751).
constexpr int64_t kFusedKqMax = 16;
inline int64_t fused_max_tokens(const PackedWeight& w, bool k_quant) {
  if (2 * w.panel_bytes > kFusedPassMaxPairBytes) return kFusedMaxTokens;
  return k_quant ? kFusedKqMax : 24;
}

// fused_tile for two panels and 1..8 tokens (the count chosen at run time).
template <PackedBits B, int S, bool MIN, bool KQ>
void fused_panels(const PackedWeight& w, int64_t p, const ActLayout& a, const uint8_t* x, int64_t n_tokens,
                  float* y, int64_t ldy, int rows_last) {
  switch (n_tokens) {
    case 1: return fused_tile<B, 2, 1, S, MIN, KQ>(w, p, a, x, y, ldy, rows_last);
    case 2: return fused_tile<B, 2, 2, S, MIN, KQ>(w, p, a, x, y, ldy, rows_last);
    case 3: return fused_tile<B, 2, 3, S, MIN, KQ>(w, p, a, x, y, ldy, rows_last);
    case 4: return fused_tile<B, 2, 4, S, MIN, KQ>(w, p, a, x, y, ldy, rows_last);
    case 5: return fused_tile<B, 2, 5, S, MIN, KQ>(w, p, a, x, y, ldy, rows_last);
    case 6: return fused_tile<B, 2, 6, S, MIN, KQ>(w, p, a, x, y, ldy, rows_last);
    case 7: return fused_tile<B, 2, 7, S, MIN, KQ>(w, p, a, x, y, ldy, rows_last);
    default: return fused_tile<B, 2, 8, S, MIN, KQ>(w, p, a, x, y, ldy, rows_last);
  }
}

template <PackedBits B, int S, bool MIN, bool KQ>
void gemm_t(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed, int64_t n_tokens,
            float* y, int64_t ldy, int64_t p0, int64_t p1, uint8_t* scratch) {
  assert(!MIN || w.fmt.offset == 0);  // tile(), fused_tile(): a type with a min starts its sums at 0
  const int64_t wstride = unpacked_seg_stride(w.fmt);
  const int64_t pbytes = unpacked_panel_bytes(w.fmt, w.n_in);
  uint8_t* const buf[2] = {scratch, scratch + pbytes};
  // Tokens per fused pass over a panel pair: all of them up to kFusedMaxTokens, else
  // ceil(n / kFusedPassTokens) passes of as equal a size as they go, each after the first
  // reading the pair from L2.
  // The K-quants' one-pass limit is six: at seven and eight tokens their super-block and
  // segment accumulators (2 × 2 × NR vectors) spill, and two passes over the L2-resident pair
  // are faster (bench_matmul Q4_K 4096 4096 1 8, best call: 0.925 ms in one pass, 2 × 0.419 in
  // two of four).
  const int64_t one_pass = KQ ? kFusedPassTokens : kFusedMaxTokens;
  // Q8_0 past eight tokens: the tiles read the packed records directly (tile(), DIRECT), which
  // beat both the passes and the scratch (bench_matmul Q8_0 N_OUT N_IN 2 N, ms, passes or scratch
  // -> direct: 248320 x 1024 at 16 tokens 13.0-13.5 -> 12.6-12.9, at 32 28.8-29.4 -> 26.4-27.0;
  // 201088 x 2880 at 16 30.7-31.3 -> 27.3-27.4, at 32 61.1-61.6 -> 54.9-55.0; 3584 x 1024 at 32
  // 0.393 -> 0.352; nine tokens within 2% either way).
  constexpr bool kDirect = B == PackedBits::B8 && !KQ && !MIN;
  const bool fused = kDirect ? n_tokens <= kFusedMaxTokens : n_tokens <= fused_max_tokens(w, KQ);
  const int64_t n_pass = n_tokens <= one_pass ? 1 : (n_tokens + kFusedPassTokens - 1) / kFusedPassTokens;
  const int64_t per_pass = (n_tokens + n_pass - 1) / n_pass;
  for (int64_t p = p0; p < p1; p += 2) {
    const int mr = p + 1 < p1 ? 2 : 1;
    const int64_t last = p + mr - 1;
    const int rows_last = static_cast<int>(std::min<int64_t>(kPanelRows, w.n_out - last * kPanelRows));
    float* yp = y + p * kPanelRows;
    if (fused) {
      if (mr == 2) {
        for (int64_t t = 0; t < n_tokens; t += per_pass)
          fused_panels<B, S, MIN, KQ>(w, p, a, x_packed + t * a.stride, std::min(per_pass, n_tokens - t),
                                      yp + t * ldy, ldy, rows_last);
        continue;
      }
      // An odd last panel: its tokens two at a time (the panel stays in L2 after the first
      // pass; one instantiation per token count fewer to compile).
      for (int64_t t = 0; t < n_tokens; t += 2) {
        const uint8_t* xt = x_packed + t * a.stride;
        if (t + 1 < n_tokens) fused_tile<B, 1, 2, S, MIN, KQ>(w, p, a, xt, yp + t * ldy, ldy, rows_last);
        else fused_tile<B, 1, 1, S, MIN, KQ>(w, p, a, xt, yp + t * ldy, ldy, rows_last);
      }
      continue;
    }
    // Prefetch what the next iteration reads (this thread's next two panels).
    const int64_t next = std::min<int64_t>(2, p1 - (p + mr));
    const char* pf = reinterpret_cast<const char*>(w.panel(std::min(p + mr, p1 - 1)));
    const int64_t pf_bytes = next * w.panel_bytes;
    if constexpr (kDirect) {
      assert(w.fmt.header_bytes == 32);  // tile() reads the scales 32 bytes before the quants
      const uint8_t* wq[2] = {w.panel(p) + w.fmt.header_bytes, w.panel(p + mr - 1) + w.fmt.header_bytes};
      if (mr == 2)
        tiles<2, S, MIN, KQ, true>(wq, a.n_seg, w.fmt.block_bytes, a, x_packed, n_tokens, yp, ldy, rows_last, pf, pf_bytes, static_cast<int>(next));
      else
        tiles<1, S, MIN, KQ, true>(wq, a.n_seg, w.fmt.block_bytes, a, x_packed, n_tokens, yp, ldy, rows_last, pf, pf_bytes, static_cast<int>(next));
      continue;
    }
    for (int m = 0; m < mr; ++m) unpack_panel_t<B, S>(w, p + m, buf[m]);
    const uint8_t* wp[2] = {buf[0], buf[1]};
    if (mr == 2)
      tiles<2, S, MIN, KQ, false>(wp, a.n_seg, wstride, a, x_packed, n_tokens, yp, ldy, rows_last, pf, pf_bytes, static_cast<int>(next));
    else
      tiles<1, S, MIN, KQ, false>(wp, a.n_seg, wstride, a, x_packed, n_tokens, yp, ldy, rows_last, pf, pf_bytes, static_cast<int>(next));
  }
}

}  // namespace

void pack_acts_avx512(const PackedFormat& f, const ActLayout& a, const float* x, int64_t t0,
                      int64_t t1, uint8_t* x_packed) {
  const int64_t n_in = a.n_in;
  const int blk = a.act_block;  // 32 or 256: whole vectors of 16
  for (int64_t t = t0; t < t1; ++t) {
    const float* xr = x + t * n_in;
    uint8_t* row = x_packed + t * a.stride;
    auto* init = reinterpret_cast<int32_t*>(row + a.init_off);
    auto* dx = reinterpret_cast<float*>(row + a.dx_off);
    auto* xsv = reinterpret_cast<float*>(row + a.xs_off);
    for (int64_t b0 = 0; b0 < n_in; b0 += blk) {
      // The scalar quantize_act_row, lane by lane: amax (exact in any order; a NaN never
      // replaces the running max, as there), d = amax / 127, q = rint(x · 127 / amax).
      __m512 mx = _mm512_setzero_ps();
      for (int i = 0; i < blk; i += 16)
        mx = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xr + b0 + i)), mx);
      const float amax = _mm512_reduce_max_ps(mx);
      const float d = amax / 127.0f;
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
      const __m512 vid = _mm512_set1_ps(id);
      if (blk == 32) {
        // Q8_0's 32-element blocks: the segment sums (below) from the registers. Read back from
        // the row, the 32-byte load spanned two 16-byte stores, which the core cannot forward:
        // 83% of this function's samples in a Qwen3.5-0.8B B32 profile sat on that load, and
        // 32 x 1,024 activations took 14.6 us against 9.8 us now (one thread). The 256-element
        // blocks keep the read-back (once per 64 bytes; their sums in registers, or this loop
        // shared with them through a helper, measured 8.3-8.9 against 7.9 us). The segment-word
        // loop below is written twice on purpose: one loop for both block sizes, with the chunk
        // a run-time value, took this block size from 9.8 to 11.4 us.
        __m128i q[2];
        for (int h = 0; h < 2; ++h) {
          __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(xr + b0 + 16 * h), vid),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
          q[h] = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v));
        }
        const __m256i q32 = _mm256_set_m128i(q[1], q[0]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + b0), q32);
        alignas(32) uint64_t sad[4];
        _mm256_store_si256(reinterpret_cast<__m256i*>(sad),
                           _mm256_sad_epu8(_mm256_xor_si256(q32, _mm256_set1_epi8(static_cast<char>(0x80))), _mm256_setzero_si256()));
        const int per_seg = a.seg / 8;
        for (int j = 0; j < 4; j += per_seg) {
          int64_t u = 0;
          for (int k = 0; k < per_seg; ++k) u += static_cast<int64_t>(sad[j + k]);
          const int32_t total = static_cast<int32_t>(u - 128 * a.seg);
          const int64_t s = (b0 + 8 * j) / a.seg;
          init[s] = -f.offset * total;
          dx[s] = d;
          if (f.has_min && f.k_quant) reinterpret_cast<int16_t*>(xsv)[s] = static_cast<int16_t>(total);
          else if (f.has_min) xsv[s] = d * static_cast<float>(total);
        }
        continue;
      }
      for (int i = 0; i < blk; i += 16) {
        __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(xr + b0 + i), vid),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(row + b0 + i), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v)));
      }
      // Segment sums, exact: vpsadbw of (q + 128) against 0 sums each 8 bytes; a segment is
      // 2 (seg 16) or 4 (seg 32) of those sums, less 128 per byte.
      alignas(64) uint64_t sad[8];
      const int per_seg = a.seg / 8;
      constexpr int chunk = 64;  // the 256-element blocks (the 32-element ones took the branch above)
      assert(blk % chunk == 0);
      for (int64_t c = b0; c < b0 + blk; c += chunk) {
        const __m512i q = _mm512_xor_si512(_mm512_loadu_si512(row + c), _mm512_set1_epi8(static_cast<char>(0x80)));
        _mm512_store_si512(sad, _mm512_sad_epu8(q, _mm512_setzero_si512()));
        for (int j = 0; j < chunk / 8; j += per_seg) {
          int64_t u = 0;
          for (int k = 0; k < per_seg; ++k) u += static_cast<int64_t>(sad[j + k]);
          const int32_t total = static_cast<int32_t>(u - 128 * a.seg);
          const int64_t s = (c + 8 * j) / a.seg;
          init[s] = -f.offset * total;
          dx[s] = d;
          if (f.has_min && f.k_quant) reinterpret_cast<int16_t*>(xsv)[s] = static_cast<int16_t>(total);
          else if (f.has_min) xsv[s] = d * static_cast<float>(total);
        }
      }
    }
    std::memset(row + n_in, 0, static_cast<size_t>(a.init_off - n_in));
  }
}

void unpack_panel_avx512(const PackedWeight& w, int64_t p, uint8_t* out) { unpacker(w.fmt)(w, p, out); }

void gemm_panels_avx512(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                        int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                        uint8_t* scratch) {
  const PackedFormat& f = w.fmt;
  auto run = [&](auto fn) { fn(w, a, x_packed, n_tokens, y, ldy, p0, p1, scratch); };
  switch (f.bits) {
    case PackedBits::B8: return run(gemm_t<PackedBits::B8, 8, false, false>);  // Q8_0
    case PackedBits::B5:  // Q5_0, Q5_1, Q5_K
      if (f.k_quant) return run(gemm_t<PackedBits::B5, 8, true, true>);
      return f.has_min ? run(gemm_t<PackedBits::B5, 8, true, false>) : run(gemm_t<PackedBits::B5, 8, false, false>);
    case PackedBits::B6: return run(gemm_t<PackedBits::B6, 4, false, true>);  // Q6_K
    case PackedBits::B4T: return run(gemm_t<PackedBits::B4T, 8, false, false>);  // MXFP4
    case PackedBits::B2: return run(gemm_t<PackedBits::B2, 4, true, true>);   // Q2_K
    case PackedBits::B4:  // Q4_0, Q4_1, Q4_K (S = 8); Q3_K (S = 4)
      if (f.steps == 4) return run(gemm_t<PackedBits::B4, 4, false, true>);
      if (f.k_quant) return run(gemm_t<PackedBits::B4, 8, true, true>);
      return f.has_min ? run(gemm_t<PackedBits::B4, 8, true, false>) : run(gemm_t<PackedBits::B4, 8, false, false>);
  }
}

}  // namespace ubatch::kernels::detail
