// AVX-512 instantiation of the gated delta rule with AVX512_BF16's conversion for BF16 states
// (simd16_avx512bf16.h): the same bits as the scalar reference in recurrent.cpp, and the F32
// path identical to recurrent_avx512.cpp's. Chosen at run time where cpu_features().avx512_bf16.
#include "kernels/recurrent_inl.h"
#include "kernels/simd16_avx512bf16.h"

namespace ubatch::kernels::avx512bf16 {

void delta_rule_tokens(const DeltaRuleArgs& args) { simd16::delta_rule_tokens_row<Simd16>(args); }
void delta_rule_chunks(const DeltaRuleArgs& args) { simd16::delta_rule_chunks_row<Simd16>(args); }
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size) {
  simd16::conv1d_step_row<Simd16>(in, state, w, out, n_ch, k_size);
}
void round_state_bf16(const float* x, uint16_t* out, int64_t n) { simd16::round_state_bf16_row<Simd16>(x, out, n); }

}  // namespace ubatch::kernels::avx512bf16
