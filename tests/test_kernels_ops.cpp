// Element-wise and per-row ops: the scalar references against double-precision formulas, and
// every SIMD path this build and CPU have (AVX2, AVX-512 or NEON, and the dispatched one) against the references
// bit for bit (one arithmetic on every level: ops_inl.h over the vocabularies of simd16.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "kernels/ops_inl.h"
#include "kernels/simd16_scalar.h"

// The per-ISA entry points behind the dispatch (ops_avx2.cpp, ops_avx512.cpp, ops_neon.cpp),
// so that every path is tested whatever UBATCH_SIMD says.
#if defined(UBATCH_X86_KERNELS)
namespace ubatch::kernels::avx2 {
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
void softmax(float* x, int64_t n);
void gelu_tanh(const float* x, float* y, int64_t n);
void silu(const float* x, float* y, int64_t n);
void softcap(const float* x, float* y, int64_t n, float cap);
}  // namespace ubatch::kernels::avx2
namespace ubatch::kernels::avx512 {
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
void softmax(float* x, int64_t n);
void gelu_tanh(const float* x, float* y, int64_t n);
void silu(const float* x, float* y, int64_t n);
void softcap(const float* x, float* y, int64_t n, float cap);
}  // namespace ubatch::kernels::avx512
#elif defined(UBATCH_ARM_KERNELS)
namespace ubatch::kernels::neon {
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
void softmax(float* x, int64_t n);
void gelu_tanh(const float* x, float* y, int64_t n);
void silu(const float* x, float* y, int64_t n);
void softcap(const float* x, float* y, int64_t n, float cap);
}  // namespace ubatch::kernels::neon
#endif

namespace ubatch::kernels {
namespace {

struct OpsImpl {
  std::string name;
  void (*rms_norm)(const float*, const float*, float*, int64_t, float);
  void (*softmax)(float*, int64_t);
  void (*gelu_tanh)(const float*, float*, int64_t);
  void (*silu)(const float*, float*, int64_t);
  void (*softcap)(const float*, float*, int64_t, float) = nullptr;
};

// The SIMD implementations this CPU can run (the dispatched one always).
std::vector<OpsImpl> simd_impls() {
  std::vector<OpsImpl> impls;
  impls.push_back({"dispatched", &kernels::rms_norm, &kernels::softmax, &kernels::gelu_tanh,
                   &kernels::silu, &kernels::softcap});
#if defined(UBATCH_X86_KERNELS)
  if (cpu_features().avx2)
    impls.push_back({"avx2", &avx2::rms_norm, &avx2::softmax, &avx2::gelu_tanh, &avx2::silu, &avx2::softcap});
  if (cpu_features().avx512)
    impls.push_back(
        {"avx512", &avx512::rms_norm, &avx512::softmax, &avx512::gelu_tanh, &avx512::silu, &avx512::softcap});
#elif defined(UBATCH_ARM_KERNELS)
  if (cpu_features().neon)
    impls.push_back({"neon", &neon::rms_norm, &neon::softmax, &neon::gelu_tanh, &neon::silu, &neon::softcap});
#endif
  return impls;
}

const std::vector<int64_t> kSizes = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 640, 2048, 4099};

std::vector<float> random_vec(int64_t n, uint64_t seed, float lo = -4.0f, float hi = 4.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// |a − b| <= rel·|b| + abs_tol, element by element.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, double rel,
                  double abs_tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  int reported = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    const bool ok = d <= rel * std::fabs(static_cast<double>(b[i])) + abs_tol ||
                    (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];
    if (!ok && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << " of " << a.size() << ": " << a[i]
                    << " vs " << b[i];
  }
}

// Equal bits, or both NaN (a NaN's payload is not part of the contract).
bool same(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}

void expect_same(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  int reported = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i]) && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << " of " << a.size() << ": " << a[i] << " vs "
                    << b[i] << " (not the same bits)";
}

