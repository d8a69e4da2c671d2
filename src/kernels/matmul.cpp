// matmul: dispatch to a SIMD level, the scalar reference, group planning, and scratch buffers.
#include "kernels/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "common/status.h"
#include "kernels/gemm_internal.h"
#include "kernels/matmul_float_inl.h"
#include "kernels/matmul_internal.h"
#include "kernels/matmul_unpack.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"
#include "kernels/simd16_scalar.h"

namespace ubatch::kernels {

namespace detail {

bool quant_info(TensorType t, bool q8_unsigned, QuantInfo& info) {
  switch (t) {
    case TensorType::Q4_0: info = {32, 32, 8, false}; return true;
    case TensorType::Q4_1: info = {32, 32, 0, true}; return true;
    case TensorType::Q5_0: info = {32, 32, 16, false}; return true;
    case TensorType::Q5_1: info = {32, 32, 0, true}; return true;
    case TensorType::Q8_0: info = {32, 32, q8_unsigned ? 128 : 0, false}; return true;
    case TensorType::Q2_K: info = {16, 256, 0, true}; return true;
    case TensorType::Q3_K: info = {16, 256, 4, false}; return true;
    case TensorType::Q4_K: info = {32, 256, 0, true}; return true;
    case TensorType::Q5_K: info = {32, 256, 0, true}; return true;
    case TensorType::Q6_K: info = {16, 256, 32, false}; return true;
    default: return false;
  }
}

namespace {

int layout_index(int steps) { return steps == 1 ? 0 : steps == 2 ? 1 : steps == 4 ? 2 : 3; }

void add_group(const QuantInfo& info, const SegmentLayout& layout, int64_t elem_start,
               int64_t n_elems, int steps, Group& g, int64_t& w_bytes, int64_t& x_bytes) {
  g = Group{};
  g.elem_start = static_cast<int32_t>(elem_start);
  g.n_elems = static_cast<int32_t>(n_elems);
  g.steps = steps;
  g.w_offset = static_cast<int32_t>(w_bytes);
  g.x_offset = static_cast<int32_t>(x_bytes);
  const int seg_len = 4 * steps;
  const int n_seg = static_cast<int>(n_elems / seg_len);
  UBATCH_CHECK(n_elems % seg_len == 0 && n_seg <= kPositions);
  UBATCH_CHECK(seg_len <= info.sub_block);
  for (int p = 0; p < kPositions; ++p) {
    const int seg = layout.seg_of_pos[layout_index(steps)][p];
    if (seg < n_seg) {
      const int64_t e = seg * seg_len;  // relative to elem_start
      g.pos_seg[p] = static_cast<int8_t>(seg);
      g.pos_sub[p] = static_cast<int8_t>(e / info.sub_block);
      g.pos_act[p] = static_cast<int8_t>((elem_start + e) / info.act_block - elem_start / info.act_block);
    } else {
      g.pos_seg[p] = g.pos_sub[p] = g.pos_act[p] = -1;
    }
  }
  w_bytes += 64 * steps + 64 + (info.has_min ? 64 : 0);
  x_bytes += 64 * steps + 128 + (info.has_min ? 64 : 0);
}

}  // namespace

int build_groups(const QuantInfo& info, int64_t n_in, const SegmentLayout& layout, Group* groups,
                 int64_t& w_row_bytes, int64_t& x_row_bytes) {
  int n = 0;
  w_row_bytes = 0;
  x_row_bytes = 0;
  int64_t e = 0;
  auto add = [&](int64_t n_elems, int steps) {
    add_group(info, layout, e, n_elems, steps, groups[n++], w_row_bytes, x_row_bytes);
    e += n_elems;
  };
  if (info.sub_block == 16) {  // Q2_K, Q3_K, Q6_K: one super-block of 16 sub-blocks per group
    while (e < n_in) add(256, 4);
  } else if (info.act_block == 256) {  // Q4_K, Q5_K: two super-blocks, then one
    while (n_in - e >= 512) add(512, 8);
    if (n_in - e == 256) add(256, 4);
  } else {  // 32-element blocks: 16 blocks, then 8, 4, 2, 1 with one segment per lane
    while (n_in - e >= 512) add(512, 8);
    if (n_in - e >= 256) add(256, 4);
    if (n_in - e >= 128) add(128, 2);
    if (n_in - e >= 64) add(64, 1);
    if (n_in - e == 32) add(32, 1);
  }
  UBATCH_CHECK(e == n_in && n <= max_groups(n_in));
  return n;
}

int64_t row_scratch_bytes(const Plan& plan, int64_t n_tokens) {
  const int64_t n_sub = plan.n_in / plan.info.sub_block;
  const int64_t rows = kMaxRowBlock;
  return (plan.n_in + 1024) + 2 * 4 * (n_sub + 64) + rows * plan.w_row_bytes_packed + 256 +
         4 * kOutRows * n_tokens;
}

namespace {

// A growable, 64-byte aligned byte buffer (one per thread and purpose): allocates only when a
// call needs more than any earlier one.
class Scratch {
 public:
  uint8_t* get(size_t n) {
    if (n + 64 > cap_) {
      cap_ = std::max(n + 64, cap_ + cap_ / 2);
      buf_ = std::make_unique<uint8_t[]>(cap_);
    }
    const uintptr_t p = reinterpret_cast<uintptr_t>(buf_.get());
    return buf_.get() + ((64 - (p & 63)) & 63);
  }

