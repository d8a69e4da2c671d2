// Attention of one query over listed KV cells: the scalar reference and run-time dispatch.
//
// The algorithm is written once (attention_inl.h) over the 16-lane vocabulary of simd16.h:
// the reference is its scalar instantiation, attention_avx2.cpp, attention_avx512.cpp and
// attention_neon.cpp instantiate the same body, so every level gives the same bits. On every path a head's
// output depends only on its query, the listed cells and their contents — not on the head
// range, the other heads or the rest of the batch.
#include "kernels/attention.h"

#include "common/status.h"
#include "kernels/attention_inl.h"
#include "kernels/cpu_features.h"
#include "kernels/simd16_scalar.h"

namespace ubatch::kernels {

// Per-ISA entry points (attention_avx2.cpp, attention_avx512.cpp, attention_neon.cpp), built
// for their architecture only; called only when the CPU has the ISA, with a shape already
// checked by check_shape below.
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
namespace neon {
void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* scratch, int head_begin, int head_end);
}  // namespace neon

namespace {

// The caller (the model's forward pass) builds the shape from validated hyper-parameters, so a
// bad shape is a broken invariant, not an input error.
void check_shape(const AttentionShape& s, int n_cells, int head_begin, int head_end) {
  UBATCH_CHECK(s.n_head > 0 && s.n_kv_head > 0 && s.head_dim > 0);
  UBATCH_CHECK_MSG(s.n_head % s.n_kv_head == 0, "n_head must be a multiple of n_kv_head");
  UBATCH_CHECK(0 <= head_begin && head_begin <= head_end && head_end <= s.n_head);
  UBATCH_CHECK(n_cells >= 0);
  UBATCH_CHECK_MSG(s.kv_type == TensorType::F32 || s.kv_type == TensorType::F16 ||
                       s.kv_type == TensorType::Q8_0,
                   "attention supports F32, F16 and Q8_0 KV cells");
  UBATCH_CHECK_MSG(s.kv_type != TensorType::Q8_0 || s.head_dim % 32 == 0,
                   "Q8_0 KV cells need head_dim % 32 == 0");
  const size_t row_min = tensor_row_bytes(s.kv_type, int64_t{s.n_kv_head} * s.head_dim);
  UBATCH_CHECK(s.k_row_bytes >= row_min && s.v_row_bytes >= row_min);
}

}  // namespace

namespace ref {

void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* /*scratch*/, int head_begin, int head_end) {
  check_shape(shape, n_cells, head_begin, head_end);
  simd16::attention<scalar::Simd16>(shape, q, k_cache, v_cache, cells, n_cells, out, head_begin,
                                    head_end);
}

}  // namespace ref

void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* scratch, int head_begin, int head_end) {
  switch (simd_level()) {
#if defined(UBATCH_X86_KERNELS)
    case SimdLevel::Amx:  // no tile path: the AVX-512 one
    case SimdLevel::Avx512:
      check_shape(shape, n_cells, head_begin, head_end);
      return avx512::attention(shape, q, k_cache, v_cache, cells, n_cells, out, scratch,
                               head_begin, head_end);
    case SimdLevel::Avx2:
      check_shape(shape, n_cells, head_begin, head_end);
      return avx2::attention(shape, q, k_cache, v_cache, cells, n_cells, out, scratch,
                             head_begin, head_end);
#elif defined(UBATCH_ARM_KERNELS)
    case SimdLevel::Dotprod:  // no dot products here: the NEON one
    case SimdLevel::Neon:
      check_shape(shape, n_cells, head_begin, head_end);
      return neon::attention(shape, q, k_cache, v_cache, cells, n_cells, out, scratch,
                             head_begin, head_end);
#endif
    default: break;
  }
  ref::attention(shape, q, k_cache, v_cache, cells, n_cells, out, scratch, head_begin, head_end);
}

}  // namespace ubatch::kernels