// Inputs that stress the edges: signed zeros, subnormals, the exp clamps, huge, ±inf, NaN.
std::vector<float> special_values() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float den = std::numeric_limits<float>::denorm_min();
  std::vector<float> v = {0.0f,    -0.0f,   den,      -den,     1e-40f,  -1e-40f, 1e-30f,
                          -1e-30f, 1e-8f,   -1e-8f,   0.125f,   -0.125f, 0.17f,   -0.17f,
                          1.0f,    -1.0f,   9.0f,     -9.0f,    44.0f,   -44.0f,  87.3f,
                          -87.3f,  88.7f,   -88.7f,   89.0f,    -89.0f,  103.9f,  -103.9f,
                          104.0f,  -104.0f, 150.0f,   -150.0f,  1e30f,   -1e30f,  3.4e38f,
                          -3.4e38f, inf,    -inf,     nan};
  return v;
}

TEST(KernelsOps, HasSimd) {
  // Not an assertion on the hardware: records which paths these tests exercised.
  std::printf("simd level: %s (avx2 %d, avx512 %d, neon %d)\n", simd_level_name(simd_level()),
              cpu_features().avx2, cpu_features().avx512, cpu_features().neon);
}

TEST(KernelsOps, RmsNormRefMatchesDoubleFormula) {
  for (int64_t n : kSizes) {
    const std::vector<float> x = random_vec(n, 1 + n);
    const std::vector<float> w = random_vec(n, 2 + n, 0.5f, 1.5f);
    std::vector<float> y(static_cast<size_t>(n)), expect(static_cast<size_t>(n));
    double ss = 0.0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-5);
    for (size_t i = 0; i < x.size(); ++i) expect[i] = static_cast<float>(x[i] * s * w[i]);
    ref::rms_norm(x.data(), w.data(), y.data(), n, 1e-5f);
    expect_close(y, expect, 3e-7, 0.0, "rms_norm n=" + std::to_string(n));
  }
}

TEST(KernelsOps, RmsNormSimdMatchesRef) {
  for (const OpsImpl& impl : simd_impls()) {
    for (int64_t n : kSizes) {
      const std::vector<float> x = random_vec(n, 10 + n, -20.0f, 20.0f);
      const std::vector<float> w = random_vec(n, 20 + n);
      for (const float* wp : {w.data(), static_cast<const float*>(nullptr)}) {
        std::vector<float> y(static_cast<size_t>(n)), expect(static_cast<size_t>(n));
        ref::rms_norm(x.data(), wp, expect.data(), n, 1e-6f);
        impl.rms_norm(x.data(), wp, y.data(), n, 1e-6f);
        expect_same(y, expect, impl.name + " rms_norm n=" + std::to_string(n));
        // In place (y aliases x).
        std::vector<float> inplace = x;
        impl.rms_norm(inplace.data(), wp, inplace.data(), n, 1e-6f);
        EXPECT_EQ(inplace, y) << impl.name << " in place, n=" << n;
      }
    }
  }
}

// Rows of special values (zeros, subnormals, huge, inf, NaN), every length 1..40: the same
// bits as the reference on every level.
TEST(KernelsOps, RmsNormSpecialRowsSameBits) {
  const std::vector<float> sv = special_values();
  for (const OpsImpl& impl : simd_impls()) {
    for (int64_t n = 1; n <= 40; ++n) {
      std::vector<std::vector<float>> rows;
      rows.push_back(std::vector<float>(static_cast<size_t>(n), 0.0f));
      rows.push_back(std::vector<float>(static_cast<size_t>(n), std::numeric_limits<float>::denorm_min()));
      rows.push_back(std::vector<float>(static_cast<size_t>(n), 1e30f));
      std::vector<float> mixed(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) mixed[static_cast<size_t>(i)] = sv[static_cast<size_t>(i * 7 % 36)];
      rows.push_back(mixed);
      mixed[static_cast<size_t>(n / 2)] = sv[sv.size() - 1 - static_cast<size_t>(n % 3)];  // inf/NaN
      rows.push_back(mixed);
      const std::vector<float> w = random_vec(n, 90 + n);
      for (const std::vector<float>& x : rows) {
        std::vector<float> y(x.size()), expect(x.size());
        ref::rms_norm(x.data(), w.data(), expect.data(), n, 1e-5f);
        impl.rms_norm(x.data(), w.data(), y.data(), n, 1e-5f);
        expect_same(y, expect, impl.name + " rms_norm special n=" + std::to_string(n));
      }
    }
  }
}

