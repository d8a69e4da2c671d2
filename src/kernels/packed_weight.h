// Quantized weights repacked once, at load time, into the layout the matmul kernels stream.
//
// A GGUF weight [n_out, n_in] stores each row as a run of blocks (Q8_0: 32 elements, Q4_K:
// 256, …). The kernels instead want, for 16 output rows at once, the same 4 input elements of
// every row side by side — one 512-bit vector is then "4 bytes × 16 rows", a VNNI
// `vpdpbusd` with 4 broadcast activation bytes produces 16 rows' partial dots (one per lane),
// and an AMX B tile (K/4 rows × 64 bytes) is the very same bytes. No per-call unpacking of
// GGUF blocks, no transposition in the hot loop.
//
// Layout (version 1; depends only on the tensor type and n_in — never on the CPU, the
// thread count or n_out — so every instruction set reads the same bytes):
//
//   panel p = rows 16p .. 16p+15 (rows past n_out are zero), panels back to back;
//   a panel is n_in / block_elems block records; a block record is
//     header   d[16] f16 (+ m[16] f16 when the type has a min) — one per row
//     segments block_elems / seg records of:
//       quants  16 rows × seg elements, "step-interleaved": step k = elements 4k..4k+3 of
//               the segment; in the unpacked view byte (k, r, b) sits at k*64 + r*4 + b:
//
//                 step 0: | r0 e0..e3 | r1 e0..e3 | … | r15 e0..e3 |   (64 bytes)
//                 step 1: | r0 e4..e7 | r1 e4..e7 | … | r15 e4..e7 |
//                 …
//
//               stored at the type's bit width (Bits below), u = q + offset >= 0:
//                 B8: [S][64] u8 as above
//                 B4: [S/2][64]: low nibble = step j, high nibble = step j + S/2
//                 B5: B4 + hi[64]: bit k of hi[i] = bit 4 of step k's byte i (S = 8)
//                 B6: B4 + hi[64]: bits 2k, 2k+1 of hi[i] = bits 4, 5 of step k's byte i (S = 4)
//                 B2: [64]: bits 2k, 2k+1 of byte i = step k's byte i (S = 4)
//                 B4T: as B4, but each nibble n is an index: u = kMxfp4U[n] (one byte
//                      shuffle per 16/32/64 bytes on every level; MXFP4 only)
//       sc[16] i8 (+ mn[16] u8 with a min)  — K-quants only: integer sub-block scale/min
//
//   Block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): block = one 32-element segment, the header
//   holds the block's own d (and m); dw = d, mw = m.
//   MXFP4: like the block types, u = mxfp4_code + 12 (0..24) stored as the file's nibble through
//   B4T, d = 2^(e − 128) as f16 (0 for an all-zero block): weights whose scales an f16 cannot
//   hold are not packed. The E2M1 code 8 (−0) is packed as 0 (+0): the same value.
//   K-quants (Q2_K .. Q6_K): block = the 256-element super-block; header d (and dmin); the
//   segment records keep the integer sc (and mn) of the format.
//
// Each segment's contribution to y[t][o] (see gemm_internal.h for the activation side):
//   ia  = Σ_{i ∈ seg} u[o][i] · xq[t][i] − offset · Σ_{i ∈ seg} xq[t][i]     (exact int32)
//   block types: acc = fma(float(ia), dw · dx[t], acc), then with a min acc = fma(mw, xs[t], acc)
//   K-quants:    bacc = fma(float(ia), float(sc), bacc) within the super-block, then per
//                super-block acc = fma(bacc, d · dx[t], acc) and, with a min,
//                acc = fma(float(Σ_seg mn · Σ xq[t]), (−dmin) · dx[t], acc)
// in order, acc and bacc starting at +0 — the same float operations on every path
// (gemm_internal.h has the whole definition).
//
// Sizes per 16 rows (bytes per block record, vs the GGUF blocks): Q8_0 544 (=), Q4_0 288 (=),
// Q4_1 320 (=), Q5_0 352 (=), Q5_1 384 (=), Q6_K 3360 (=), Q4_K 2368 (+2.8%), Q5_K 2880
// (+2.3%), Q2_K 1600 (+19%), Q3_K 2336 (+33%: stored as B4), MXFP4 288 (+5.9%: f16 scales
// for 8-bit exponents).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/large_buffer.h"
#include "common/status.h"
#include "common/tensor_type.h"
#include "kernels/quant.h"

