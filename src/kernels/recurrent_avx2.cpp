// AVX2 + FMA instantiation of the gated delta rule over a sequence's tokens, step by step and
// chunk-wise (body in recurrent_inl.h, vocabulary in simd16_avx2.h): the same arithmetic as the
// scalar reference in recurrent.cpp, bit for bit.
#include "kernels/recurrent_inl.h"
#include "kernels/simd16_avx2.h"

namespace ubatch::kernels::avx2 {

void delta_rule_tokens(const DeltaRuleArgs& args) { simd16::delta_rule_tokens_row<Simd16>(args); }
void delta_rule_chunks(const DeltaRuleArgs& args) { simd16::delta_rule_chunks_row<Simd16>(args); }
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size) {
  simd16::conv1d_step_row<Simd16>(in, state, w, out, n_ch, k_size);
}
void round_state_bf16(const float* x, uint16_t* out, int64_t n) { simd16::round_state_bf16_row<Simd16>(x, out, n); }

}  // namespace ubatch::kernels::avx2