TEST(KernelsOps, RopeKnownValues) {
  // One head of 4 dims, n_rot 4, base 10000, pos 1: pair 0 turns by 1 rad, pair 1 by 0.01.
  const float c0 = static_cast<float>(std::cos(1.0)), s0 = static_cast<float>(std::sin(1.0));
  const float c1 = static_cast<float>(std::cos(0.01)), s1 = static_cast<float>(std::sin(0.01));
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  rope(x.data(), 1, 4, 4, 1, 10000.0f, 1.0f, RopeStyle::Normal);  // pairs (0,1), (2,3)
  EXPECT_FLOAT_EQ(x[0], 1.0f * c0 - 2.0f * s0);
  EXPECT_FLOAT_EQ(x[1], 1.0f * s0 + 2.0f * c0);
  EXPECT_FLOAT_EQ(x[2], 3.0f * c1 - 4.0f * s1);
  EXPECT_FLOAT_EQ(x[3], 3.0f * s1 + 4.0f * c1);

  x = {1.0f, 2.0f, 3.0f, 4.0f};
  rope(x.data(), 1, 4, 4, 1, 10000.0f, 1.0f, RopeStyle::NeoX);  // pairs (0,2), (1,3)
  EXPECT_FLOAT_EQ(x[0], 1.0f * c0 - 3.0f * s0);
  EXPECT_FLOAT_EQ(x[2], 1.0f * s0 + 3.0f * c0);
  EXPECT_FLOAT_EQ(x[1], 2.0f * c1 - 4.0f * s1);
  EXPECT_FLOAT_EQ(x[3], 2.0f * s1 + 4.0f * c1);
}

TEST(KernelsOps, RopeProperties) {
  const int n_head = 3, head_dim = 64;
  const std::vector<float> x0 = random_vec(n_head * head_dim, 5);
  for (RopeStyle style : {RopeStyle::Normal, RopeStyle::NeoX}) {
    // pos 0 is the identity.
    std::vector<float> x = x0;
    rope(x.data(), n_head, head_dim, head_dim, 0, 10000.0f, 1.0f, style);
    EXPECT_EQ(x, x0);
    // Dispatched and reference agree exactly.
    x = x0;
    std::vector<float> r = x0;
    rope(x.data(), n_head, head_dim, head_dim, 1234, 1e6f, 1.0f, style);
    ref::rope(r.data(), n_head, head_dim, head_dim, 1234, 1e6f, 1.0f, style);
    EXPECT_EQ(x, r);
    // A rotation keeps each head's norm.
    for (int h = 0; h < n_head; ++h) {
      double a = 0, b = 0;
      for (int d = 0; d < head_dim; ++d) {
        a += std::pow(x0[static_cast<size_t>(h * head_dim + d)], 2);
        b += std::pow(x[static_cast<size_t>(h * head_dim + d)], 2);
      }
      EXPECT_NEAR(a, b, 1e-4 * a);
    }
    // Partial rotation (n_rot < head_dim) leaves the other dims alone.
    x = x0;
    rope(x.data(), n_head, head_dim, 32, 77, 10000.0f, 1.0f, style);
    for (int h = 0; h < n_head; ++h)
      for (int d = 32; d < head_dim; ++d)
        EXPECT_EQ(x[static_cast<size_t>(h * head_dim + d)],
                  x0[static_cast<size_t>(h * head_dim + d)]);
    // freq_scale scales the position: (pos 40, scale 0.25) == (pos 10, scale 1).
    std::vector<float> a = x0, b = x0;
    rope(a.data(), n_head, head_dim, head_dim, 40, 10000.0f, 0.25f, style);
    rope(b.data(), n_head, head_dim, head_dim, 10, 10000.0f, 1.0f, style);
    EXPECT_EQ(a, b);
  }
}

