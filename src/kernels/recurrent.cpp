#include "kernels/recurrent.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/status.h"
#include "kernels/cpu_features.h"
#include "kernels/recurrent_inl.h"
#include "kernels/simd16_scalar.h"

namespace ubatch::kernels {

void l2_normalize(float* x, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float norm = static_cast<float>(std::sqrt(ss));
  const float inv = 1.0f / std::max(norm, eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

namespace avx2 {
void delta_rule_tokens(const DeltaRuleArgs& args);
void delta_rule_chunks(const DeltaRuleArgs& args);
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size);
void round_state_bf16(const float* x, uint16_t* out, int64_t n);
}
namespace avx512 {
void delta_rule_tokens(const DeltaRuleArgs& args);
void delta_rule_chunks(const DeltaRuleArgs& args);
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size);
void round_state_bf16(const float* x, uint16_t* out, int64_t n);
}
namespace avx512bf16 {
void delta_rule_tokens(const DeltaRuleArgs& args);
void delta_rule_chunks(const DeltaRuleArgs& args);
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size);
void round_state_bf16(const float* x, uint16_t* out, int64_t n);
}
namespace neon {
void delta_rule_tokens(const DeltaRuleArgs& args);
void delta_rule_chunks(const DeltaRuleArgs& args);
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size);
void round_state_bf16(const float* x, uint16_t* out, int64_t n);
}

namespace ref {
void delta_rule_tokens(const DeltaRuleArgs& args) { simd16::delta_rule_tokens_row<scalar::Simd16>(args); }
void delta_rule_chunks(const DeltaRuleArgs& args) { simd16::delta_rule_chunks_row<scalar::Simd16>(args); }
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size) {
  simd16::conv1d_step_row<scalar::Simd16>(in, state, w, out, n_ch, k_size);
}
void round_state_bf16(const float* x, uint16_t* out, int64_t n) {
  simd16::round_state_bf16_row<scalar::Simd16>(x, out, n);
}
}  // namespace ref

namespace {
// The delta rule's kernels at the running SIMD level (the scalar reference where the build or
// the CPU has none).
struct DeltaKernels {
  void (*tokens)(const DeltaRuleArgs&);
  void (*chunks)(const DeltaRuleArgs&);
  void (*conv)(const float*, float*, const float*, float*, int64_t, int);
  void (*round_bf16)(const float*, uint16_t*, int64_t);
};
DeltaKernels choose_delta_kernels() {
  switch (simd_level()) {
#if defined(UBATCH_X86_KERNELS)
    case SimdLevel::Amx:  // no tile path: the AVX-512 one
    case SimdLevel::Avx512:
      // The same bits either way; AVX512_BF16 stores a BF16 state in one instruction.
      if (cpu_features().avx512_bf16)
        return {&avx512bf16::delta_rule_tokens, &avx512bf16::delta_rule_chunks, &avx512bf16::conv1d_step,
                &avx512bf16::round_state_bf16};
      return {&avx512::delta_rule_tokens, &avx512::delta_rule_chunks, &avx512::conv1d_step, &avx512::round_state_bf16};
    case SimdLevel::Avx2:
      return {&avx2::delta_rule_tokens, &avx2::delta_rule_chunks, &avx2::conv1d_step, &avx2::round_state_bf16};
#elif defined(UBATCH_ARM_KERNELS)
    case SimdLevel::Dotprod:  // no dot products here: the NEON one
    case SimdLevel::Neon:
      return {&neon::delta_rule_tokens, &neon::delta_rule_chunks, &neon::conv1d_step, &neon::round_state_bf16};
#endif
    default: break;
  }
  return {&ref::delta_rule_tokens, &ref::delta_rule_chunks, &ref::conv1d_step, &ref::round_state_bf16};
}
// Chosen the first time a kernel runs (cpu_features.h): the step calls these once per token,
// sequence and layer (the convolution) or head (the delta rule).
const DeltaKernels& delta_kernels() {
  static const DeltaKernels kernels = choose_delta_kernels();
  return kernels;
}

void check_storage(const DeltaRuleArgs& a) {
  UBATCH_CHECK_MSG((a.S != nullptr) != (a.S_bf16 != nullptr), "delta rule: exactly one of S and S_bf16 must be set");
  UBATCH_CHECK_MSG(a.S ? !a.snapshots_bf16 : !a.snapshots, "delta rule: snapshots of another type than the state");
}
}  // namespace

void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size) {
  delta_kernels().conv(in, state, w, out, n_ch, k_size);
}

void round_state_bf16(const float* x, uint16_t* out, int64_t n) { delta_kernels().round_bf16(x, out, n); }

void delta_rule_tokens(const DeltaRuleArgs& args) {
  check_storage(args);
  delta_kernels().tokens(args);
}

void delta_rule_chunks(const DeltaRuleArgs& args) {
  check_storage(args);
  UBATCH_CHECK_MSG(args.n_tokens % kDeltaChunk == 0, "delta_rule_chunks: tokens not a whole number of chunks");
  for (int r = 0; r < args.n_tokens; ++r) {
    const bool snap = (args.snapshots && args.snapshots[r]) || (args.snapshots_bf16 && args.snapshots_bf16[r]);
    UBATCH_CHECK_MSG(!snap || r % kDeltaChunk == kDeltaChunk - 1, "delta_rule_chunks: a snapshot inside a chunk");
  }
  delta_kernels().chunks(args);
}

void delta_rule_step(float* S, const float* q, const float* k, const float* v, float decay, float beta, float* o,
                     int d_k, int d_v) {
  DeltaRuleArgs a;
  a.S = S;
  a.d_k = d_k;
  a.d_v = d_v;
  a.n_tokens = 1;
  a.q = q;
  a.k = k;
  a.v = v;
  a.decay = &decay;
  a.beta = &beta;
  a.o = o;
  delta_rule_tokens(a);
}

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace ubatch::kernels
