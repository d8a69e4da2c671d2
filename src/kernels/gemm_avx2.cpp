// AVX2 level of the packed GEMM: the structure of gemm_avx512.cpp on 256-bit vectors (a panel
// of 16 rows is two halves of 8 rows). Integer dots: vpmaddubsw (u8 × s8 pairs -> s16) then
// vpmaddwd with ones (-> s32). Pair sums stay below 2^15 for every format whose bytes are
// < 64; Q8_0 (bytes q + 128) is multiplied as |q| × sign(x, q) instead, which forms
// Σ q·x = init + Σ u·x directly — the same integer, so the same result (gemm_internal.h).
// Formats with fewer bits add several steps' vpmaddubsw results in int16 before widening
// (tile(), G), which leaves the multiply ports to vpmaddubsw: 4-bit weights need one
// vpmaddwd per 8 steps instead of 8. With several tiles of tokens per panel (small batches,
// prefill) the next panel's packed bytes and the lines of y its tiles will write are
// prefetched while the current panel's tiles run (gemm_t).
//
// Compiled with the AVX2 flags; only reached when the CPU has AVX2 + FMA + F16C.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <type_traits>

#include "kernels/gemm_internal.h"

namespace ubatch::kernels::detail {

namespace {

constexpr int kNR = 2;  // tokens per tile
// The unpacker prefetches the packed bytes this far ahead, into L2 (prefetcht1): into L1
// (prefetcht0) one token was 30% slower on the Zen 4 VM (UBATCH_SIMD=avx2 bench_matmul Q4_K
// 32768 4096 2 1, five interleaved rounds, best call 5.2-6.5 ms into L1, 3.5-3.9 ms into L2;
// four tokens 6.4-7.3 and 5.9-7.6 ms: docs/BENCHMARKS.md, "No L1 prefetch in the decode tile").
constexpr int64_t kPrefetchBytes = 4096;

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void store256(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

// One 32-byte half (h = 0: rows 0-7, 1: rows 8-15) of a segment record's quants -> out[S][64].
template <PackedBits B, int S>
inline void unpack_quants_half(const uint8_t* q, uint8_t* out, int h) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const int o = 32 * h;
  if constexpr (B == PackedBits::B8) {
    for (int k = 0; k < S; ++k) store256(out + 64 * k + o, load256(q + 64 * k + o));
  } else if constexpr (B == PackedBits::B2) {
    const __m256i v = load256(q + o);
    for (int k = 0; k < S; ++k)
      store256(out + 64 * k + o, _mm256_and_si256(_mm256_srli_epi16(v, 2 * k), _mm256_set1_epi8(3)));
  } else {
    constexpr int H = S / 2;
    __m256i u[S];
    for (int j = 0; j < H; ++j) {
      const __m256i v = load256(q + 64 * j + o);
      u[j] = _mm256_and_si256(v, m4);
      u[j + H] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    if constexpr (B == PackedBits::B4T) {
      const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4U)));
      for (int k = 0; k < S; ++k) u[k] = _mm256_shuffle_epi8(lut, u[k]);
    }
    if constexpr (B == PackedBits::B5 || B == PackedBits::B6) {
      const __m256i hi = load256(q + 64 * H + o);
      constexpr int width = B == PackedBits::B5 ? 1 : 2;
      const __m256i mask = _mm256_set1_epi8(B == PackedBits::B5 ? 1 : 3);
      for (int k = 0; k < S; ++k) {
        const __m256i bits = _mm256_and_si256(_mm256_srli_epi16(hi, width * k), mask);
        u[k] = _mm256_or_si256(u[k], _mm256_slli_epi16(bits, 4));
      }
    }
    for (int k = 0; k < S; ++k) store256(out + 64 * k + o, u[k]);
  }
}

