// The recurrent mixers' kernels (kernels/recurrent.h): the gated delta rule's step against a
// double-precision transcription of its definition, and every SIMD path this build and CPU have
// against the scalar reference bit for bit (levels the CPU lacks are skipped with a printed line);
// the causal convolution step against its definition, with its rolling state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/quant.h"
#include "kernels/recurrent.h"

#if defined(UBATCH_X86_KERNELS)
namespace ubatch::kernels::avx2 {
void delta_rule_tokens(const DeltaRuleArgs& args);
void delta_rule_chunks(const DeltaRuleArgs& args);
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size);
void round_state_bf16(const float* x, uint16_t* out, int64_t n);
}
namespace ubatch::kernels::avx512 {
void delta_rule_tokens(const DeltaRuleArgs& args);
void delta_rule_chunks(const DeltaRuleArgs& args);
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size);
void round_state_bf16(const float* x, uint16_t* out, int64_t n);
}
namespace ubatch::kernels::avx512bf16 {
void delta_rule_tokens(const DeltaRuleArgs& args);
void delta_rule_chunks(const DeltaRuleArgs& args);
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size);
void round_state_bf16(const float* x, uint16_t* out, int64_t n);
}
#elif defined(UBATCH_ARM_KERNELS)
namespace ubatch::kernels::neon {
void delta_rule_tokens(const DeltaRuleArgs& args);
void delta_rule_chunks(const DeltaRuleArgs& args);
void conv1d_step(const float* in, float* state, const float* w, float* out, int64_t n_ch, int k_size);
void round_state_bf16(const float* x, uint16_t* out, int64_t n);
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
  if (cpu_features().avx512_bf16) out.emplace_back("avx512bf16", &avx512bf16::delta_rule_tokens);
  else std::printf("skipped level avx512bf16: CPU has no AVX512_BF16\n");
#elif defined(UBATCH_ARM_KERNELS)
  if (cpu_features().neon) out.emplace_back("neon", &neon::delta_rule_tokens);
  else std::printf("skipped level neon: CPU has no NEON\n");
#endif
  out.emplace_back("dispatched", &delta_rule_tokens);
  return out;
}

std::vector<std::pair<std::string, DeltaFn>> chunk_levels() {
  std::vector<std::pair<std::string, DeltaFn>> out;
#if defined(UBATCH_X86_KERNELS)
  if (cpu_features().avx2) out.emplace_back("avx2", &avx2::delta_rule_chunks);
  if (cpu_features().avx512) out.emplace_back("avx512", &avx512::delta_rule_chunks);
  if (cpu_features().avx512_bf16) out.emplace_back("avx512bf16", &avx512bf16::delta_rule_chunks);
#elif defined(UBATCH_ARM_KERNELS)
  if (cpu_features().neon) out.emplace_back("neon", &neon::delta_rule_chunks);
#endif
  out.emplace_back("dispatched", &delta_rule_chunks);
  return out;
}

using ConvFn = void (*)(const float*, float*, const float*, float*, int64_t, int);

std::vector<std::pair<std::string, ConvFn>> conv_levels() {
  std::vector<std::pair<std::string, ConvFn>> out;
#if defined(UBATCH_X86_KERNELS)
  if (cpu_features().avx2) out.emplace_back("avx2", &avx2::conv1d_step);
  if (cpu_features().avx512) out.emplace_back("avx512", &avx512::conv1d_step);
  if (cpu_features().avx512_bf16) out.emplace_back("avx512bf16", &avx512bf16::conv1d_step);
#elif defined(UBATCH_ARM_KERNELS)
  if (cpu_features().neon) out.emplace_back("neon", &neon::conv1d_step);
#endif
  out.emplace_back("dispatched", &conv1d_step);
  return out;
}

