// Private: the packed-weight GEMM shared by every SIMD level — activation layout, the
// per-level entry points, and the canonical arithmetic they all implement.
//
// For a token t and an output row o (see packed_weight.h for the weight side), with
//   ia[s] = init[t][s] + Σ_{i ∈ s} u[o][i] · xq[t][i]      exact int32 (any instruction):
//
// block types (Q4_0 .. Q8_0, MXFP4; a segment is a block):
//   acc = +0
//   for each segment s, in order:
//     acc = fma(float(ia[s]), dw[o][s] · dx[t][s], acc)    one rounding for the product,
//     if the type has a min:                               one for the fma
//       acc = fma(mw[o][s], xs[t][s], acc)
//   y[t][o] = acc
//
// K-quants (Q2_K .. Q6_K; a super-block b of 256 elements holds 8 or 16 segments, and the
// activations have one scale dx[t][b] per super-block):
//   acc = +0
//   for each super-block b, in order:
//     bacc = +0
//     for each segment s of b, in order:  bacc = fma(float(ia[s]), float(sc[o][s]), bacc)
//     acc = fma(bacc, d[o][b] · dx[t][b], acc)
//     if the type has a min:
//       msum = Σ_{s ∈ b} mn[o][s] · bsum[t][s]              exact int32 (any instruction)
//       acc = fma(float(msum), nd[o][b] · dx[t][b], acc)     nd = −dmin
//   y[t][o] = acc
//
// with init = −offset · Σ_{i ∈ s} xq[t][i], dx the scale of the activation block holding s,
// bsum = Σ_{i ∈ s} xq[t][i] and xs = dx · float(bsum). The integer scales stay integers until
// one multiply per segment (the K-quant segment costs two float operations per token and row,
// not four: docs/BENCHMARKS.md, "Integer K-quant scales"). Integer sums are exact, so any
// instruction may form ia (vpdpbusd, pmaddubsw + pmaddwd, tdpbsud, NEON smull + sadalp or
// sdot, a scalar loop) and msum (vpdpwssd, pmaddwd, smlal, …); from float(·) on, every path
// performs these operations in this order, so y is bit-identical across levels, tilings,
// thread counts and batch compositions. matmul_reference() computes the same from the GGUF
// blocks directly, which makes it the oracle for the packed layout too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/level_plan.h"
#include "kernels/matmul.h"
#include "kernels/packed_weight.h"

namespace ubatch::kernels::detail {

// A packed activation row (one per token), `stride` bytes, 64-byte aligned:
//   xq   [n_in] int8 in natural order (zero-padded to q_bytes)
//   init [n_seg] int32, dx [n_seg] f32, and only when the type has a min:
//   xs   [n_seg] f32 (block types), or bsum [n_seg] int16 (K-quants: segments 2j and 2j + 1
//        side by side in one 32-bit word)
struct ActLayout {
  int64_t n_in = 0;
  int64_t n_seg = 0;
  int seg = 32;
  int act_block = 32;     // 32 (Q8_0 activations) or 256 (Q8_K, for the K-quants)
  int64_t init_off = 0;   // bytes from the row start
  int64_t dx_off = 0;
  int64_t xs_off = 0;
  int64_t stride = 0;
};

ActLayout act_layout(const PackedFormat& f, int64_t n_in);

// Quantizes rows t0 .. t1 of x ([n_tokens][n_in] f32) into packed rows at x_packed + t * stride.
// The same code for every level (activations are bit-identical inputs to every path).
void pack_acts(const PackedFormat& f, const ActLayout& a, const float* x, int64_t t0, int64_t t1,
               uint8_t* x_packed);
using PackActsFn = void (*)(const PackedFormat& f, const ActLayout& a, const float* x, int64_t t0,
                            int64_t t1, uint8_t* x_packed);

// Per-level entry points exist only in builds for their architecture (CMakeLists.txt):
// x86-64 (UBATCH_X86_KERNELS) the AVX2, AVX-512 and AMX ones, aarch64 (UBATCH_ARM_KERNELS)
// the NEON and dot-product ones.

// pack_acts on AVX-512, AVX2 and NEON (same bytes; tests compare).
void pack_acts_avx512(const PackedFormat& f, const ActLayout& a, const float* x, int64_t t0,
                      int64_t t1, uint8_t* x_packed);
void pack_acts_avx2(const PackedFormat& f, const ActLayout& a, const float* x, int64_t t0,
                    int64_t t1, uint8_t* x_packed);
void pack_acts_neon(const PackedFormat& f, const ActLayout& a, const float* x, int64_t t0,
                    int64_t t1, uint8_t* x_packed);

// One level's GEMM over panels [p0, p1) for all n_tokens packed activation rows:
// y[t * ldy + o] for o in [16 p0, min(16 p1, n_out)). scratch: gemm_scratch_bytes(w).
using GemmPanelsFn = void (*)(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                              int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                              uint8_t* scratch);

constexpr int kMaxPanelsPerTile = 2;  // MR: panels a micro-kernel tile covers
inline int64_t gemm_scratch_bytes(const PackedWeight& w) {
  return kMaxPanelsPerTile * unpacked_panel_bytes(w.fmt, w.n_in) + 4096;
}

void gemm_panels_scalar(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                        int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                        uint8_t* scratch);
void gemm_panels_avx2(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                      int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                      uint8_t* scratch);
void gemm_panels_avx512(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                        int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                        uint8_t* scratch);

// aarch64: baseline ARMv8.0 NEON (smull + sadalp; gemm_neon.cpp) and the dot-product
// extension (sdot; gemm_dotprod.cpp, only when the CPU reports HWCAP_ASIMDDP).
void gemm_panels_neon(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                      int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                      uint8_t* scratch);
void gemm_panels_dotprod(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                         int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                         uint8_t* scratch);

// AMX (kernels/amx.h): blocks of 16 tokens on int8 tiles, the remaining tokens on AVX-512.
// Callers check amx_available() first.
void gemm_panels_amx(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                     int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                     uint8_t* scratch);

// One level's packed-GEMM kernels; the scalar ones for Scalar and for a level this build has
// no kernels for (callers check the CPU first).
struct LevelKernels {
  GemmPanelsFn gemm;
  PackActsFn pack;
};
LevelKernels level_kernels(SimdLevel level);

// The measurement behind the level plan (level_probe.cpp): each of `levels` (plus Scalar, the
// self-check's reference; all must run on this CPU) times one probe product per shape class
// on the calling thread; a level whose outputs differ from Scalar's gets passed = false.
// Returns one entry per level, highest first; *spent_seconds (when given): the wall time it
// took (about 10-60 ms, at most about 0.3 s).
std::vector<LevelTiming> measure_levels(std::vector<SimdLevel> levels, double* spent_seconds = nullptr);

// True when the AMX GEMM may be used: amx_available() and a forked child found it
// bit-identical to the AVX-512 path on small products of several types (done once per
// process; the child isolates a SIGILL). On false, why gets the reason.
bool amx_gemm_self_check(std::string* why = nullptr);

// The AVX-512 and NEON unpackers (tests compare them with unpack_panel_scalar byte for byte).
void unpack_panel_avx512(const PackedWeight& w, int64_t p, uint8_t* out);
void unpack_panel_neon(const PackedWeight& w, int64_t p, uint8_t* out);

}  // namespace ubatch::kernels::detail