// Block records [b0, b1) of panel p, unpacked to out (segment s of block b0 first).
template <PackedBits B, int S>
void unpack_blocks_t(const PackedWeight& w, int64_t p, int64_t b0, int64_t b1, uint8_t* out) {
  const PackedFormat& f = w.fmt;
  const uint8_t* panel = w.panel(p);
  const int segs_per_block = f.block_elems / f.seg;
  const int64_t stride = unpacked_seg_stride(f);
  const char* pf_end = reinterpret_cast<const char*>(w.data + w.bytes());
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* block = panel + b * f.block_bytes;
    for (int64_t off = 0; off < f.block_bytes; off += 64) {
      const char* pf = reinterpret_cast<const char*>(block) + kPrefetchBytes + off;
      if (pf < pf_end) _mm_prefetch(pf, _MM_HINT_T1);
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * h)));
      __m256 m = _mm256_setzero_ps();
      if (f.has_min) m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 32 + 16 * h)));
      for (int s = 0; s < segs_per_block; ++s) {
        uint8_t* o = out + ((b - b0) * segs_per_block + s) * stride;
        const uint8_t* q = block + f.header_bytes + s * f.seg_bytes;
        unpack_quants_half<B, S>(q, o, h);
        if (f.k_quant) {  // float(sc); d, −dmin and the mn pairs go to the super-block area
          const __m128i sc = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + f.seg_quant_bytes + 8 * h));
          _mm256_storeu_ps(reinterpret_cast<float*>(o + 64 * S) + 8 * h, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
          continue;
        }
        _mm256_storeu_ps(reinterpret_cast<float*>(o + 64 * S) + 8 * h, d);
        if (f.has_min) _mm256_storeu_ps(reinterpret_cast<float*>(o + 64 * S + 64) + 8 * h, m);
      }
      if (!f.k_quant) continue;
      uint8_t* ba = out + unpacked_block_off(f, w.n_in) + (b - b0) * unpacked_block_area(f);
      _mm256_storeu_ps(reinterpret_cast<float*>(ba) + 8 * h, d);
      if (!f.has_min) continue;
      _mm256_storeu_ps(reinterpret_cast<float*>(ba + 64) + 8 * h, _mm256_xor_ps(m, _mm256_set1_ps(-0.0f)));
      for (int j = 0; j < segs_per_block / 2; ++j) {
        // Rows 8h .. 8h + 7 of segments 2j and 2j + 1: their mn side by side, widened to int16.
        const uint8_t* mn = block + f.header_bytes + 2 * j * f.seg_bytes + f.seg_quant_bytes + 16 + 8 * h;
        const __m128i a0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn));
        const __m128i a1 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn + f.seg_bytes));
        store256(ba + 128 + 64 * j + 32 * h, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a0, a1)));
      }
    }
  }
}

using UnpackFn = void (*)(const PackedWeight&, int64_t, int64_t, int64_t, uint8_t*);

UnpackFn unpacker(const PackedFormat& f) {
  switch (f.bits) {
    case PackedBits::B8: return f.steps == 8 ? &unpack_blocks_t<PackedBits::B8, 8> : &unpack_blocks_t<PackedBits::B8, 4>;
    case PackedBits::B4: return f.steps == 8 ? &unpack_blocks_t<PackedBits::B4, 8> : &unpack_blocks_t<PackedBits::B4, 4>;
    case PackedBits::B5: return &unpack_blocks_t<PackedBits::B5, 8>;
    case PackedBits::B4T: return &unpack_blocks_t<PackedBits::B4T, 8>;
    case PackedBits::B6: return &unpack_blocks_t<PackedBits::B6, 4>;
    case PackedBits::B2: return &unpack_blocks_t<PackedBits::B2, 4>;
  }
  return nullptr;
}

inline __m256i bcast_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
inline __m256 bcast_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_ps(v);
}