std::vector<float> rec_random(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Inputs of one head: q, k, v in [−1, 1] (normalise: q and k L2-normalised per token and q scaled
// by 1/√d_k, as the model makes them), decays and rates from the ranges given; token r is row
// 2r + 1 of arrays of 2T rows.
struct DeltaInputs {
  int d_k = 0, d_v = 0, T = 0;
  std::vector<float> q, k, v, decay, beta;
  std::vector<int32_t> rows;
  DeltaInputs(int dk, int dv, int n_tokens, std::mt19937& rng, float dec_lo, float dec_hi, float beta_lo, float beta_hi,
              bool normalise = true)
      : d_k(dk), d_v(dv), T(n_tokens) {
    q = rec_random(size_t(2 * T) * d_k, rng);
    k = rec_random(size_t(2 * T) * d_k, rng);
    v = rec_random(size_t(2 * T) * d_v, rng);
    decay = rec_random(size_t(2 * T), rng, dec_lo, dec_hi);
    beta = rec_random(size_t(2 * T), rng, beta_lo, beta_hi);
    for (int r = 0; r < 2 * T && normalise; ++r) {
      l2_normalize(&q[size_t(r) * d_k], d_k, 1e-6f);
      l2_normalize(&k[size_t(r) * d_k], d_k, 1e-6f);
      for (int i = 0; i < d_k; ++i) q[size_t(r) * d_k + i] /= std::sqrt(float(d_k));
    }
    for (int r = 0; r < T; ++r) rows.push_back(2 * r + 1);
  }
  // Tokens [t0, t0 + n) of the sequence.
  DeltaRuleArgs args(float* S, float* o, float* const* snaps, int t0, int n) const {
    DeltaRuleArgs a;
    a.S = S;
    a.d_k = d_k;
    a.d_v = d_v;
    a.n_tokens = n;
    a.rows = rows.data() + t0;
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
    a.snapshots = snaps ? snaps + t0 : nullptr;
    return a;
  }
};

// The definition in double over tokens [0, T) from S0: S ← decay S; u = β (v − Sᵀk);
// S ← S + k uᵀ; o = Sᵀq. o: [2T, d_v] (the tokens' rows), S: the state after the last token,
// snap: after token snap_at (if any).
struct DeltaDefinition {
  std::vector<double> o, S, snap;
  DeltaDefinition(const DeltaInputs& in, const std::vector<float>& S0, int snap_at = -1)
      : o(size_t(2 * in.T) * in.d_v, 0.0), S(S0.begin(), S0.end()) {
    const int d_k = in.d_k, d_v = in.d_v;
    for (int r = 0; r < in.T; ++r) {
      const size_t row = size_t(in.rows[size_t(r)]);
      std::vector<double> u(d_v);
      for (double& s : S) s *= in.decay[row];
      for (int j = 0; j < d_v; ++j) {
        double sk = 0;
        for (int i = 0; i < d_k; ++i) sk += S[size_t(i) * d_v + j] * in.k[row * d_k + i];
        u[j] = in.beta[row] * (in.v[row * d_v + j] - sk);
      }
      for (int i = 0; i < d_k; ++i)
        for (int j = 0; j < d_v; ++j) S[size_t(i) * d_v + j] += in.k[row * d_k + i] * u[j];
      for (int j = 0; j < d_v; ++j)
        for (int i = 0; i < d_k; ++i) o[row * d_v + j] += S[size_t(i) * d_v + j] * in.q[row * d_k + i];
      if (r == snap_at) snap = S;
    }
  }
};

// Five tokens through the same state, for head sizes with and without a partial strip: the
// definition in double; every level bit for bit against the reference, one call over the tokens
// (rows picked out of a larger array, with snapshots) and one call per token alike.
TEST(KernelsRecurrent, DeltaRuleMatchesItsDefinitionAndEveryLevelTheReference) {
  std::mt19937 rng(7);
  const int T = 5;
  for (auto [d_k, d_v] : {std::pair{32, 32}, std::pair{128, 128}, std::pair{16, 72}, std::pair{64, 5}}) {
    SCOPED_TRACE(std::to_string(d_k) + "x" + std::to_string(d_v));
    const std::vector<float> S0 = rec_random(size_t(d_k) * d_v, rng, -0.5f, 0.5f);
    DeltaInputs in(d_k, d_v, T, rng, 0.0f, 1.0f, 0.0f, 1.0f, false);
    for (int r = 0; r < T; ++r) {
      in.decay[size_t(in.rows[size_t(r)])] = 0.5f + 0.1f * r;
      in.beta[size_t(in.rows[size_t(r)])] = 0.3f + 0.1f * r;
    }
    // The reference over the tokens, with a snapshot after token 2.
    std::vector<float> Sr = S0, o_ref(size_t(2 * T) * d_v), snap(S0.size());
    std::vector<float*> snaps(T, nullptr);
    snaps[2] = snap.data();
    ref::delta_rule_tokens(in.args(Sr.data(), o_ref.data(), snaps.data(), 0, T));
    const DeltaDefinition def(in, S0, 2);
    for (int r = 0; r < T; ++r)
      for (int j = 0; j < d_v; ++j) {
        const size_t x = size_t(in.rows[size_t(r)]) * d_v + j;
        EXPECT_NEAR(o_ref[x], def.o[x], 1e-4 * (1 + std::fabs(def.o[x]))) << "token " << r << " j " << j;
      }
    for (size_t i = 0; i < snap.size(); ++i) ASSERT_NEAR(snap[i], def.snap[i], 1e-4 * (1 + std::fabs(def.snap[i])));
    for (size_t i = 0; i < Sr.size(); ++i) ASSERT_NEAR(Sr[i], def.S[i], 1e-4 * (1 + std::fabs(def.S[i]))) << "S " << i;
    for (const auto& [name, fn] : delta_levels()) {
      std::vector<float> S = S0, o(o_ref.size()), sn(S0.size());
      std::vector<float*> sp(T, nullptr);
      sp[2] = sn.data();
      fn(in.args(S.data(), o.data(), sp.data(), 0, T));
      EXPECT_TRUE(o == o_ref) << name << ": output differs from the reference";
      EXPECT_TRUE(S == Sr) << name << ": state differs from the reference";
      EXPECT_TRUE(sn == snap) << name << ": snapshot differs from the reference";
      // Token by token: the same bits.
      std::vector<float> S1 = S0, o1(o_ref.size());
      for (int r = 0; r < T; ++r) fn(in.args(S1.data(), o1.data(), nullptr, r, 1));
      EXPECT_TRUE(o1 == o_ref && S1 == Sr) << name << ": one call per token differs from one call over the tokens";
    }
  }
}

// The chunk-wise form against the step-by-step one over 8 chunks from a random state, in the
// regimes that stress it: decays near 0 (Γ underflows within a chunk) and near 1 (nothing
// forgotten), rates near 0 and near 1 (the forward substitution's off-diagonal terms largest),
// head sizes with a partial strip and a key size that is no multiple of the pass B rows. Both
// are also measured against the definition in double: the chunk-wise error must be of the order
// of the step-wise one. Measured worst |chunk − step| / (1 + |step|) over outputs and states:
// 5.6e-7 (decays near 1 at head size 128, where nothing is forgotten and the state grows; 7e-9
// to 3.5e-7 elsewhere). The tolerance, 5e-6, is ten times that; a decay factor off by one token makes the
// difference 3e-3 or more in every regime.
TEST(KernelsRecurrent, DeltaRuleChunksAgreeWithTheStepsWithinTolerance) {
  std::mt19937 rng(11);
  struct Regime {
    const char* name;
    float dec_lo, dec_hi, beta_lo, beta_hi;
  };
  const Regime regimes[] = {{"mixed", 0.05f, 1.0f, 0.0f, 1.0f},
                            {"decay near 0", 0.0f, 0.02f, 0.0f, 1.0f},
                            {"decay near 1", 0.995f, 1.0f, 0.0f, 1.0f},
                            {"beta near 0", 0.5f, 1.0f, 0.0f, 0.02f},
                            {"beta near 1", 0.9f, 1.0f, 0.98f, 1.0f}};
  const int T = 8 * kDeltaChunk;
  for (auto [d_k, d_v] : {std::pair{128, 128}, std::pair{16, 72}, std::pair{36, 5}}) {
    for (const Regime& g : regimes) {
      SCOPED_TRACE(std::to_string(d_k) + "x" + std::to_string(d_v) + " " + g.name);
      const DeltaInputs in(d_k, d_v, T, rng, g.dec_lo, g.dec_hi, g.beta_lo, g.beta_hi);
      const std::vector<float> S0 = rec_random(size_t(d_k) * d_v, rng, -0.5f, 0.5f);
      std::vector<float> Ss = S0, Sc = S0, os(size_t(2 * T) * d_v), oc(os.size());
      ref::delta_rule_tokens(in.args(Ss.data(), os.data(), nullptr, 0, T));
      ref::delta_rule_chunks(in.args(Sc.data(), oc.data(), nullptr, 0, T));
      const DeltaDefinition def(in, S0);
      const std::vector<double>& od = def.o;
      const std::vector<double>& Sd = def.S;
      double worst_cs = 0, worst_c = 0, worst_s = 0;
      auto rel = [](double a, double b) { return std::fabs(a - b) / (1 + std::fabs(b)); };
      for (size_t i = 0; i < os.size(); ++i) {
        worst_cs = std::max(worst_cs, rel(oc[i], os[i]));
        worst_c = std::max(worst_c, rel(oc[i], od[i]));
        worst_s = std::max(worst_s, rel(os[i], od[i]));
      }
      for (size_t i = 0; i < Ss.size(); ++i) {
        worst_cs = std::max(worst_cs, rel(Sc[i], Ss[i]));
        worst_c = std::max(worst_c, rel(Sc[i], Sd[i]));
        worst_s = std::max(worst_s, rel(Ss[i], Sd[i]));
      }
      std::printf("%dx%d %-13s chunk-step %.2e  chunk-exact %.2e  step-exact %.2e\n", d_k, d_v, g.name, worst_cs,
                  worst_c, worst_s);
      EXPECT_LT(worst_cs, 5e-6);
      EXPECT_LT(worst_c, 5e-6);
      EXPECT_LT(worst_c, 10 * worst_s + 1e-6) << "the chunk-wise form is much less accurate than the steps";
    }
  }
}

// Every level computes the reference's bits, with rows picked out of a larger array and
// snapshots at chunk ends; and a sequence's chunks give the same bits whether they come in one
// call, one per call, or grouped unevenly.
TEST(KernelsRecurrent, DeltaRuleChunksSameBitsAtEveryLevelAndGrouping) {
  std::mt19937 rng(5);
  const int n_chunks = 5, T = n_chunks * kDeltaChunk;
  for (auto [d_k, d_v] : {std::pair{128, 128}, std::pair{16, 72}, std::pair{36, 5}}) {
    SCOPED_TRACE(std::to_string(d_k) + "x" + std::to_string(d_v));
    const DeltaInputs in(d_k, d_v, T, rng, 0.05f, 1.0f, 0.0f, 1.0f);
    const std::vector<float> S0 = rec_random(size_t(d_k) * d_v, rng, -0.5f, 0.5f);
    std::vector<float> Sr = S0, o_ref(size_t(2 * T) * d_v), snap(S0.size());
    std::vector<float*> snaps(T, nullptr);
    snaps[2 * kDeltaChunk - 1] = snap.data();
    ref::delta_rule_chunks(in.args(Sr.data(), o_ref.data(), snaps.data(), 0, T));
    {  // the snapshot is the state after the first two chunks
      std::vector<float> S2 = S0, o2(o_ref.size());
      ref::delta_rule_chunks(in.args(S2.data(), o2.data(), nullptr, 0, 2 * kDeltaChunk));
      EXPECT_TRUE(S2 == snap) << "snapshot is not the state after its chunk";
    }
    for (const auto& [name, fn] : chunk_levels()) {
      std::vector<float> S = S0, o(o_ref.size()), sn(S0.size());
      std::vector<float*> sp(T, nullptr);
      sp[2 * kDeltaChunk - 1] = sn.data();
      fn(in.args(S.data(), o.data(), sp.data(), 0, T));
      EXPECT_TRUE(o == o_ref) << name << ": output differs from the reference";
      EXPECT_TRUE(S == Sr) << name << ": state differs from the reference";
      EXPECT_TRUE(sn == snap) << name << ": snapshot differs from the reference";
      for (const std::vector<int>& groups : {std::vector<int>{1, 1, 1, 1, 1}, std::vector<int>{2, 3}, std::vector<int>{4, 1}}) {
        std::vector<float> S1 = S0, o1(o_ref.size());
        int c0 = 0;
        for (int g : groups) {
          fn(in.args(S1.data(), o1.data(), nullptr, c0 * kDeltaChunk, g * kDeltaChunk));
          c0 += g;
        }
        EXPECT_TRUE(o1 == o_ref && S1 == Sr) << name << ": chunks grouped into calls differently give other bits";
      }
    }
  }
}

// A BF16 state (DeltaRuleArgs::S_bf16): the state is rounded to BF16 each time it is stored —
// after every token step by step, after every chunk chunk-wise — and the outputs use the
// unrounded values. So one call over the tokens equals the F32 kernel run one token (or one
// chunk) per call with the state rounded between calls, bit for bit; every level gives the
// reference's bits however the tokens are grouped into calls; snapshots are the stored state.
// Against the F32 state over 53 tokens (decays in [0.05, 1]) the outputs stay close: measured
// worst |bf16 − f32| / (1 + |f32|) is printed (3.7e-5 to 3.1e-4); the bound is ten times that.
// A second pass scales v by 1e-38, so that the state's values are subnormal floats, which the
// rounding (simd16.h, AVX512_BF16's rule) turns into signed zeros on every level.
namespace {
// The state's rounding rule written out: NaN quieted, subnormals to a signed zero, else to
// nearest even.
uint16_t state_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x40);
  if ((x & 0x7F800000u) == 0) return uint16_t((x >> 16) & 0x8000);
  const uint32_t r = x + 0x7FFFu + ((x >> 16) & 1u);
  return uint16_t(r >> 16);
}
}  // namespace

