// Packing GGUF blocks into the panel layout of packed_weight.h, and reading it back (scalar).
#include "kernels/packed_weight.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <cstring>
#include <vector>

#include "kernels/matmul_unpack.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"

namespace ubatch::kernels {

using namespace detail;  // the GGUF block structs

bool packed_format(TensorType t, PackedFormat& f) {
  f = PackedFormat{};
  f.type = t;
  switch (t) {
    case TensorType::Q4_0: f.bits = PackedBits::B4; f.seg = 32; f.offset = 8; break;
    case TensorType::Q4_1: f.bits = PackedBits::B4; f.seg = 32; f.has_min = true; break;
    case TensorType::Q5_0: f.bits = PackedBits::B5; f.seg = 32; f.offset = 16; break;
    case TensorType::Q5_1: f.bits = PackedBits::B5; f.seg = 32; f.has_min = true; break;
    case TensorType::Q8_0: f.bits = PackedBits::B8; f.seg = 32; f.offset = 128; break;
    case TensorType::Q2_K: f.bits = PackedBits::B2; f.seg = 16; f.has_min = true; f.k_quant = true; break;
    case TensorType::Q3_K: f.bits = PackedBits::B4; f.seg = 16; f.offset = 4; f.k_quant = true; break;
    case TensorType::Q4_K: f.bits = PackedBits::B4; f.seg = 32; f.has_min = true; f.k_quant = true; break;
    case TensorType::Q5_K: f.bits = PackedBits::B5; f.seg = 32; f.has_min = true; f.k_quant = true; break;
    case TensorType::Q6_K: f.bits = PackedBits::B6; f.seg = 16; f.offset = 32; f.k_quant = true; break;
    case TensorType::MXFP4: f.bits = PackedBits::B4T; f.seg = 32; f.offset = 12; break;  // u = code + 12 <= 24
    default: return false;
  }
  f.steps = f.seg / 4;
  f.block_elems = f.k_quant ? kQK_K : kQK;
  f.seg_quant_bytes = seg_quant_bytes_of(f.bits, f.steps);
  f.seg_bytes = f.seg_quant_bytes + (f.k_quant ? (f.has_min ? 32 : 16) : 0);
  f.header_bytes = f.has_min ? 64 : 32;
  f.block_bytes = f.header_bytes + (f.block_elems / f.seg) * f.seg_bytes;
  return true;
}

namespace detail {

bool packed_row_scales(const PackedFormat& f, const uint8_t* row, int64_t n_in, uint16_t* d16,
                       uint16_t* m16, int8_t* sc, uint8_t* mn) {
  const int64_t nb = n_in / f.block_elems;
  for (int64_t i = 0; i < nb; ++i) {
    switch (f.type) {
      case TensorType::Q4_0: d16[i] = reinterpret_cast<const BlockQ4_0*>(row)[i].d; break;
      case TensorType::Q4_1: {
        const auto& b = reinterpret_cast<const BlockQ4_1*>(row)[i];
        d16[i] = b.d;
        m16[i] = b.m;
        break;
      }
      case TensorType::Q5_0: d16[i] = reinterpret_cast<const BlockQ5_0*>(row)[i].d; break;
      case TensorType::Q5_1: {
        const auto& b = reinterpret_cast<const BlockQ5_1*>(row)[i];
        d16[i] = b.d;
        m16[i] = b.m;
        break;
      }
      case TensorType::Q8_0: d16[i] = reinterpret_cast<const BlockQ8_0*>(row)[i].d; break;
      case TensorType::MXFP4: {
        const float d = mxfp4_block_scale(row + 17 * i);
        if (!mxfp4_scale_fits_f16(d)) return false;
        d16[i] = fp32_to_fp16(d);  // exact
        break;
      }
      case TensorType::Q2_K: {
        const auto& b = reinterpret_cast<const BlockQ2_K*>(row)[i];
        d16[i] = b.d;
        m16[i] = b.dmin;
        for (int s = 0; s < 16; ++s) {
          sc[16 * i + s] = static_cast<int8_t>(b.scales[s] & 0x0F);
          mn[16 * i + s] = static_cast<uint8_t>(b.scales[s] >> 4);
        }
        break;
      }
      case TensorType::Q3_K: {
        const auto& b = reinterpret_cast<const BlockQ3_K*>(row)[i];
        d16[i] = b.d;
        for (int s = 0; s < 16; ++s) sc[16 * i + s] = static_cast<int8_t>(q3k_scale(b.scales, s));
        break;
      }
      case TensorType::Q4_K:
      case TensorType::Q5_K: {
        // Q4_K and Q5_K share the leading d, dmin, scales[12].
        const size_t bytes = f.type == TensorType::Q5_K ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
        const auto* b = reinterpret_cast<const BlockQ4_K*>(row + i * bytes);
        d16[i] = b->d;
        m16[i] = b->dmin;
        for (int s = 0; s < 8; ++s) {
          uint8_t a, m;
          k4_scale_min(b->scales, s, a, m);
          sc[8 * i + s] = static_cast<int8_t>(a);
          mn[8 * i + s] = m;
        }
        break;
      }
      case TensorType::Q6_K: {
        const auto& b = reinterpret_cast<const BlockQ6_K*>(row)[i];
        d16[i] = b.d;
        for (int s = 0; s < 16; ++s) sc[16 * i + s] = b.scales[s];
        break;
      }
      default: break;
    }
  }
  return true;
}

}  // namespace detail

namespace {

// Encodes one segment's step-interleaved bytes U[S][64] at the format's bit width.
void encode_quants(const PackedFormat& f, const uint8_t* U, uint8_t* q) {
  const int S = f.steps;
  switch (f.bits) {
    case PackedBits::B8: std::memcpy(q, U, static_cast<size_t>(64 * S)); return;
    case PackedBits::B2:
      for (int i = 0; i < 64; ++i) {
        uint8_t v = 0;
        for (int k = 0; k < S; ++k) v = static_cast<uint8_t>(v | ((U[k * 64 + i] & 3) << (2 * k)));
        q[i] = v;
      }
      return;
    case PackedBits::B4T: {  // u -> the nibble kMxfp4U maps to it (+0 for u = 12)
      static constexpr auto nib = [] {
        std::array<uint8_t, 25> t{};
        for (int n = 15; n >= 0; --n) t[kMxfp4U[n]] = static_cast<uint8_t>(n);
        return t;
      }();
      const int half = S / 2;
      for (int j = 0; j < half; ++j)
        for (int i = 0; i < 64; ++i)
          q[j * 64 + i] = static_cast<uint8_t>(nib[U[j * 64 + i]] | (nib[U[(j + half) * 64 + i]] << 4));
      return;
    }
    case PackedBits::B4:
    case PackedBits::B5:
    case PackedBits::B6: {
      const int half = S / 2;
      for (int j = 0; j < half; ++j)
        for (int i = 0; i < 64; ++i)
          q[j * 64 + i] = static_cast<uint8_t>((U[j * 64 + i] & 0x0F) | ((U[(j + half) * 64 + i] & 0x0F) << 4));
      if (f.bits == PackedBits::B4) return;
      uint8_t* hi = q + half * 64;
      for (int i = 0; i < 64; ++i) {
        uint8_t v = 0;
        for (int k = 0; k < S; ++k) {
          const int h = U[k * 64 + i] >> 4;  // 1 bit (B5) or 2 bits (B6)
          v = static_cast<uint8_t>(v | (f.bits == PackedBits::B5 ? (h & 1) << k : (h & 3) << (2 * k)));
        }
        hi[i] = v;
      }
      return;
    }
  }
}

// Byte i of step k of a segment record's quants.
inline uint8_t quant_at(const PackedFormat& f, const uint8_t* q, int k, int i) {
  const int S = f.steps;
  switch (f.bits) {
    case PackedBits::B8: return q[k * 64 + i];
    case PackedBits::B2: return static_cast<uint8_t>((q[i] >> (2 * k)) & 3);
    default: break;
  }
  const int half = S / 2;
  const uint8_t v = q[(k % half) * 64 + i];
  uint8_t u = static_cast<uint8_t>(k < half ? (v & 0x0F) : (v >> 4));
  if (f.bits == PackedBits::B4) return u;
  if (f.bits == PackedBits::B4T) return kMxfp4U[u];
  const uint8_t hi = q[half * 64 + i];  // B5 / B6: the plane of high bits after the nibbles
  if (f.bits == PackedBits::B5) u = static_cast<uint8_t>(u | (((hi >> k) & 1) << 4));
  if (f.bits == PackedBits::B6) u = static_cast<uint8_t>(u | (((hi >> (2 * k)) & 3) << 4));
  return u;
}

// The dequantization scales of segment s_in_block of a block record for row r: dw = d and mw = m
// for the block types, dw = d · sc and mw = −(dmin · mn) for the K-quants (exact in f32).
inline void seg_scales(const PackedFormat& f, const uint8_t* block, int s_in_block, int r,
                       float& dw, float& mw) {
  uint16_t d16, m16 = 0;
  std::memcpy(&d16, block + 2 * r, 2);
  if (f.has_min) std::memcpy(&m16, block + 32 + 2 * r, 2);
  const float d = fp16_to_fp32(d16);
  if (!f.k_quant) {
    dw = d;
    mw = f.has_min ? fp16_to_fp32(m16) : 0.0f;
    return;
  }
  const uint8_t* seg = block + f.header_bytes + s_in_block * f.seg_bytes;
  const auto sc = static_cast<int8_t>(seg[f.seg_quant_bytes + r]);
  dw = d * static_cast<float>(sc);
  mw = 0.0f;
  if (f.has_min) mw = -(fp16_to_fp32(m16) * static_cast<float>(seg[f.seg_quant_bytes + 16 + r]));
}

}  // namespace

Result<std::unique_ptr<PackedWeight>> pack_weight(TensorType type, const void* src, int64_t n_in,
                                                  int64_t n_out, bool huge_pages) {
  PackedFormat f;
  if (!packed_format(type, f))
    return Status::error("pack_weight: no packed layout for type " + std::string(tensor_type_name(type)));
  if (n_in <= 0 || n_in % f.block_elems != 0)
    return Status::error("pack_weight: n_in " + std::to_string(n_in) + " is not a multiple of " +
                         std::to_string(f.block_elems));
  if (n_out < 1) return Status::error("pack_weight: n_out must be >= 1");

  auto w = std::make_unique<PackedWeight>();
  w->fmt = f;
  w->n_in = n_in;
  w->n_out = n_out;
  w->n_panels = (n_out + kPanelRows - 1) / kPanelRows;
  w->panel_bytes = n_in / f.block_elems * f.block_bytes;
  const size_t total = (w->bytes() + 63) & ~size_t(63);
  w->storage = LargeBuffer::allocate(total, huge_pages);  // zeroed
  if (!w->storage.data()) return Status::error("pack_weight: out of memory (" + std::to_string(total) + " bytes)");
  w->data = w->storage.data();

  const size_t row_bytes = tensor_row_bytes(type, n_in);
  const int64_t n_blocks = n_in / f.block_elems;
  const int64_t n_seg = n_in / f.seg;
  const int segs_per_block = f.block_elems / f.seg;
  // One panel's rows unpacked: natural-order bytes and raw scales.
  std::vector<uint8_t> u(static_cast<size_t>(kPanelRows * n_in));
  std::vector<uint16_t> d16(static_cast<size_t>(kPanelRows * n_blocks)), m16(d16.size());
  std::vector<int8_t> sc(static_cast<size_t>(kPanelRows * n_seg));
  std::vector<uint8_t> mn(sc.size());
  std::vector<float> dw_tmp(static_cast<size_t>(n_in / 16 + 64)), mw_tmp(dw_tmp.size());
  uint8_t U[64 * 8];

  for (int64_t p = 0; p < w->n_panels; ++p) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, n_out - p * kPanelRows));
    std::fill(u.begin(), u.end(), 0);
    std::fill(d16.begin(), d16.end(), 0);
    std::fill(m16.begin(), m16.end(), 0);
    std::fill(sc.begin(), sc.end(), 0);
    std::fill(mn.begin(), mn.end(), 0);
    for (int r = 0; r < rows; ++r) {
      const auto* row = static_cast<const uint8_t*>(src) + (p * kPanelRows + r) * row_bytes;
      detail::unpack_row(type, row, n_in, true, u.data() + r * n_in, dw_tmp.data(), mw_tmp.data());
      if (!detail::packed_row_scales(f, row, n_in, d16.data() + r * n_blocks, m16.data() + r * n_blocks,
                      sc.data() + r * n_seg, mn.data() + r * n_seg))
        return Status::error("pack_weight: an MXFP4 block scale is outside the f16 range [2^-24, 2^15] of the packed layout");
    }
    uint8_t* out = const_cast<uint8_t*>(w->panel(p));
    for (int64_t b = 0; b < n_blocks; ++b) {
      uint8_t* rec = out + b * f.block_bytes;
      for (int r = 0; r < kPanelRows; ++r) {
        std::memcpy(rec + 2 * r, &d16[r * n_blocks + b], 2);
        if (f.has_min) std::memcpy(rec + 32 + 2 * r, &m16[r * n_blocks + b], 2);
      }
      for (int s = 0; s < segs_per_block; ++s) {
        const int64_t seg = b * segs_per_block + s;
        const int64_t e0 = seg * f.seg;
        for (int k = 0; k < f.steps; ++k)
          for (int r = 0; r < kPanelRows; ++r)
            for (int j = 0; j < 4; ++j) U[k * 64 + r * 4 + j] = u[r * n_in + e0 + 4 * k + j];
        uint8_t* srec = rec + f.header_bytes + s * f.seg_bytes;
        encode_quants(f, U, srec);
        if (f.k_quant)
          for (int r = 0; r < kPanelRows; ++r) {
            srec[f.seg_quant_bytes + r] = static_cast<uint8_t>(sc[r * n_seg + seg]);
            if (f.has_min) srec[f.seg_quant_bytes + 16 + r] = mn[r * n_seg + seg];
          }
      }
    }
  }
  return w;
}

