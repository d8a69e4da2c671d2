// The packed GEMM's shared parts: activation layout and quantization (one implementation for
// every level), and the scalar level (the canonical arithmetic of gemm_internal.h, written out).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/status.h"
#include "kernels/gemm_internal.h"
#include "kernels/matmul_internal.h"
#include "kernels/matmul_unpack.h"

namespace ubatch::kernels::detail {

namespace {
inline int64_t round64(int64_t n) { return (n + 63) & ~int64_t(63); }
}  // namespace

ActLayout act_layout(const PackedFormat& f, int64_t n_in) {
  QuantInfo info;
  UBATCH_CHECK(quant_info(f.type, true, info));
  ActLayout a;
  a.n_in = n_in;
  a.seg = f.seg;
  a.n_seg = n_in / f.seg;
  a.act_block = info.act_block;
  a.init_off = round64(n_in);
  a.dx_off = a.init_off + round64(4 * a.n_seg);
  a.xs_off = a.dx_off + round64(4 * a.n_seg);
  a.stride = a.xs_off + (f.has_min ? round64(4 * a.n_seg) : 0);
  return a;
}

void pack_acts(const PackedFormat& f, const ActLayout& a, const float* x, int64_t t0, int64_t t1,
               uint8_t* x_packed) {
  const int64_t n_in = a.n_in;
  float d[4096];  // activation block scales of one row (n_in / 32 <= 4096 is checked below)
  UBATCH_CHECK(n_in / a.act_block <= 4096);
  for (int64_t t = t0; t < t1; ++t) {
    uint8_t* row = x_packed + t * a.stride;
    auto* q = reinterpret_cast<int8_t*>(row);
    quantize_act_row(x + t * n_in, n_in, a.act_block, q, d);
    std::memset(row + n_in, 0, static_cast<size_t>(a.init_off - n_in));
    auto* init = reinterpret_cast<int32_t*>(row + a.init_off);
    auto* dx = reinterpret_cast<float*>(row + a.dx_off);
    auto* xs = reinterpret_cast<float*>(row + a.xs_off);
    for (int64_t s = 0; s < a.n_seg; ++s) {
      int32_t sum = 0;
      for (int i = 0; i < a.seg; ++i) sum += q[s * a.seg + i];
      init[s] = -f.offset * sum;
      dx[s] = d[s * a.seg / a.act_block];
      if (f.has_min && f.k_quant) reinterpret_cast<int16_t*>(xs)[s] = static_cast<int16_t>(sum);
      else if (f.has_min) xs[s] = dx[s] * static_cast<float>(sum);
    }
  }
}

void gemm_panels_scalar(const PackedWeight& w, const ActLayout& a, const uint8_t* x_packed,
                        int64_t n_tokens, float* y, int64_t ldy, int64_t p0, int64_t p1,
                        uint8_t* scratch) {
  const PackedFormat& f = w.fmt;
  const int64_t stride = unpacked_seg_stride(f);
  const int64_t area = unpacked_block_area(f);
  const int segs = f.block_elems / f.seg;  // segments per block (1 for the block types)
  const uint8_t* const blocks = scratch + unpacked_block_off(f, w.n_in);
  for (int64_t p = p0; p < p1; ++p) {
    unpack_panel_scalar(w, p, scratch);
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, w.n_out - p * kPanelRows));
    for (int64_t t = 0; t < n_tokens; ++t) {
      const uint8_t* xr = x_packed + t * a.stride;
      const auto* xq = reinterpret_cast<const int8_t*>(xr);
      const auto* init = reinterpret_cast<const int32_t*>(xr + a.init_off);
      const auto* dx = reinterpret_cast<const float*>(xr + a.dx_off);
      const auto* xs = reinterpret_cast<const float*>(xr + a.xs_off);
      const auto* bsum = reinterpret_cast<const int16_t*>(xr + a.xs_off);
      for (int r = 0; r < rows; ++r) {
        float acc = 0.0f, bacc = 0.0f;
        int32_t msum = 0;
        for (int64_t s = 0; s < a.n_seg; ++s) {
          const uint8_t* seg = scratch + s * stride;
          int32_t ia = init[s];
          for (int k = 0; k < f.steps; ++k)
            for (int j = 0; j < 4; ++j)
              ia += static_cast<int32_t>(seg[k * 64 + r * 4 + j]) * xq[s * a.seg + 4 * k + j];
          float dw, mw;
          std::memcpy(&dw, seg + 64 * f.steps + 4 * r, 4);
          if (!f.k_quant) {
            acc = std::fma(static_cast<float>(ia), dw * dx[s], acc);
            if (f.has_min) {
              std::memcpy(&mw, seg + 64 * f.steps + 64 + 4 * r, 4);
              acc = std::fma(mw, xs[s], acc);
            }
            continue;
          }
          // K-quants: dw holds float(sc); the super-block's d, −dmin and mn pairs follow the
          // segments (packed_weight.h, the unpacked panel).
          bacc = std::fma(static_cast<float>(ia), dw, bacc);
          const int64_t b = s / segs, j = s % segs;
          const uint8_t* ba = blocks + b * area;
          if (f.has_min) {
            int16_t mn;
            std::memcpy(&mn, ba + 128 + 64 * (j / 2) + 4 * r + 2 * (j % 2), 2);
            msum += mn * bsum[s];
          }
          if (j + 1 < segs) continue;
          float d;
          std::memcpy(&d, ba + 4 * r, 4);
          acc = std::fma(bacc, d * dx[s], acc);
          if (f.has_min) {
            float nd;
            std::memcpy(&nd, ba + 64 + 4 * r, 4);
            acc = std::fma(static_cast<float>(msum), nd * dx[s], acc);
          }
          bacc = 0.0f;
          msum = 0;
        }
        y[t * ldy + p * kPanelRows + r] = acc;
      }
    }
  }
}

}  // namespace ubatch::kernels::detail