// The rounding itself (round_state_bf16, the vocabularies' store_bf16) at every level against
// the rule written out above, on the values where rules differ: NaNs of both signs (quiet and
// signalling payloads), infinities, signed zeros, subnormals (to a signed zero), the smallest
// normal, ties to even both ways, values just off a tie, the largest finite (to infinity), and
// random values; 37 of them, so the last group of 16 is partial.
TEST(KernelsRecurrent, Bf16RoundingRuleAtEveryLevel) {
  std::vector<uint32_t> bits = {0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0xFF812345u, 0x7F800000u, 0xFF800000u,
                                0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00400000u, 0x00800000u,
                                0x80800000u, 0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x3F808001u, 0xBF808000u,
                                0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F7F8000u, 0x0080FFFFu, 0x00808000u};
  std::mt19937 rng(31);
  while (bits.size() < 37) bits.push_back(static_cast<uint32_t>(rng()));
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * 4);
  std::vector<uint16_t> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = state_bf16(x[i]);
  using RoundFn = void (*)(const float*, uint16_t*, int64_t);
  std::vector<std::pair<std::string, RoundFn>> levels = {{"reference", &ref::round_state_bf16},
                                                         {"dispatched", &round_state_bf16}};
#if defined(UBATCH_X86_KERNELS)
  if (cpu_features().avx2) levels.emplace_back("avx2", &avx2::round_state_bf16);
  if (cpu_features().avx512) levels.emplace_back("avx512", &avx512::round_state_bf16);
  if (cpu_features().avx512_bf16) levels.emplace_back("avx512bf16", &avx512bf16::round_state_bf16);
  else std::printf("skipped level avx512bf16: CPU has no AVX512_BF16\n");