// One panel (two halves of 8 rows) × NR tokens, all segments. SIGNED: Q8_0's |q| × sign(x, q).
// G: steps whose vpmaddubsw results are added in int16 before vpmaddwd widens them (one
// vpmaddwd + add per G steps instead of per step). Exact as long as G pair sums fit int16: a
// pair is at most 2 · umax · 127 in magnitude, so G = 1 for Q8_0 (|q| <= 128), 2 for 6-bit
// (u <= 63: 32,004), 4 for 5-bit (u <= 31: 31,496), 8 for 4-bit (u <= 15: 30,480) and all
// of a 2-bit segment's 4 steps.
// KQ: the K-quant order of gemm_internal.h — per segment bacc = fma(float(ia), float(sc), bacc),
// per super-block of 64 / S segments the d term and the min term (msum by vpmaddwd of the mn
// pairs against the bsum words) into acc, which then lives in memory (accm).
// DIRECT (Q8_0 only): wp is the quants of the panel's first *packed* block record (already the
// step-interleaved bytes), wstride the record size, and each segment's f16 scales d[16] the 32
// bytes before its quants, converted here as the unpacker would (the same bits, no unpack pass);
// pf_ahead > 0: also prefetch the packed bytes that far ahead into L2, as the unpacker does, up
// to pf_end (the end of the weight's bytes).
template <int NR, int S, int G, bool MIN, bool SIGNED, bool KQ, bool DIRECT = false>
void tile(const uint8_t* wp, int64_t n_seg, int64_t wstride, const ActLayout& a, const uint8_t* x,
          float* y, int64_t ldy, int rows, int64_t pf_ahead = 0, const uint8_t* pf_end = nullptr) {
  static_assert(S % G == 0 && (!SIGNED || G == 1));
  static_assert(!DIRECT || (SIGNED && !KQ && !MIN), "DIRECT reads Q8_0 block records");
  constexpr int kSegs = 64 / S;
  constexpr int64_t kArea = 64 + (MIN ? 64 + 32 * kSegs : 0);
  __m256 acc[2][NR], bacc[2][NR];
  alignas(32) float accm[KQ ? 2 : 1][KQ ? NR : 1][8];
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < NR; ++t) {
      acc[h][t] = bacc[h][t] = _mm256_setzero_ps();
      if constexpr (KQ) _mm256_store_ps(accm[h][t], acc[h][t]);
    }
  const int64_t xs = a.stride;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t s = 0; s < n_seg; ++s) {
    __m256i ia[2][NR];
    for (int t = 0; t < NR; ++t) {
      // A type with a min has offset 0 (gemm_t asserts it), so its init words are 0.
      const __m256i init = (SIGNED || MIN) ? _mm256_setzero_si256() : bcast_i32(x + t * xs + a.init_off + 4 * s);
      ia[0][t] = ia[1][t] = init;
    }
    const uint8_t* xq = x + s * a.seg;
    const uint8_t* ws = wp + s * wstride;
    if (DIRECT && pf_ahead > 0)
      for (int64_t off = 0; off < wstride && pf_end - ws > pf_ahead + off; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(ws + pf_ahead + off), _MM_HINT_T1);
    for (int g = 0; g < S; g += G) {
      __m256i sum[2][NR];
      for (int kk = 0; kk < G; ++kk) {
        const int k = g + kk;
        __m256i wv[2], wa[2];
        for (int h = 0; h < 2; ++h) {
          wv[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws + 64 * k + 32 * h));
          if constexpr (SIGNED) {
            wv[h] = _mm256_xor_si256(wv[h], _mm256_set1_epi8(static_cast<char>(0x80)));
            wa[h] = _mm256_abs_epi8(wv[h]);
          }
        }
        for (int t = 0; t < NR; ++t) {
          const __m256i xb = bcast_i32(xq + t * xs + 4 * k);
          for (int h = 0; h < 2; ++h) {
            __m256i pr;
            if constexpr (SIGNED) pr = _mm256_maddubs_epi16(wa[h], _mm256_sign_epi8(xb, wv[h]));
            else pr = _mm256_maddubs_epi16(wv[h], xb);
            sum[h][t] = kk == 0 ? pr : _mm256_add_epi16(sum[h][t], pr);
          }
        }
      }
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < NR; ++t) ia[h][t] = _mm256_add_epi32(ia[h][t], _mm256_madd_epi16(sum[h][t], ones));
    }
    if constexpr (KQ) {
      for (int h = 0; h < 2; ++h) {
        const __m256 scf = _mm256_load_ps(reinterpret_cast<const float*>(ws + 64 * S) + 8 * h);
        for (int t = 0; t < NR; ++t) bacc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[h][t]), scf, bacc[h][t]);
      }
      if ((s + 1) % kSegs != 0) continue;
      const int64_t b = s / kSegs;
      const uint8_t* ba = wp + n_seg * wstride + b * kArea;
      for (int h = 0; h < 2; ++h) {
        const __m256 d = _mm256_load_ps(reinterpret_cast<const float*>(ba) + 8 * h);
        for (int t = 0; t < NR; ++t) {
          const __m256 dx = bcast_f32(x + t * xs + a.dx_off + 4 * s);
          __m256 v = _mm256_load_ps(accm[h][t]);
          v = _mm256_fmadd_ps(bacc[h][t], _mm256_mul_ps(d, dx), v);
          if constexpr (MIN) {
            const uint8_t* bs = x + t * xs + a.xs_off + 2 * b * kSegs;
            __m256i msum = _mm256_setzero_si256();
            for (int j = 0; j < kSegs / 2; ++j)
              msum = _mm256_add_epi32(msum, _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(ba + 128 + 64 * j + 32 * h)),
                                                              bcast_i32(bs + 4 * j)));
            const __m256 nd = _mm256_load_ps(reinterpret_cast<const float*>(ba + 64) + 8 * h);
            v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(nd, dx), v);
          }
          _mm256_store_ps(accm[h][t], v);
          bacc[h][t] = _mm256_setzero_ps();
        }
      }
      continue;
    }
    for (int h = 0; h < 2; ++h) {
      const float* sp = reinterpret_cast<const float*>(ws + 64 * S);
      const __m256 dw = DIRECT ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ws - 32 + 16 * h)))
                               : _mm256_load_ps(sp + 8 * h);
      for (int t = 0; t < NR; ++t) {
        const __m256 scale = _mm256_mul_ps(dw, bcast_f32(x + t * xs + a.dx_off + 4 * s));
        acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[h][t]), scale, acc[h][t]);
      }
      if constexpr (MIN) {
        const __m256 mw = _mm256_load_ps(sp + 16 + 8 * h);
        for (int t = 0; t < NR; ++t)
          acc[h][t] = _mm256_fmadd_ps(mw, bcast_f32(x + t * xs + a.xs_off + 4 * s), acc[h][t]);
      }
    }
  }
  if constexpr (KQ)
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < NR; ++t) acc[h][t] = _mm256_load_ps(accm[h][t]);
  for (int t = 0; t < NR; ++t) {
    if (rows == kPanelRows) {
      _mm256_storeu_ps(y + t * ldy, acc[0][t]);
      _mm256_storeu_ps(y + t * ldy + 8, acc[1][t]);
    } else {
      alignas(32) float tmp[16];
      _mm256_store_ps(tmp, acc[0][t]);
      _mm256_store_ps(tmp + 8, acc[1][t]);
      for (int r = 0; r < rows; ++r) y[t * ldy + r] = tmp[r];
    }
  }
}