TEST(KernelsOps, RopeMatchesDoubleFormula) {
  const int head_dim = 128;
  const int32_t pos = 5000;
  const std::vector<float> x0 = random_vec(head_dim, 6);
  for (RopeStyle style : {RopeStyle::Normal, RopeStyle::NeoX}) {
    std::vector<float> x = x0, expect(x0.size());
    rope(x.data(), 1, head_dim, head_dim, pos, 10000.0f, 1.0f, style);
    for (int i = 0; i < head_dim / 2; ++i) {
      const double theta = pos * std::pow(10000.0, -2.0 * i / head_dim);
      const int i0 = style == RopeStyle::Normal ? 2 * i : i;
      const int i1 = style == RopeStyle::Normal ? 2 * i + 1 : i + head_dim / 2;
      expect[static_cast<size_t>(i0)] =
          static_cast<float>(x0[static_cast<size_t>(i0)] * std::cos(theta) -
                             x0[static_cast<size_t>(i1)] * std::sin(theta));
      expect[static_cast<size_t>(i1)] =
          static_cast<float>(x0[static_cast<size_t>(i0)] * std::sin(theta) +
                             x0[static_cast<size_t>(i1)] * std::cos(theta));
    }
    expect_close(x, expect, 0.0, 2e-6, "rope");
  }
}

TEST(KernelsOps, SoftmaxRefMatchesDoubleFormula) {
  for (int64_t n : kSizes) {
    std::vector<float> x = random_vec(n, 30 + n, -30.0f, 30.0f);
    std::vector<float> expect(x.size());
    double mx = -1e300, sum = 0.0;
    for (float v : x) mx = std::max(mx, static_cast<double>(v));
    for (float v : x) sum += std::exp(v - mx);
    for (size_t i = 0; i < x.size(); ++i) expect[i] = static_cast<float>(std::exp(x[i] - mx) / sum);
    ref::softmax(x.data(), n);
    // x − max is rounded to float first, so tiny probabilities (e^-40) carry ~|x − max|·2^-24
    // relative error: checked to 1e-6 relative plus 1e-9 absolute.
    expect_close(x, expect, 1e-6, 1e-9, "softmax n=" + std::to_string(n));
  }
}

TEST(KernelsOps, SoftmaxSimdMatchesRef) {
  for (const OpsImpl& impl : simd_impls()) {
    for (int64_t n : kSizes) {
      for (float range : {1.0f, 30.0f, 200.0f}) {
        std::vector<float> x = random_vec(n, 40 + n, -range, range);
        std::vector<float> expect = x;
        ref::softmax(expect.data(), n);
        impl.softmax(x.data(), n);
        expect_same(x, expect,
                    impl.name + " softmax n=" + std::to_string(n) + " range " +
                        std::to_string(range));
        double sum = 0.0;
        for (float v : x) sum += v;
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
    }
  }
}

TEST(KernelsOps, SoftmaxSpecialRowsSameBits) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> sv = special_values();
  for (const OpsImpl& impl : simd_impls()) {
    for (int64_t n = 1; n <= 40; ++n) {
      std::vector<float> x(static_cast<size_t>(n));
      // Finite specials (zeros, subnormals, ±1e30, ±3.4e38) and -inf (masked entries).
      for (int64_t i = 0; i < n; ++i) {
        const float v = sv[static_cast<size_t>(i * 5 % 36)];
        x[static_cast<size_t>(i)] = i % 4 == 3 ? -inf : v;
      }
      for (const std::vector<float>& row : {x, std::vector<float>(x.size(), 7.0f)}) {
        std::vector<float> y = row, expect = row;
        ref::softmax(expect.data(), n);
        impl.softmax(y.data(), n);
        expect_same(y, expect, impl.name + " softmax special n=" + std::to_string(n));
      }
    }
  }
}

TEST(KernelsOps, SoftmaxEdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const OpsImpl& impl : simd_impls()) {
    std::vector<float> one = {123.0f};
    impl.softmax(one.data(), 1);
    EXPECT_EQ(one[0], 1.0f);
    // Large values are stable (max subtracted); -inf gets probability 0.
    std::vector<float> x = {1000.0f, 999.0f, -inf, 1000.0f, -inf, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    impl.softmax(x.data(), static_cast<int64_t>(x.size()));
    const double z = 2.0 + std::exp(-1.0);
    EXPECT_NEAR(x[0], 1.0 / z, 1e-6) << impl.name;
    EXPECT_NEAR(x[1], std::exp(-1.0) / z, 1e-6) << impl.name;
    EXPECT_EQ(x[2], 0.0f);
    EXPECT_EQ(x[4], 0.0f);
    EXPECT_EQ(x[5], 0.0f);  // e^-1000 underflows
  }
}