#elif defined(UBATCH_ARM_KERNELS)
  if (cpu_features().neon) levels.emplace_back("neon", &neon::round_state_bf16);
#endif
  for (const auto& [name, fn] : levels) {
    std::vector<uint16_t> got(x.size() + 1, 0xABCD);  // one guard word past the end
    fn(x.data(), got.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << name << ": input 0x" << std::hex << bits[i];
    EXPECT_EQ(got.back(), 0xABCD) << name << ": wrote past the end";
  }
}

TEST(KernelsRecurrent, Bf16StateIsTheF32StateRoundedAfterEachStore) {
  std::mt19937 rng(23);
  auto to_bf16 = [](const std::vector<float>& x) {
    std::vector<uint16_t> b(x.size());
    for (size_t i = 0; i < x.size(); ++i) b[i] = state_bf16(x[i]);
    return b;
  };
  auto round_bf16 = [](std::vector<float>& x) {
    for (float& f : x) f = bf16_to_fp32(state_bf16(f));
  };
  auto widen = [](const std::vector<uint16_t>& b) {
    std::vector<float> x(b.size());
    for (size_t i = 0; i < b.size(); ++i) x[i] = bf16_to_fp32(b[i]);
    return x;
  };
  auto bf16_args = [](const DeltaInputs& in, uint16_t* S, float* o, uint16_t* const* snaps, int t0, int n) {
    DeltaRuleArgs a = in.args(nullptr, o, nullptr, t0, n);
    a.S_bf16 = S;
    a.snapshots_bf16 = snaps ? snaps + t0 : nullptr;
    return a;
  };
  const int n_chunks = 3, T = n_chunks * kDeltaChunk + 5;
  for (const float scale : {1.0f, 1e-38f})
  for (auto [d_k, d_v] : {std::pair{128, 128}, std::pair{16, 72}, std::pair{36, 5}, std::pair{37, 48}}) {
    SCOPED_TRACE(std::to_string(d_k) + "x" + std::to_string(d_v) + " scale " + std::to_string(scale));
    DeltaInputs in(d_k, d_v, T, rng, 0.05f, 1.0f, 0.0f, 1.0f);
    for (float& x : in.v) x *= scale;
    std::vector<float> S0f = rec_random(size_t(d_k) * d_v, rng, -0.5f, 0.5f);
    for (float& x : S0f) x *= scale;
    const std::vector<uint16_t> S0 = to_bf16(S0f);
    if (scale < 1.0f) {  // the subnormal pass must meet subnormals
      std::vector<float> S = widen(S0), o(size_t(2 * T) * d_v);
      ref::delta_rule_tokens(in.args(S.data(), o.data(), nullptr, 0, 1));
      int subnormal = 0;
      for (float x : S) subnormal += x != 0.0f && std::fabs(x) < 1.17549435e-38f;
      EXPECT_GT(subnormal, 0) << "no subnormal state values to round";
    }
    // Step by step: one reference call over all T tokens, a snapshot after token 2.
    std::vector<uint16_t> Sr = S0, snap(S0.size());
    std::vector<float> o_ref(size_t(2 * T) * d_v);
    std::vector<uint16_t*> snaps(T, nullptr);
    snaps[2] = snap.data();
    ref::delta_rule_tokens(bf16_args(in, Sr.data(), o_ref.data(), snaps.data(), 0, T));
    {  // the F32 kernel one token per call, the state rounded after each
      std::vector<float> S = widen(S0), o(o_ref.size());
      for (int r = 0; r < T; ++r) {
        ref::delta_rule_tokens(in.args(S.data(), o.data(), nullptr, r, 1));
        round_bf16(S);
        if (r == 2) {
          EXPECT_TRUE(S == widen(snap)) << "the snapshot is not the state after its token";
        }
      }
      EXPECT_TRUE(o == o_ref) << "outputs differ from the F32 steps with the state rounded between them";
      EXPECT_TRUE(S == widen(Sr)) << "state differs from the F32 steps with the state rounded between them";
      // Against the F32 state throughout.
      std::vector<float> Sf = widen(S0), of(o_ref.size());
      ref::delta_rule_tokens(in.args(Sf.data(), of.data(), nullptr, 0, T));
      double worst = 0;
      for (size_t i = 0; i < of.size(); ++i) worst = std::max(worst, std::fabs(double(o_ref[i]) - of[i]) / (1 + std::fabs(of[i])));
      if (scale == 1.0f) {
        std::printf("%dx%d bf16 state: worst output difference from the f32 state %.2e\n", d_k, d_v, worst);
        EXPECT_LT(worst, 3e-3);
      }
    }
    for (const auto& [name, fn] : delta_levels()) {
      std::vector<uint16_t> S = S0, sn(S0.size());
      std::vector<float> o(o_ref.size());
      std::vector<uint16_t*> sp(T, nullptr);
      sp[2] = sn.data();
      fn(bf16_args(in, S.data(), o.data(), sp.data(), 0, T));
      EXPECT_TRUE(o == o_ref && S == Sr && sn == snap) << name << ": differs from the reference";
      std::vector<uint16_t> S1 = S0;
      std::vector<float> o1(o_ref.size());
      for (int r = 0; r < T; ++r) fn(bf16_args(in, S1.data(), o1.data(), nullptr, r, 1));
      EXPECT_TRUE(o1 == o_ref && S1 == Sr) << name << ": one call per token differs from one call over the tokens";
    }
    // Chunk-wise over the first n_chunks chunks, a snapshot at the second chunk's end.
    const int TC = n_chunks * kDeltaChunk;
    std::vector<uint16_t> Sc = S0, csnap(S0.size());
    std::vector<float> oc(o_ref.size());
    std::vector<uint16_t*> csnaps(TC, nullptr);
    csnaps[2 * kDeltaChunk - 1] = csnap.data();
    ref::delta_rule_chunks(bf16_args(in, Sc.data(), oc.data(), csnaps.data(), 0, TC));
    {
      std::vector<float> S = widen(S0), o(oc.size());
      for (int c = 0; c < n_chunks; ++c) {
        ref::delta_rule_chunks(in.args(S.data(), o.data(), nullptr, c * kDeltaChunk, kDeltaChunk));
        round_bf16(S);
        if (c == 1) {
          EXPECT_TRUE(S == widen(csnap)) << "the snapshot is not the state after its chunk";
        }
      }
      EXPECT_TRUE(o == oc && S == widen(Sc)) << "chunks differ from the F32 chunks with the state rounded between them";
    }
    for (const auto& [name, fn] : chunk_levels()) {
      std::vector<uint16_t> S = S0, sn(S0.size());
      std::vector<float> o(oc.size());
      std::vector<uint16_t*> sp(TC, nullptr);
      sp[2 * kDeltaChunk - 1] = sn.data();
      fn(bf16_args(in, S.data(), o.data(), sp.data(), 0, TC));
      EXPECT_TRUE(o == oc && S == Sc && sn == csnap) << name << ": chunk-wise differs from the reference";
      std::vector<uint16_t> S1 = S0;
      std::vector<float> o1(oc.size());
      fn(bf16_args(in, S1.data(), o1.data(), nullptr, 0, kDeltaChunk));
      fn(bf16_args(in, S1.data(), o1.data(), nullptr, kDeltaChunk, 2 * kDeltaChunk));
      EXPECT_TRUE(o1 == oc && S1 == Sc) << name << ": chunks grouped into calls differently give other bits";
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

// Every level computes the scalar reference's bits (a product then an add per tap), for channel
// counts with and without a partial group of 16 and kernel sizes 1 to 4, out aliasing in.
TEST(KernelsRecurrent, ConvolutionStepSameBitsAtEveryLevel) {
  std::mt19937 rng(9);
  for (int n_ch : {16, 300, 6144})
    for (int k_size : {1, 2, 3, 4}) {
      SCOPED_TRACE(std::to_string(n_ch) + " channels, kernel " + std::to_string(k_size));
      const std::vector<float> w = rec_random(size_t(n_ch) * k_size, rng);
      std::vector<std::vector<float>> inputs;
      for (int t = 0; t < 5; ++t) inputs.push_back(rec_random(n_ch, rng));
      std::vector<float> ref_state(size_t(k_size - 1) * n_ch, 0.0f);
      std::vector<std::vector<float>> ref_out;
      for (const std::vector<float>& x : inputs) {
        ref_out.emplace_back(n_ch);
        ref::conv1d_step(x.data(), ref_state.data(), w.data(), ref_out.back().data(), n_ch, k_size);
      }
      for (const auto& [name, fn] : conv_levels()) {
        std::vector<float> state(size_t(k_size - 1) * n_ch, 0.0f);
        bool same = true;
        for (size_t t = 0; t < inputs.size(); ++t) {
          std::vector<float> x = inputs[t];
          fn(x.data(), state.data(), w.data(), x.data(), n_ch, k_size);  // out aliases in
          same = same && x == ref_out[t];
        }
        EXPECT_TRUE(same && state == ref_state) << name << ": differs from the reference";
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