template <int S, int G, bool MIN, bool SIGNED, bool KQ>
void gemm_t(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed, int64_t n_tokens,
            float* y, int64_t ldy, int64_t p0, int64_t p1, uint8_t* scratch) {
  assert(!MIN || w.fmt.offset == 0);  // tile(): a type with a min starts its sums at 0
  const PackedFormat& f = w.fmt;
  const UnpackFn unpack = unpacker(f);
  const int64_t wstride = unpacked_seg_stride(f);
  const int64_t n_blocks = w.n_in / f.block_elems;
  constexpr int NR = kNR;
  const int64_t n_tiles = (n_tokens + NR - 1) / NR;
  // Q8_0: the tiles read the packed records directly (tile(), DIRECT): its quants already are
  // the unpacked bytes, so the unpack pass was a copy (docs/BENCHMARKS.md, "Q8_0 tiles straight
  // from the packed weights"). The first tile of a panel prefetches as the unpacker would.
  constexpr bool kDirect = SIGNED && S == 8;
  assert(!kDirect || f.header_bytes == 32);  // tile() reads the scales 32 bytes before the quants
  for (int64_t p = p0; p < p1; ++p) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, w.n_out - p * kPanelRows));
    if (!kDirect) unpack(w, p, 0, n_blocks, scratch);
    // The next panel's packed bytes are prefetched into L2 a slice per tile, so that its
    // unpacking (or Q8_0's direct tiles) finds them there rather than waiting on memory after the
    // tiles of this one
    // (the unpacker's own prefetch runs only kPrefetchBytes ahead, while it runs).
    // With one tile (1-2 tokens: decode) the unpacker's prefetch suffices and this would only
    // add instructions.
    const char* pf = p + 1 < p1 && n_tiles > 1 ? reinterpret_cast<const char*>(w.panel(p + 1)) : nullptr;
    const int64_t pf_slice = ((w.panel_bytes + n_tiles - 1) / n_tiles + 63) & ~int64_t(63);
    const char* pf_end = pf ? pf + w.panel_bytes : nullptr;
    float* yp = y + p * kPanelRows;
    auto run = [&](auto nr, int64_t t) {
      for (int64_t off = 0; pf && off < pf_slice && pf < pf_end; off += 64, pf += 64) _mm_prefetch(pf, _MM_HINT_T1);
      // The lines of y the next panel's tile of these tokens will write (one per token):
      // with many tokens y is large (the logits of 32 sequences are 32 MiB) and a store that
      // misses waits for its line, so they are fetched a panel ahead.
      if (pf)
        for (int64_t i = 0; i < decltype(nr)::value; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(yp + (t + i) * ldy + kPanelRows), _MM_HINT_T0);
      if constexpr (kDirect)
        tile<decltype(nr)::value, S, G, MIN, SIGNED, KQ, true>(w.panel(p) + f.header_bytes, a.n_seg, f.block_bytes, a,
                                                             x_packed + t * a.stride, yp + t * ldy, ldy, rows,
                                                             t == 0 ? kPrefetchBytes : 0, w.data + w.bytes());
      else
        tile<decltype(nr)::value, S, G, MIN, SIGNED, KQ>(scratch, a.n_seg, wstride, a, x_packed + t * a.stride,
                                                     yp + t * ldy, ldy, rows);
    };
    int64_t t = 0;
    for (; t + NR <= n_tokens; t += NR) run(std::integral_constant<int, NR>{}, t);
    switch (n_tokens - t) {
      case 3: if constexpr (NR > 3) run(std::integral_constant<int, 3>{}, t); break;
      case 2: if constexpr (NR > 2) run(std::integral_constant<int, 2>{}, t); break;
      case 1: run(std::integral_constant<int, 1>{}, t); break;
      default: break;
    }
  }
}

}  // namespace

