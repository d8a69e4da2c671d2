// The recurrent mixers' kernels (kernels/recurrent.h): the gated delta rule's step against a
// double-precision transcription of its definition, and every SIMD path this build and CPU have
// against the scalar reference bit for bit (levels the CPU lacks are skipped with a printed line);
// the causal convolution step against its definition, with its rolling state.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/recurrent.h"

#if defined(UBATCH_X86_KERNELS)
namespace ubatch::kernels::avx2 {
void delta_rule_tokens(const DeltaRuleArgs& args);
}
namespace ubatch::kernels::avx512 {
void delta_rule_tokens(const DeltaRuleArgs& args);
}
#elif defined(UBATCH_ARM_KERNELS)
namespace ubatch::kernels::neon {
void delta_rule_tokens(const DeltaRuleArgs& args);
}
#endif

namespace ubatch::kernels {
namespace {

using DeltaFn = void (*)(const DeltaRuleArgs&);

std::vector<std::pair<std::string, DeltaFn>> delta_levels() {
  std::vector<std::pair<std::string, DeltaFn>> out;
#if defined(UBATCH_X86_KERNELS)
  if (cpu_features().avx2) out.emplace_back("avx2", &avx2::delta_rule_tokens);
  else std::printf("skipped level avx2: CPU has no AVX2/FMA\n");
  if (cpu_features().avx512) out.emplace_back("avx512", &avx512::delta_rule_tokens);
  else std::printf("skipped level avx512: CPU has no AVX-512\n");
#elif defined(UBATCH_ARM_KERNELS)
  if (cpu_features().neon) out.emplace_back("neon", &neon::delta_rule_tokens);
  else std::printf("skipped level neon: CPU has no NEON\n");
#endif
  out.emplace_back("dispatched", &delta_rule_tokens);
  return out;
}

std::vector<float> rec_random(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Five tokens through the same state, for head sizes with and without a partial strip: the
// definition in double; every level bit for bit against the reference, one call over the tokens
// (rows picked out of a larger array, with snapshots) and one call per token alike.
TEST(KernelsRecurrent, DeltaRuleMatchesItsDefinitionAndEveryLevelTheReference) {
  std::mt19937 rng(7);
  const int T = 5;
  for (auto [d_k, d_v] : {std::pair{32, 32}, std::pair{128, 128}, std::pair{16, 72}, std::pair{64, 5}}) {
    SCOPED_TRACE(std::to_string(d_k) + "x" + std::to_string(d_v));
    const std::vector<float> S0 = rec_random(size_t(d_k) * d_v, rng, -0.5f, 0.5f);
    // Rows 2T apart in arrays of 2T rows: token r is row 2r + 1.
    const std::vector<float> q = rec_random(size_t(2 * T) * d_k, rng), k = rec_random(size_t(2 * T) * d_k, rng);
    const std::vector<float> v = rec_random(size_t(2 * T) * d_v, rng);
    std::vector<float> decay(2 * T), beta(2 * T);
    std::vector<int32_t> rows(T);
    for (int r = 0; r < T; ++r) {
      rows[r] = 2 * r + 1;
      decay[size_t(rows[r])] = 0.5f + 0.1f * r;
      beta[size_t(rows[r])] = 0.3f + 0.1f * r;
    }
    auto args = [&](float* S, float* o, float* const* snaps) {
      DeltaRuleArgs a;
      a.S = S;
      a.d_k = d_k;
      a.d_v = d_v;
      a.n_tokens = T;
      a.rows = rows.data();
      a.q = q.data();
      a.k = k.data();
      a.qk_stride = d_k;
      a.v = v.data();
      a.v_stride = d_v;
      a.decay = decay.data();
      a.beta = beta.data();
      a.gate_stride = 1;
      a.o = o;
      a.o_stride = d_v;
      a.snapshots = snaps;
      return a;
    };
    // The reference over the tokens, with a snapshot after token 2.
    std::vector<float> Sr = S0, o_ref(size_t(2 * T) * d_v), snap(S0.size());
    std::vector<float*> snaps(T, nullptr);
    snaps[2] = snap.data();
    ref::delta_rule_tokens(args(Sr.data(), o_ref.data(), snaps.data()));
    // The definition, in double: S ← decay S; u = β (v − Sᵀk); S ← S + k uᵀ; o = Sᵀq.
    std::vector<double> Sd(S0.begin(), S0.end());
    for (int r = 0; r < T; ++r) {
      const size_t row = size_t(rows[r]);
      std::vector<double> u(d_v), od(d_v, 0.0);
      for (double& s : Sd) s *= decay[row];
      for (int j = 0; j < d_v; ++j) {
        double sk = 0;
        for (int i = 0; i < d_k; ++i) sk += Sd[size_t(i) * d_v + j] * k[row * d_k + i];
        u[j] = beta[row] * (v[row * d_v + j] - sk);
      }
      for (int i = 0; i < d_k; ++i)
        for (int j = 0; j < d_v; ++j) Sd[size_t(i) * d_v + j] += k[row * d_k + i] * u[j];
      for (int j = 0; j < d_v; ++j)
        for (int i = 0; i < d_k; ++i) od[j] += Sd[size_t(i) * d_v + j] * q[row * d_k + i];
      for (int j = 0; j < d_v; ++j) EXPECT_NEAR(o_ref[row * d_v + j], od[j], 1e-4 * (1 + std::fabs(od[j]))) << "j " << j;
      if (r == 2)
        for (size_t i = 0; i < snap.size(); ++i) ASSERT_NEAR(snap[i], Sd[i], 1e-4 * (1 + std::fabs(Sd[i])));
    }
    for (size_t i = 0; i < Sr.size(); ++i) ASSERT_NEAR(Sr[i], Sd[i], 1e-4 * (1 + std::fabs(Sd[i]))) << "S " << i;
    for (const auto& [name, fn] : delta_levels()) {
      std::vector<float> S = S0, o(o_ref.size()), sn(S0.size());
      std::vector<float*> sp(T, nullptr);
      sp[2] = sn.data();
      fn(args(S.data(), o.data(), sp.data()));
      EXPECT_TRUE(o == o_ref) << name << ": output differs from the reference";
      EXPECT_TRUE(S == Sr) << name << ": state differs from the reference";
      EXPECT_TRUE(sn == snap) << name << ": snapshot differs from the reference";
      // Token by token: the same bits.
      std::vector<float> S1 = S0, o1(o_ref.size());
      for (int r = 0; r < T; ++r) {
        DeltaRuleArgs a = args(S1.data(), o1.data(), nullptr);
        a.rows = &rows[size_t(r)];
        a.n_tokens = 1;
        fn(a);
      }
      EXPECT_TRUE(o1 == o_ref && S1 == Sr) << name << ": one call per token differs from one call over the tokens";
    }
  }
}

TEST(KernelsRecurrent, ConvolutionStepKeepsTheLastInputs) {
  const int n_ch = 300, k_size = 4;  // more channels than one 256-channel chunk
  std::mt19937 rng(3);
  const std::vector<float> w = rec_random(size_t(n_ch) * k_size, rng);
  std::vector<float> state(size_t(k_size - 1) * n_ch, 0.0f);
  std::vector<std::vector<float>> inputs;
  for (int t = 0; t < 7; ++t) {
    inputs.push_back(rec_random(n_ch, rng));
    std::vector<float> out(n_ch);
    kernels::conv1d_step(inputs.back().data(), state.data(), w.data(), out.data(), n_ch, k_size);
    for (int c = 0; c < n_ch; ++c) {
      double want = 0;  // tap k_size − 1 on this token, tap j on the token k_size − 1 − j back (zeros before 0)
      for (int j = 0; j < k_size; ++j) {  // w is tap-major: tap j of channel c at w[j·n_ch + c]
        const int src = t - (k_size - 1 - j);
        if (src >= 0) want += double(w[size_t(j) * n_ch + c]) * inputs[size_t(src)][size_t(c)];
      }
      EXPECT_NEAR(out[c], want, 1e-5) << "t " << t << " c " << c;
    }
  }
}

TEST(KernelsRecurrent, L2NormalizeAndGates) {
  std::vector<float> x = {3.0f, 4.0f};
  kernels::l2_normalize(x.data(), 2, 1e-6f);
  EXPECT_FLOAT_EQ(x[0], 0.6f);
  EXPECT_FLOAT_EQ(x[1], 0.8f);
  std::vector<float> z = {0.0f, 0.0f};
  kernels::l2_normalize(z.data(), 2, 1e-6f);  // max(‖x‖, eps): no division by zero
  EXPECT_EQ(z[0], 0.0f);
  EXPECT_FLOAT_EQ(kernels::softplus(0.0f), std::log(2.0f));
  EXPECT_EQ(kernels::softplus(30.0f), 30.0f);
  EXPECT_FLOAT_EQ(kernels::sigmoid(0.0f), 0.5f);
}

}  // namespace
}  // namespace ubatch::kernels