 private:
  std::unique_ptr<uint8_t[]> buf_;
  size_t cap_ = 0;
};

thread_local Scratch t_row_scratch;  // per thread: packed weight rows
thread_local Scratch t_act_tmp;      // per thread: one activation row while packing
thread_local Scratch t_acts;         // caller: the packed activations of a call
thread_local Scratch t_packed_acts[kMaxMulti];  // caller: packed-GEMM activations, per layout
thread_local std::vector<Group> t_groups;

// Activations of the scalar reference: int8 rows in natural order and their block scales.
struct RefActs {
  std::vector<int8_t> q;  // [n_tokens, n_in]
  std::vector<float> d;   // [n_tokens, n_in / act_block]
};

void ref_quantize_acts(const QuantInfo& info, const float* x, int64_t n_in, int64_t n_tokens,
                       RefActs& a) {
  a.q.resize(static_cast<size_t>(n_tokens * n_in));
  a.d.resize(static_cast<size_t>(n_tokens * (n_in / info.act_block)));
  for (int64_t t = 0; t < n_tokens; ++t)
    quantize_act_row(x + t * n_in, n_in, info.act_block, a.q.data() + t * n_in,
                     a.d.data() + t * (n_in / info.act_block));
}

bool is_float_type(TensorType t) {
  return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16;
}

// Reference rows [r0, r1): float weights by the canonical float dot (matmul_float_inl.h, the
// scalar vocabulary: the bits of every SIMD level); quantized weights by integer dots per
// sub-block, scaled and summed in order.
void reference_rows(const WeightView& w, const float* x, const RefActs& acts, int64_t n_tokens,
                    float* y, int64_t r0, int64_t r1) {
  const int64_t n_in = w.n_in;
  if (is_float_type(w.type)) {
    std::vector<float> wr(static_cast<size_t>(n_in));
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row_scalar(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_bytes,
                            wr.data(), n_in);
      for (int64_t t = 0; t < n_tokens; ++t)
        simd16::float_dot_tile<scalar::Simd16, 1>(wr.data(), n_in, x + t * n_in,
                                                  y + t * w.n_out + r, 0);
    }
    return;
  }
  QuantInfo info;
  UBATCH_CHECK(quant_info(w.type, true, info));
  const int64_t n_sub = n_in / info.sub_block;
  std::vector<uint8_t> u(static_cast<size_t>(n_in));
  std::vector<float> dw(static_cast<size_t>(n_sub)), mw(static_cast<size_t>(n_sub));
  for (int64_t r = r0; r < r1; ++r) {
    unpack_row(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_bytes, n_in, true,
               u.data(), dw.data(), mw.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int8_t* xq = acts.q.data() + t * n_in;
      const float* xd = acts.d.data() + t * (n_in / info.act_block);
      float acc = 0.0f;
      for (int64_t s = 0; s < n_sub; ++s) {
        int32_t isum = 0, xsum = 0;
        for (int64_t i = s * info.sub_block; i < (s + 1) * info.sub_block; ++i) {
          isum += (static_cast<int32_t>(u[i]) - info.offset) * xq[i];
          xsum += xq[i];
        }
        // The canonical order of gemm_internal.h: every packed path gives these bits.
        const float dx = xd[s * info.sub_block / info.act_block];
        acc = std::fma(static_cast<float>(isum), dw[s] * dx, acc);
        if (info.has_min) acc = std::fma(mw[s], dx * static_cast<float>(xsum), acc);
      }
      y[t * w.n_out + r] = acc;
    }
  }
}

// Thread ith's rows: whole multiples of kOutRows (the last range ends at n_out).
void split_rows(int64_t n_out, int ith, int nth, int64_t& r0, int64_t& r1) {
  ThreadPool::split((n_out + kOutRows - 1) / kOutRows, ith, nth, r0, r1);
  r0 = std::min(r0 * kOutRows, n_out);
  r1 = std::min(r1 * kOutRows, n_out);
}

void check_view(const WeightView& w) {
  UBATCH_CHECK_MSG(can_matmul(w.type), "matmul: unsupported weight type");
  UBATCH_CHECK(w.data != nullptr || w.n_out == 0);
  UBATCH_CHECK(w.n_in > 0 && w.n_out >= 0);
  UBATCH_CHECK(w.row_bytes == tensor_row_bytes(w.type, w.n_in));
}

thread_local Scratch t_gemm_scratch;  // per thread: unpacked weight panels

}  // namespace

void matmul_packed(SimdLevel level, const PackedWeight& w, const float* x, int64_t n_tokens,
                   float* y, ThreadPool& pool) {
  const PackedWeight* ws[1] = {&w};
  float* ys[1] = {y};
  matmul_packed_multi(level, ws, ys, 1, x, n_tokens, pool);
}

void matmul_packed_multi(SimdLevel level, const PackedWeight* const* ws, float* const* ys, int n,
                         const float* x, int64_t n_tokens, ThreadPool& pool) {
  UBATCH_CHECK(n >= 1 && n <= kMaxMulti);
  GemmPanelsFn gemm = &gemm_panels_scalar;
  if (level == SimdLevel::Amx) gemm = &gemm_panels_amx;
  else if (level == SimdLevel::Avx512) gemm = &gemm_panels_avx512;
  else if (level == SimdLevel::Avx2) gemm = &gemm_panels_avx2;
  auto* pack = level >= SimdLevel::Avx512 ? &pack_acts_avx512
               : level == SimdLevel::Avx2   ? &pack_acts_avx2
                                            : &pack_acts;
  // Activations quantized once per distinct type (the layout depends on nothing else; every
  // weight of one call has the same n_in).
  ActLayout acts[kMaxMulti];
  uint8_t* xps[kMaxMulti];
  int act_of[kMaxMulti], owner[kMaxMulti];
  int n_acts = 0;
  const int64_t n_in = ws[0]->n_in;
  for (int i = 0; i < n; ++i) {
    UBATCH_CHECK(ws[i]->n_in == n_in);
    act_of[i] = -1;
    for (int k = 0; k < n_acts; ++k)
      if (ws[owner[k]]->fmt.type == ws[i]->fmt.type) act_of[i] = k;
    if (act_of[i] >= 0) continue;
    act_of[i] = n_acts;
    owner[n_acts] = i;
    acts[n_acts] = act_layout(ws[i]->fmt, n_in);
    xps[n_acts] = t_packed_acts[n_acts].get(static_cast<size_t>(n_tokens * acts[n_acts].stride));
    ++n_acts;
  }
  auto pack_rows = [&](int64_t t0, int64_t t1) {
    for (int k = 0; k < n_acts; ++k) pack(ws[owner[k]]->fmt, acts[k], x, t0, t1, xps[k]);
  };
  if (n_tokens * n_in < (1 << 16) || pool.n_threads() == 1) {
    pack_rows(0, n_tokens);
  } else {
    pool.run([&](int ith, int nth) {
      int64_t t0, t1;
      ThreadPool::split(n_tokens, ith, nth, t0, t1);
      if (t0 < t1) pack_rows(t0, t1);
    });
  }
  // One job for all weights: threads take contiguous runs of whole panel pairs (the
  // micro-kernel covers two panels at a time) over the weights laid end to end.
  int64_t pairs_end[kMaxMulti];
  size_t scratch_bytes = 0;
  for (int i = 0; i < n; ++i) {
    pairs_end[i] = (i ? pairs_end[i - 1] : 0) + (ws[i]->n_panels + 1) / 2;
    scratch_bytes = std::max(scratch_bytes, static_cast<size_t>(gemm_scratch_bytes(*ws[i])));
  }
  pool.run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::split(pairs_end[n - 1], ith, nth, b, e);
    for (int i = 0; i < n && b < e; ++i) {
      const int64_t first = i ? pairs_end[i - 1] : 0;
      if (b >= pairs_end[i]) continue;
      const int64_t q0 = b - first, q1 = std::min(e, pairs_end[i]) - first;
      const PackedWeight& w = *ws[i];
      const int k = act_of[i];
      gemm(w, acts[k], xps[k], n_tokens, ys[i], w.n_out, 2 * q0, std::min(2 * q1, w.n_panels),
           t_gemm_scratch.get(scratch_bytes));
      b = pairs_end[i];
    }
  });
}