size_t packed_weight_bytes(TensorType t, int64_t n_in, int64_t n_out) {
  PackedFormat f;
  if (!packed_format(t, f) || n_in <= 0 || n_in % f.block_elems != 0 || n_out < 1) return 0;
  const int64_t panels = (n_out + kPanelRows - 1) / kPanelRows;
  return static_cast<size_t>(panels * (n_in / f.block_elems) * f.block_bytes);
}

void packed_dequantize_row(const PackedWeight& w, int64_t row, float* out) {
  const PackedFormat& f = w.fmt;
  const uint8_t* panel = w.panel(row / kPanelRows);
  const int r = static_cast<int>(row % kPanelRows);
  const int segs_per_block = f.block_elems / f.seg;
  for (int64_t b = 0; b < w.n_in / f.block_elems; ++b) {
    const uint8_t* block = panel + b * f.block_bytes;
    for (int s = 0; s < segs_per_block; ++s) {
      float dw, mw;
      seg_scales(f, block, s, r, dw, mw);
      const uint8_t* q = block + f.header_bytes + s * f.seg_bytes;
      float* o = out + (b * segs_per_block + s) * f.seg;
      for (int k = 0; k < f.steps; ++k)
        for (int j = 0; j < 4; ++j)
          o[4 * k + j] = dw * static_cast<float>(static_cast<int>(quant_at(f, q, k, 4 * r + j)) - f.offset) + mw;
    }
  }
}

