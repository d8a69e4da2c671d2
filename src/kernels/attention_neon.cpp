// NEON instantiation of attention over listed KV cells (body in attention_inl.h, vocabulary in
// simd16_neon.h): the same arithmetic as ref::attention, bit for bit. aarch64 builds only.
#include "kernels/attention.h"
#include "kernels/attention_inl.h"
#include "kernels/simd16_neon.h"

namespace ubatch::kernels::neon {

void attention(const AttentionShape& shape, const float* q, const void* k_cache,
               const void* v_cache, const int32_t* cells, int n_cells, float* out,
               float* /*scratch*/, int head_begin, int head_end) {
  simd16::attention<Simd16>(shape, q, k_cache, v_cache, cells, n_cells, out, head_begin,
                            head_end);
}

}  // namespace ubatch::kernels::neon