// 0.5x(1 + tanh(u)) written as x / (1 + e^(−2u)): the same function, without the
// cancellation that makes the tanh form lose all digits for x < −5 even in double.
double gelu_double(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1.0 + std::exp(-2.0 * u));
}
double gelu_exp_arg(double x) { return 2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x); }
double silu_double(double x) { return x / (1.0 + std::exp(-x)); }
double silu_exp_arg(double x) { return x; }

using Unary = void (*)(const float*, float*, int64_t);

// Against the double-precision function. The exponent's argument a is itself rounded to
// float (relative error 2^-24), so e^a carries ~|a|·2^-24 relative error in any float
// implementation: the bound is 1e-6 + |a|·2.4e-7 relative (about 4 ulps of a).
void check_unary_vs_double(Unary f, double (*truth)(double), double (*exp_arg)(double),
                           const std::string& name) {
  std::vector<float> x;
  for (float v = -12.0f; v <= 12.0f; v += 0.00731f) x.push_back(v);
  std::vector<float> y(x.size());
  f(x.data(), y.data(), static_cast<int64_t>(x.size()));
  int reported = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double expect = truth(x[i]);
    const double rel = 1e-6 + std::fabs(exp_arg(x[i])) * 2.4e-7;
    if (std::fabs(y[i] - expect) > rel * std::fabs(expect) + 1e-37 && reported++ < 5)
      ADD_FAILURE() << name << ": x=" << x[i] << ": " << y[i] << " vs " << expect;
  }
}

// Soft-capping: cap·tanh(x/cap) against double precision, bounded by the cap, odd, and the same
// bits on every level (in place and not, every tail length).
TEST(KernelsOps, SoftcapMatchesDoubleAndIsBitIdenticalAcrossLevels) {
  for (float cap : {3.0f, 5.0f, 30.0f, 50.0f}) {
    std::vector<float> x;
    for (float v = -400.0f; v <= 400.0f; v += 0.0917f) x.push_back(v);
    std::vector<float> y(x.size());
    ref::softcap(x.data(), y.data(), static_cast<int64_t>(x.size()), cap);
    for (size_t i = 0; i < x.size(); ++i) {
      const double expect = cap * std::tanh(static_cast<double>(x[i]) / cap);
      ASSERT_NEAR(y[i], expect, 4e-6 * cap) << "cap " << cap << " x " << x[i];
      ASSERT_LE(std::fabs(y[i]), cap);
    }
  }
  for (const OpsImpl& impl : simd_impls()) {
    for (int64_t n : kSizes) {
      const std::vector<float> x = random_vec(n, 90 + n, -60.0f, 60.0f);
      std::vector<float> y(x.size()), expect(x.size());
      ref::softcap(x.data(), expect.data(), n, 5.0f);
      impl.softcap(x.data(), y.data(), n, 5.0f);
      expect_same(y, expect, impl.name + " softcap n=" + std::to_string(n));
      std::vector<float> inplace = x;
      impl.softcap(inplace.data(), inplace.data(), n, 5.0f);
      EXPECT_EQ(inplace, y);
    }
  }
}

// Frequency factors divide each pair's angle; mscale multiplies cos and sin; the defaults are
// plain RoPE bit for bit.
TEST(KernelsOps, RopeAnglesWithFactorsAndScale) {
  const int n_rot = 64, half = n_rot / 2;
  std::vector<float> factors(half);
  for (int i = 0; i < half; ++i) factors[i] = 1.0f + 0.25f * static_cast<float>((i * 7) % 29);
  std::vector<float> c0(half), s0(half), c1(half), s1(half), c2(half), s2(half);
  rope_angles(1234, n_rot, 500000.0f, 1.0f, c0.data(), s0.data());
  std::vector<float> ones(half, 1.0f);
  rope_angles(1234, n_rot, 500000.0f, 1.0f, c1.data(), s1.data(), ones.data(), 1.0f);
  EXPECT_EQ(c0, c1);
  EXPECT_EQ(s0, s1);
  rope_angles(1234, n_rot, 500000.0f, 1.0f, c2.data(), s2.data(), factors.data(), 1.118034f);
  for (int i = 0; i < half; ++i) {
    const double theta = 1234.0 * std::pow(500000.0, -2.0 * i / n_rot) / factors[i];
    EXPECT_NEAR(c2[i], std::cos(theta) * 1.118034, 1e-6) << i;
    EXPECT_NEAR(s2[i], std::sin(theta) * 1.118034, 1e-6) << i;
  }
}