void pack_acts_avx2(const PackedFormat& f, const ActLayout& a, const float* x, int64_t t0,
                    int64_t t1, uint8_t* x_packed) {
  const int64_t n_in = a.n_in;
  const int blk = a.act_block;  // 32 or 256: whole vectors of 8
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t t = t0; t < t1; ++t) {
    const float* xr = x + t * n_in;
    uint8_t* row = x_packed + t * a.stride;
    auto* init = reinterpret_cast<int32_t*>(row + a.init_off);
    auto* dx = reinterpret_cast<float*>(row + a.dx_off);
    auto* xsv = reinterpret_cast<float*>(row + a.xs_off);
    for (int64_t b0 = 0; b0 < n_in; b0 += blk) {
      // As pack_acts_avx512 and the scalar quantize_act_row (see there).
      __m256 mx = _mm256_setzero_ps();
      for (int i = 0; i < blk; i += 8)
        mx = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xr + b0 + i)), mx);
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
      const float amax = _mm_cvtss_f32(m4);
      const float d = amax / 127.0f;
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
      const __m256 vid = _mm256_set1_ps(id);
      // Q8_0's 32-element blocks sum each 8 quantized bytes from the register (vpsadbw of
      // q + 128 against 0, less 1,024): read back from the row, a 16-byte load spanned two 8-byte
      // stores, which the core cannot forward (32 x 1,024 activations 15.4 -> 11.8-12.1 us, one
      // thread; pack_acts_avx512 says where it showed). The 256-element blocks keep the
      // read-back, which measured faster for them (8.8 against 10.9 us).
      int32_t sum8[4];
      for (int i = 0; i < blk; i += 8) {
        __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + b0 + i), vid),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
        const __m256i q32 = _mm256_cvtps_epi32(v);
        const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q32), _mm256_extracti128_si256(q32, 1));
        const __m128i q8 = _mm_packs_epi16(q16, q16);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(row + b0 + i), q8);
        if (blk == 32)
          sum8[i / 8] = _mm_cvtsi128_si32(_mm_sad_epu8(_mm_xor_si128(q8, _mm_set1_epi8(static_cast<char>(0x80))),
                                                       _mm_setzero_si128())) - 1024;
      }
      for (int64_t s = b0 / a.seg; s < (b0 + blk) / a.seg; ++s) {
        int32_t total = 0;
        if (blk == 32) {
          for (int j = 0; j < a.seg / 8; ++j) total += sum8[(s * a.seg - b0) / 8 + j];
        } else {
          for (int i = 0; i < a.seg; i += 16) {
            const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + s * a.seg + i));
            // |sum| of 16 int8 fits easily: widen to 16 bits and add pairs, then sum exactly.
            const __m256i w = _mm256_cvtepi8_epi16(q);
            const __m256i p = _mm256_madd_epi16(w, _mm256_set1_epi16(1));
            __m128i r = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
            r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0x4E));
            r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0xB1));
            total += _mm_cvtsi128_si32(r);
          }
        }
        init[s] = -f.offset * total;
        dx[s] = d;
        if (f.has_min && f.k_quant) reinterpret_cast<int16_t*>(xsv)[s] = static_cast<int16_t>(total);
        else if (f.has_min) xsv[s] = d * static_cast<float>(total);
      }
    }
    std::memset(row + n_in, 0, static_cast<size_t>(a.init_off - n_in));
  }
}