namespace detail {

void unpack_panel_scalar(const PackedWeight& w, int64_t p, uint8_t* out) {
  const PackedFormat& f = w.fmt;
  const uint8_t* panel = w.panel(p);
  const int segs_per_block = f.block_elems / f.seg;
  const int64_t stride = unpacked_seg_stride(f);
  const int64_t area = unpacked_block_area(f);
  uint8_t* const blocks = out + unpacked_block_off(f, w.n_in);
  for (int64_t b = 0; b < w.n_in / f.block_elems; ++b) {
    const uint8_t* block = panel + b * f.block_bytes;
    for (int s = 0; s < segs_per_block; ++s) {
      uint8_t* o = out + (b * segs_per_block + s) * stride;
      const uint8_t* q = block + f.header_bytes + s * f.seg_bytes;
      for (int k = 0; k < f.steps; ++k)
        for (int i = 0; i < 64; ++i) o[k * 64 + i] = quant_at(f, q, k, i);
      float dw[16], mw[16];
      if (f.k_quant) {
        for (int r = 0; r < 16; ++r) dw[r] = static_cast<float>(static_cast<int8_t>(q[f.seg_quant_bytes + r]));
        std::memcpy(o + 64 * f.steps, dw, 64);
        continue;
      }
      for (int r = 0; r < 16; ++r) seg_scales(f, block, s, r, dw[r], mw[r]);
      std::memcpy(o + 64 * f.steps, dw, 64);
      if (f.has_min) std::memcpy(o + 64 * f.steps + 64, mw, 64);
    }
    if (!f.k_quant) continue;
    uint8_t* ba = blocks + b * area;
    float d[16], nd[16];
    for (int r = 0; r < 16; ++r) {
      uint16_t h;
      std::memcpy(&h, block + 2 * r, 2);
      d[r] = fp16_to_fp32(h);
      if (f.has_min) {
        std::memcpy(&h, block + 32 + 2 * r, 2);
        nd[r] = -fp16_to_fp32(h);
      }
    }
    std::memcpy(ba, d, 64);
    if (!f.has_min) continue;
    std::memcpy(ba + 64, nd, 64);
    for (int j = 0; j < segs_per_block / 2; ++j)
      for (int r = 0; r < 16; ++r)
        for (int h = 0; h < 2; ++h) {
          const uint8_t* q = block + f.header_bytes + (2 * j + h) * f.seg_bytes;
          const int16_t m = q[f.seg_quant_bytes + 16 + r];
          std::memcpy(ba + 128 + 64 * j + 4 * r + 2 * h, &m, 2);
        }
  }
}

}  // namespace detail

}  // namespace ubatch::kernels
