// Private: how matmul lays out quantized weights and activations for its integer kernels, and
// the per-level entry points (tests call them directly to exercise every level).
//
// Integer dot products. A quantized weight row is first unpacked to one unsigned byte per
// element, u = q + offset (q the signed integer the format stores, offset per type so that
// u >= 0), with a float scale per sub-block (and a float "min" term for the types that have
// one). The activation row is quantized to int8 with a float scale per activation block
// (32 elements for the 32-element types, 256 = Q8_K for the K-quants). Then, per sub-block,
//   dot = dw * dx * (sum u*xq - offset * sum xq) [+ mw * dx * sum xq].
//
// Groups. The SIMD kernels cut a row into groups of 16 "positions" (vector lanes of 32 bits)
// by S "steps": step k holds, for each position p, 4 consecutive bytes (elements 4k .. 4k+3)
// of the segment (4S consecutive elements, inside one sub-block and one activation block) that
// p owns. One VNNI instruction per step accumulates a whole group for one token, and each lane
// ends with the integer dot of one segment; the lane is scaled by its own dw*dx and added to a
// float accumulator lane that lives for the whole row. Which segment each position owns is a
// property of each level's in-register transposition (SegmentLayout); the activations are
// packed with the same layout. Groups are 512 elements (S = 8); a row's tail uses smaller
// groups (S = 4, 2, 1) so no lane work is wasted on padding (n_in = 640 = 512 + 128).
//
// Batch invariance: the packed weight row, each packed activation row and the sequence of
// vector operations per (token, row) depend only on that token's x, that row's W and n_in.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tensor_type.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"

namespace ubatch::kernels::detail {

constexpr int kPositions = 16;

// How a quantized type meets the integer kernels.
struct QuantInfo {
  int sub_block = 32;    // elements per weight scale (16 or 32)
  int act_block = 32;    // elements per activation scale (32, or 256 for the K-quants)
  int offset = 0;        // u = q + offset
  bool has_min = false;  // a per-sub-block additive term mw * sum(x)
};

// Q8_0 can store u = q ^ 0x80 = q + 128 (VNNI multiplies unsigned by signed bytes) or keep q
// signed (the AVX2 kernel multiplies |q| by sign(x, q)); q8_unsigned selects.
bool quant_info(TensorType t, bool q8_unsigned, QuantInfo& info);

// Segment owned by each position, per S (index 0: S = 1, 1: S = 2, 2: S = 4, 3: S = 8).
struct SegmentLayout {
  int8_t seg_of_pos[4][kPositions];
};

struct Group {
  int32_t elem_start = 0;  // first element of the group in the row
  int32_t n_elems = 0;     // elements covered (<= 64 * steps)
  int32_t steps = 0;       // S
  int32_t w_offset = 0;    // bytes from the start of a packed weight row
  int32_t x_offset = 0;    // bytes from the start of a packed activation row
  int8_t pos_seg[kPositions] = {};  // segment of each position, -1 = padding
  int8_t pos_sub[kPositions] = {};  // sub-block (relative to the group's first) or -1
  int8_t pos_act[kPositions] = {};  // activation block (relative to the group's first) or -1
};

// Packed weight row, per group: [S][16 positions][4 bytes] u, float dw[16], float mw[16]
// (has_min only). Packed activation row, per group: [S][16][4] int8 xq, int32 init[16]
// (= -offset * segment sum), float dx[16], float xs[16] (= dx * segment sum; has_min only).
struct Plan {
  TensorType type = TensorType::F32;
  int64_t n_in = 0;
  QuantInfo info;
  const Group* groups = nullptr;
  int n_groups = 0;
  int64_t w_row_bytes_packed = 0;
  int64_t x_row_bytes_packed = 0;
};

// Fills `groups` (capacity >= max_groups(n_in)) for a quantized type; returns the count.
int build_groups(const QuantInfo& info, int64_t n_in, const SegmentLayout& layout, Group* groups,
                 int64_t& w_row_bytes, int64_t& x_row_bytes);
static inline int64_t max_groups(int64_t n_in) { return n_in / 512 + 8; }

// Bytes of per-thread scratch the row kernels need for one call: they pack at most
// kMaxRowBlock weight rows at a time (one when n_tokens == 1).
constexpr int kMaxRowBlock = 8;
// Rows whose results the kernels collect before writing them to y (one 64-byte line per
// token); threads get whole multiples of it.
constexpr int kOutRows = 16;
int64_t row_scratch_bytes(const Plan& plan, int64_t n_tokens);

// One SIMD level's implementation (AVX2 or AVX-512 VNNI).
struct Backend {
  const SegmentLayout* layout;
  bool q8_unsigned;
  // Packs activation rows t0 .. t1 of x (rows of n_in floats) into x_packed (rows of
  // plan.x_row_bytes_packed, 64-byte aligned). tmp: >= act_tmp_bytes(n_in) bytes.
  void (*pack_acts)(const Plan& plan, const float* x, int64_t t0, int64_t t1, uint8_t* x_packed,
                    uint8_t* tmp);
  // y rows [r0, r1) for all tokens, from packed activations. scratch: row_scratch_bytes.
  void (*rows_quant)(const Plan& plan, const WeightView& w, const uint8_t* x_packed,
                     int64_t n_tokens, float* y, int64_t r0, int64_t r1, uint8_t* scratch);
  // F32/F16/BF16 weights: y rows [r0, r1) for all tokens from f32 x.
  // scratch: float_scratch_bytes(n_in, n_tokens).
  void (*rows_float)(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t r0,
                     int64_t r1, uint8_t* scratch);
};
static inline int64_t float_scratch_bytes(int64_t n_in, int64_t n_tokens) {
  return 4 * n_in + 128 + 4 * kOutRows * n_tokens;
}
static inline int64_t act_tmp_bytes(int64_t n_in) { return 2 * n_in + 1024 + 4 * (n_in / 32 + 32); }

const Backend& backend_avx2();
const Backend& backend_avx512();  // needs AVX-512 F/BW/VL/DQ and VNNI

// matmul on a given level (Scalar = the reference split over threads). Levels above what the
// CPU offers must not be asked for (callers check cpu_features()).
void matmul_at_level(SimdLevel level, const WeightView& w, const float* x, int64_t n_tokens,
                     float* y, ThreadPool& pool);
// matmul of a packed weight on a given level (gemm_internal.h).
void matmul_packed(SimdLevel level, const PackedWeight& w, const float* x, int64_t n_tokens,
                   float* y, ThreadPool& pool);
// n (<= kMaxMulti) packed weights with the same n_in times the same x, in one pool job.
constexpr int kMaxMulti = 4;
void matmul_packed_multi(SimdLevel level, const PackedWeight* const* ws, float* const* ys, int n,
                         const float* x, int64_t n_tokens, ThreadPool& pool);
// The level matmul() uses on this machine: simd_level(), with AVX-512 only when VNNI is there.
SimdLevel matmul_level();

}  // namespace ubatch::kernels::detail