namespace ubatch::kernels {

constexpr int kPanelRows = 16;       // output rows per panel (one 512-bit vector of int32)
constexpr int kPackedLayoutVersion = 1;

// B4T's table is quant.h kMxfp4U (nibble -> mxfp4_code + 12).
enum class PackedBits : uint8_t { B2 = 2, B4 = 4, B5 = 5, B6 = 6, B8 = 8, B4T = 14 };

// Quant bytes of one segment record of S steps at bit width b (the layout above).
constexpr int seg_quant_bytes_of(PackedBits b, int steps) {
  return b == PackedBits::B8 ? 64 * steps
         : b == PackedBits::B2 ? 64
         : (b == PackedBits::B5 || b == PackedBits::B6) ? 32 * steps + 64
                                                          : 32 * steps;
}

// How one tensor type is packed (a pure function of the type).
struct PackedFormat {
  TensorType type = TensorType::F32;
  PackedBits bits = PackedBits::B8;
  int seg = 32;           // elements per segment (the weight's sub-block: 32 or 16)
  int steps = 8;          // seg / 4
  int block_elems = 32;   // elements per block record (32, or 256 for the K-quants)
  int offset = 0;         // u = q + offset
  bool has_min = false;   // per-segment additive term mw · dx · Σ xq
  bool k_quant = false;   // header d/dmin per super-block + integer sc/mn per segment
  int seg_quant_bytes = 0;   // quant bytes of one segment record
  int seg_bytes = 0;         // quants + sc/mn bytes of one segment record
  int header_bytes = 0;      // d (and m/dmin) of one block record
  int block_bytes = 0;       // one block record (16 rows)
};

// The format for type t; false for types without one (F32, F16, BF16).
bool packed_format(TensorType t, PackedFormat& f);

// A weight in packed layout. Owns its bytes (64-byte aligned; from 2 MiB up, 2 MiB aligned and
// advised for transparent huge pages: common/large_buffer.h).
struct PackedWeight {
  PackedFormat fmt;
  int64_t n_in = 0;
  int64_t n_out = 0;
  int64_t n_panels = 0;        // ceil(n_out / 16)
  int64_t panel_bytes = 0;     // n_in / block_elems * block_bytes
  const uint8_t* data = nullptr;  // [n_panels][panel_bytes]
  LargeBuffer storage;

  size_t bytes() const { return static_cast<size_t>(n_panels * panel_bytes); }
  const uint8_t* panel(int64_t p) const { return data + p * panel_bytes; }
};

// Repacks a GGUF weight: rows of row_bytes = tensor_row_bytes(type, n_in) at `src`.
// Errors: type without a packed format, n_in not a multiple of the block, n_out < 1,
// allocation failure. Packing is lossless (every value of every block is kept; MXFP4's −0 code becomes +0).
// huge_pages: put the packed bytes in transparent huge pages where the kernel allows
// (common/large_buffer.h).
Result<std::unique_ptr<PackedWeight>> pack_weight(TensorType type, const void* src, int64_t n_in,
                                                  int64_t n_out, bool huge_pages = false);

// Bytes pack_weight would allocate for a [n_out, n_in] weight of type t (before the 64-byte
// round-up); 0 when t has no packed format or n_in is not a multiple of its block.
size_t packed_weight_bytes(TensorType t, int64_t n_in, int64_t n_out);

// One row back as floats: out[i] = dw · (u − offset) + mw of its segment (f32, n_in values).
// Equal to the value the GGUF format defines, up to the float rounding of that formula.
void packed_dequantize_row(const PackedWeight& w, int64_t row, float* out);

namespace detail {

// One panel unpacked for the kernels: per segment s (n_in / seg of them), at s * stride:
//   block types: u[S][64] u8 (step-interleaved bytes), dw[16] f32, mw[16] f32 (has_min only);
//   K-quants:    u[S][64] u8, scf[16] f32 = float(sc) of the segment's 16 rows;
// then, K-quants only, per super-block b at unpacked_block_off(f, n_in) + b * block area:
//   d[16] f32; with a min also nd[16] f32 = −dmin and mnp[segs / 2][16][2] i16: the mn of
//   segments 2j and 2j + 1 of each row side by side (one int16 pair per 32-bit lane).
inline int64_t unpacked_seg_stride(const PackedFormat& f) {
  return 64 * f.steps + 64 + (f.has_min && !f.k_quant ? 64 : 0);
}
// Bytes of one super-block's area (0 for the block types).
inline int64_t unpacked_block_area(const PackedFormat& f) {
  if (!f.k_quant) return 0;
  return 64 + (f.has_min ? 64 + 32 * (f.block_elems / f.seg) : 0);
}
inline int64_t unpacked_block_off(const PackedFormat& f, int64_t n_in) {
  return n_in / f.seg * unpacked_seg_stride(f);
}
inline int64_t unpacked_panel_bytes(const PackedFormat& f, int64_t n_in) {
  return unpacked_block_off(f, n_in) + n_in / f.block_elems * unpacked_block_area(f);
}

// A row's raw scales from its GGUF blocks (row: tensor_row_bytes(f.type, n_in) bytes): d16 and
// m16 (the min, or dmin) per block, sc and mn per segment (K-quants). False when an MXFP4 block
// scale is not an f16 (quant.h mxfp4_scale_fits_f16).
bool packed_row_scales(const PackedFormat& f, const uint8_t* row, int64_t n_in, uint16_t* d16,
                       uint16_t* m16, int8_t* sc, uint8_t* mn);

// Scalar unpacker of panel p (the reference every SIMD unpacker must match byte for byte).
void unpack_panel_scalar(const PackedWeight& w, int64_t p, uint8_t* out);

}  // namespace detail

}  // namespace ubatch::kernels