TEST(KernelsOps, GeluAndSiluRefMatchDoubleFormula) {
  check_unary_vs_double(&ref::gelu_tanh, &gelu_double, &gelu_exp_arg, "ref gelu");
  check_unary_vs_double(&ref::silu, &silu_double, &silu_exp_arg, "ref silu");
}

TEST(KernelsOps, GeluAndSiluSimdMatchRef) {
  for (const OpsImpl& impl : simd_impls()) {
    check_unary_vs_double(impl.gelu_tanh, &gelu_double, &gelu_exp_arg,
                          impl.name + " gelu vs double");
    check_unary_vs_double(impl.silu, &silu_double, &silu_exp_arg, impl.name + " silu vs double");
    for (int64_t n : kSizes) {
      for (float range : {2.0f, 20.0f, 150.0f}) {
        const std::vector<float> x = random_vec(n, 50 + n, -range, range);
        std::vector<float> y(x.size()), expect(x.size());
        ref::gelu_tanh(x.data(), expect.data(), n);
        impl.gelu_tanh(x.data(), y.data(), n);
        expect_same(y, expect, impl.name + " gelu n=" + std::to_string(n));
        ref::silu(x.data(), expect.data(), n);
        impl.silu(x.data(), y.data(), n);
        expect_same(y, expect, impl.name + " silu n=" + std::to_string(n));
        // In place.
        std::vector<float> inplace = x;
        impl.silu(inplace.data(), inplace.data(), n);
        EXPECT_EQ(inplace, y);
      }
    }
  }
}

// An element's result depends on its value only, not on its index or the row length: an op
// over [n_tokens, n] at once equals the op on each element alone (batch invariance).
TEST(KernelsOps, ElementwiseResultsDoNotDependOnPosition) {
  for (const OpsImpl& impl : simd_impls()) {
    const std::vector<float> x = random_vec(37, 60, -10.0f, 10.0f);
    std::vector<float> all(x.size());
    for (Unary f : {impl.gelu_tanh, impl.silu}) {
      f(x.data(), all.data(), static_cast<int64_t>(x.size()));
      for (size_t i = 0; i < x.size(); ++i) {
        float one = 0.0f;
        f(&x[i], &one, 1);
        EXPECT_EQ(one, all[i]) << impl.name << " element " << i;
      }
    }
  }
}

TEST(KernelsOps, ExtremeInputs) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {-inf, -1e30f, -200.0f, -88.0f, -0.0f, 0.0f, 1e-30f,
                                88.0f, 200.0f, 1e30f, inf};
  for (const OpsImpl& impl : simd_impls()) {
    std::vector<float> y(x.size()), expect(x.size());
    for (Unary f : {impl.silu, impl.gelu_tanh}) {
      const Unary r = f == impl.silu ? &ref::silu : &ref::gelu_tanh;
      f(x.data(), y.data(), static_cast<int64_t>(x.size()));
      r(x.data(), expect.data(), static_cast<int64_t>(x.size()));
      expect_same(y, expect, impl.name + " extreme inputs");
      for (size_t i = 1; i + 1 < x.size(); ++i)  // ±inf: inf/inf is NaN in any form
        EXPECT_TRUE(std::isfinite(y[i])) << impl.name << " x=" << x[i];
    }
  }
}