void gemm_panels_avx2(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                      int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                      uint8_t* scratch) {
  const PackedFormat& f = w.fmt;
  auto run = [&](auto fn) { fn(w, a, x_packed, n_tokens, y, ldy, p0, p1, scratch); };
  switch (f.bits) {
    // Bytes up to 255 would saturate vpmaddubsw: multiply q = u ^ 0x80 as signed.
    case PackedBits::B8: return f.steps == 8 ? run(gemm_t<8, 1, false, true, false>) : run(gemm_t<4, 1, false, true, false>);
    case PackedBits::B6: return run(gemm_t<4, 2, false, false, true>);  // Q6_K
    case PackedBits::B2: return run(gemm_t<4, 4, true, false, true>);   // Q2_K
    case PackedBits::B5:  // Q5_0, Q5_1, Q5_K
      if (f.k_quant) return run(gemm_t<8, 4, true, false, true>);
      return f.has_min ? run(gemm_t<8, 4, true, false, false>) : run(gemm_t<8, 4, false, false, false>);
    case PackedBits::B4T: return run(gemm_t<8, 4, false, false, false>);  // MXFP4: u <= 24, as 5-bit
    case PackedBits::B4:  // Q4_0, Q4_1, Q4_K (S = 8); Q3_K (S = 4, u <= 7)
      if (f.steps == 4) return run(gemm_t<4, 4, false, false, true>);
      if (f.k_quant) return run(gemm_t<8, 8, true, false, true>);
      return f.has_min ? run(gemm_t<8, 8, true, false, false>) : run(gemm_t<8, 8, false, false, false>);
  }
}

}  // namespace ubatch::kernels::detail