namespace {
struct LevelChoice {
  SimdLevel level;
  std::string why;
};
const LevelChoice& level_choice() {
  static const LevelChoice choice = [] {
    LevelChoice c{simd_level(), ""};
    if (c.level == SimdLevel::Avx512 && !cpu_features().avx512_vnni) {
      c.level = SimdLevel::Avx2;
      c.why = "AVX-512 without VNNI";
    }
    if (c.level == SimdLevel::Amx && !amx_gemm_self_check(&c.why)) {
      std::fprintf(stderr, "ubatch: AMX matmul disabled, using AVX-512: %s\n", c.why.c_str());
      c.level = SimdLevel::Avx512;
    }
    return c;
  }();
  return choice;
}
}  // namespace

SimdLevel matmul_level() { return level_choice().level; }

void matmul_at_level(SimdLevel level, const WeightView& w, const float* x, int64_t n_tokens,
                     float* y, ThreadPool& pool) {
  check_view(w);
  UBATCH_CHECK(n_tokens >= 0);
  if (n_tokens == 0 || w.n_out == 0) return;
  if (w.packed) return matmul_packed(level, *w.packed, x, n_tokens, y, pool);

  if (level == SimdLevel::Scalar) {
    RefActs acts;
    QuantInfo info;
    if (quant_info(w.type, true, info)) ref_quantize_acts(info, x, w.n_in, n_tokens, acts);
    pool.run([&](int ith, int nth) {
      int64_t r0, r1;
      ThreadPool::split(w.n_out, ith, nth, r0, r1);
      reference_rows(w, x, acts, n_tokens, y, r0, r1);
    });
    return;
  }

  const Backend& be = level >= SimdLevel::Avx512 ? backend_avx512() : backend_avx2();
  if (is_float_type(w.type)) {
    pool.run([&](int ith, int nth) {
      int64_t r0, r1;
      split_rows(w.n_out, ith, nth, r0, r1);
      if (r0 == r1) return;
      uint8_t* scratch = t_row_scratch.get(static_cast<size_t>(float_scratch_bytes(w.n_in, n_tokens)));
      be.rows_float(w, x, n_tokens, y, r0, r1, scratch);
    });
    return;
  }

  Plan plan;
  plan.type = w.type;
  plan.n_in = w.n_in;
  UBATCH_CHECK(quant_info(w.type, be.q8_unsigned, plan.info));
  t_groups.resize(static_cast<size_t>(max_groups(w.n_in)));
  plan.n_groups = build_groups(plan.info, w.n_in, *be.layout, t_groups.data(),
                               plan.w_row_bytes_packed, plan.x_row_bytes_packed);
  plan.groups = t_groups.data();

  uint8_t* xp = t_acts.get(static_cast<size_t>(n_tokens * plan.x_row_bytes_packed));
  const size_t tmp_bytes = static_cast<size_t>(act_tmp_bytes(w.n_in));
  if (n_tokens * w.n_in < (1 << 16) || pool.n_threads() == 1) {
    be.pack_acts(plan, x, 0, n_tokens, xp, t_act_tmp.get(tmp_bytes));
  } else {
    pool.run([&](int ith, int nth) {
      int64_t t0, t1;
      ThreadPool::split(n_tokens, ith, nth, t0, t1);
      if (t0 < t1) be.pack_acts(plan, x, t0, t1, xp, t_act_tmp.get(tmp_bytes));
    });
  }

  const size_t scratch_bytes = static_cast<size_t>(row_scratch_bytes(plan, n_tokens));
  pool.run([&](int ith, int nth) {
    int64_t r0, r1;
    split_rows(w.n_out, ith, nth, r0, r1);
    if (r0 == r1) return;
    be.rows_quant(plan, w, xp, n_tokens, y, r0, r1, t_row_scratch.get(scratch_bytes));
  });
}

}  // namespace detail