// Every special value at every position of rows 1..40 long (tails of the 16-lane slices).
TEST(KernelsOps, GeluAndSiluSpecialValuesSameBits) {
  const std::vector<float> sv = special_values();
  for (const OpsImpl& impl : simd_impls()) {
    for (int64_t n = 1; n <= 40; ++n) {
      for (size_t shift = 0; shift < sv.size(); shift += 5) {
        std::vector<float> x(static_cast<size_t>(n));
        for (size_t i = 0; i < x.size(); ++i) x[i] = sv[(i + shift) % sv.size()];
        std::vector<float> y(x.size()), expect(x.size());
        for (auto [f, r, name] : {std::tuple{impl.gelu_tanh, &ref::gelu_tanh, "gelu"},
                                  std::tuple{impl.silu, &ref::silu, "silu"}}) {
          r(x.data(), expect.data(), n);
          f(x.data(), y.data(), n);
          expect_same(y, expect, impl.name + " " + name + " special n=" + std::to_string(n));
        }
      }
    }
  }
}

// The shared exponential and tanh (ops_inl.h, scalar vocabulary — every level computes the
// same bits, as the tests above check through the ops): accuracy against double, and the
// edges the kernels rely on (e^-inf = e^-104 = 0 exactly: padding lanes add nothing).
TEST(KernelsOps, ExpAndTanhAccuracy) {
  using V = scalar::Simd16;
  auto exp1 = [](float x) { return simd16::exp1<V>(x); };
  auto tanh1 = [](float x) { return V::lane0(simd16::tanh<V>(V::set1(x))); };
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp1(0.0f), 1.0f);
  EXPECT_EQ(exp1(-0.0f), 1.0f);
  EXPECT_EQ(exp1(-inf), 0.0f);
  EXPECT_EQ(exp1(-104.0f), 0.0f);
  EXPECT_EQ(exp1(inf), inf);
  EXPECT_EQ(exp1(89.0f), inf);
  EXPECT_TRUE(std::isnan(exp1(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(tanh1(0.0f), 0.0f);
  EXPECT_EQ(tanh1(20.0f), 1.0f);
  EXPECT_EQ(tanh1(-20.0f), -1.0f);
  EXPECT_EQ(tanh1(inf), 1.0f);
  EXPECT_EQ(tanh1(-inf), -1.0f);
  EXPECT_TRUE(std::isnan(tanh1(std::numeric_limits<float>::quiet_NaN())));
  // Relative error in units of 2^-24 (half an ulp at the top of a binade).
  double worst_exp = 0.0, worst_tanh = 0.0;
  for (float x = -87.0f; x <= 88.0f; x += 0.00731f) {
    const double e = std::exp(static_cast<double>(x));
    worst_exp = std::max(worst_exp, std::fabs(exp1(x) - e) / e * 0x1p24);
  }
  for (float x = -10.0f; x <= 10.0f; x += 0.000731f) {
    const double t = std::tanh(static_cast<double>(x));
    if (t != 0.0) worst_tanh = std::max(worst_tanh, std::fabs(tanh1(x) - t) / std::fabs(t) * 0x1p24);
  }
  // Subnormal results: absolute error within the subnormal spacing.
  for (float x = -103.0f; x <= -87.5f; x += 0.0123f)
    ASSERT_NEAR(exp1(x), std::exp(static_cast<double>(x)), 0x1p-149) << x;
  std::printf("exp: worst %.2f, tanh: worst %.2f (units of 2^-24 relative)\n", worst_exp, worst_tanh);
  EXPECT_LE(worst_exp, 2.5);
  EXPECT_LE(worst_tanh, 8.0);
}

TEST(KernelsOps, MulAddScaleAreExact) {
  for (int64_t n : kSizes) {
    const std::vector<float> a = random_vec(n, 70 + n), b = random_vec(n, 80 + n);
    std::vector<float> y(a.size());
    mul(a.data(), b.data(), y.data(), n);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(y[i], a[i] * b[i]);
    add(a.data(), b.data(), y.data(), n);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(y[i], a[i] + b[i]);
    scale(a.data(), 0.37f, y.data(), n);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(y[i], a[i] * 0.37f);
    std::vector<float> z = a;  // aliasing
    add(z.data(), b.data(), z.data(), n);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(z[i], a[i] + b[i]);
  }
}

}  // namespace
}  // namespace ubatch::kernels
