// Attention of one query over listed KV cells: the scalar reference and run-time dispatch.
//
// The reference computes each head in three passes over the listed cells, in their given
// order: scores into scratch, softmax over them, then the probability-weighted sum of V rows.
// The SIMD paths (attention_avx2.cpp, attention_avx512.cpp) take the query heads of one KV
// head together through the cells in fixed-size chunks with an online softmax, reading each
// K/V row once per pass; they agree with the reference to float rounding. On every path a
// head's output depends only on its query, the listed cells and their contents — not on the
// head range, the other heads or the rest of the batch.
#include "kernels/attention.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/status.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace ubatch::kernels {

// Per-ISA entry points (attention_avx2.cpp, attention_avx512.cpp); called only when the CPU
// has the ISA, with a shape already checked by check_shape below.
namespace avx2 {
void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* scratch, int head_begin, int head_end);
}  // namespace avx2
namespace avx512 {
void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* scratch, int head_begin, int head_end);
}  // namespace avx512

namespace {

// The caller (the model's forward pass) builds the shape from validated hyper-parameters, so a
// bad shape is a broken invariant, not an input error.
void check_shape(const AttentionShape& s, int n_cells, const float* scratch, int head_begin,
                 int head_end) {
  UBATCH_CHECK(s.n_head > 0 && s.n_kv_head > 0 && s.head_dim > 0);
  UBATCH_CHECK_MSG(s.n_head % s.n_kv_head == 0, "n_head must be a multiple of n_kv_head");
  UBATCH_CHECK(0 <= head_begin && head_begin <= head_end && head_end <= s.n_head);
  UBATCH_CHECK(n_cells >= 0);
  UBATCH_CHECK(n_cells == 0 || scratch != nullptr);
  UBATCH_CHECK_MSG(s.kv_type == TensorType::F32 || s.kv_type == TensorType::F16 ||
                       s.kv_type == TensorType::Q8_0,
                   "attention supports F32, F16 and Q8_0 KV cells");
  UBATCH_CHECK_MSG(s.kv_type != TensorType::Q8_0 || s.head_dim % 32 == 0,
                   "Q8_0 KV cells need head_dim % 32 == 0");
  const size_t row_min = tensor_row_bytes(s.kv_type, int64_t{s.n_kv_head} * s.head_dim);
  UBATCH_CHECK(s.k_row_bytes >= row_min && s.v_row_bytes >= row_min);
}

// dst[0, n) = the n values of a KV head stored at p as type t (F32, F16 or Q8_0).
void load_head(TensorType t, const uint8_t* p, int n, float* dst) {
  switch (t) {
    case TensorType::F32:
      std::memcpy(dst, p, sizeof(float) * static_cast<size_t>(n));
      return;
    case TensorType::F16:
      for (int i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * static_cast<size_t>(i), 2);
        dst[i] = fp16_to_fp32(h);
      }
      return;
    case TensorType::Q8_0:
      for (int b = 0; b < n / 32; ++b) {
        const uint8_t* block = p + static_cast<size_t>(b) * 34;  // {f16 d; int8 qs[32]}
        uint16_t dh;
        std::memcpy(&dh, block, 2);
        const float d = fp16_to_fp32(dh);
        for (int i = 0; i < 32; ++i)
          dst[b * 32 + i] = d * static_cast<float>(static_cast<int8_t>(block[2 + i]));
      }
      return;
    default:
      UBATCH_CHECK(false);
  }
}

}  // namespace

namespace ref {

void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* scratch, int head_begin, int head_end) {
  check_shape(shape, n_cells, scratch, head_begin, head_end);
  const int d_head = shape.head_dim;
  const int group = shape.n_head / shape.n_kv_head;
  const auto* k_base = static_cast<const uint8_t*>(k_cache);
  const auto* v_base = static_cast<const uint8_t*>(v_cache);
  std::vector<float> row(static_cast<size_t>(d_head));  // one K or V head, as floats
  for (int h = head_begin; h < head_end; ++h) {
    const int g = h / group;
    const size_t head_off = tensor_row_bytes(shape.kv_type, int64_t{g} * d_head);
    const float* qh = q + static_cast<int64_t>(h) * d_head;
    float* oh = out + static_cast<int64_t>(h) * d_head;
    for (int d = 0; d < d_head; ++d) oh[d] = 0.0f;
    if (n_cells == 0) continue;

    for (int j = 0; j < n_cells; ++j) {
      load_head(shape.kv_type,
                k_base + static_cast<size_t>(cells[j]) * shape.k_row_bytes + head_off, d_head,
                row.data());
      float s = 0.0f;
      for (int d = 0; d < d_head; ++d) s += qh[d] * row[static_cast<size_t>(d)];
      s *= shape.scale;
      if (shape.softcap > 0.0f) s = shape.softcap * std::tanh(s / shape.softcap);
      scratch[j] = s;
    }
    ref::softmax(scratch, n_cells);
    for (int j = 0; j < n_cells; ++j) {
      load_head(shape.kv_type,
                v_base + static_cast<size_t>(cells[j]) * shape.v_row_bytes + head_off, d_head,
                row.data());
      const float p = scratch[j];
      for (int d = 0; d < d_head; ++d) oh[d] += p * row[static_cast<size_t>(d)];
    }
  }
}

}  // namespace ref

void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* scratch, int head_begin, int head_end) {
  switch (simd_level()) {
    case SimdLevel::Amx:  // no tile path: the AVX-512 one
    case SimdLevel::Avx512:
      check_shape(shape, n_cells, scratch, head_begin, head_end);
      return avx512::attention(shape, q, k_cache, v_cache, cells, n_cells, out, scratch,
                               head_begin, head_end);
    case SimdLevel::Avx2:
      check_shape(shape, n_cells, scratch, head_begin, head_end);
      return avx2::attention(shape, q, k_cache, v_cache, cells, n_cells, out, scratch,
                             head_begin, head_end);
    case SimdLevel::Scalar: break;
  }
  ref::attention(shape, q, k_cache, v_cache, cells, n_cells, out, scratch, head_begin, head_end);
}

}  // namespace ubatch::kernels