bool can_matmul(TensorType t) { return can_dequantize(t); }

SimdLevel matmul_simd_level(std::string* why) {
  if (why) *why = detail::level_choice().why;
  return detail::level_choice().level;
}

void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  detail::matmul_at_level(detail::matmul_level(), w, x, n_tokens, y, pool);
}

void matmul_multi(const WeightView* const* ws, float* const* ys, int n, const float* x,
                  int64_t n_tokens, ThreadPool& pool) {
  UBATCH_CHECK(n >= 0 && n_tokens >= 0);
  bool all_packed = n >= 1 && n <= detail::kMaxMulti && n_tokens > 0;
  const PackedWeight* pws[detail::kMaxMulti] = {};
  for (int i = 0; i < n && all_packed; ++i) {
    detail::check_view(*ws[i]);
    all_packed = ws[i]->packed != nullptr && ws[i]->n_out > 0 && ws[i]->n_in == ws[0]->n_in;
    if (all_packed) pws[i] = ws[i]->packed;
  }
  if (!all_packed) {
    for (int i = 0; i < n; ++i) matmul(*ws[i], x, n_tokens, ys[i], pool);
    return;
  }
  detail::matmul_packed_multi(detail::matmul_level(), pws, ys, n, x, n_tokens, pool);
}

void matmul_reference(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  detail::check_view(w);
  UBATCH_CHECK(n_tokens >= 0);
  detail::RefActs acts;
  detail::QuantInfo info;
  if (detail::quant_info(w.type, true, info))
    detail::ref_quantize_acts(info, x, w.n_in, n_tokens, acts);
  detail::reference_rows(w, x, acts, n_tokens, y, 0, w.n_out);
}

}  // namespace ubatch::kernels
