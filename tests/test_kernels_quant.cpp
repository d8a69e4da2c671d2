// Block formats: fp16/bf16 conversion, quantize/dequantize round trips, and SIMD
// dequantization against the scalar reference (bit for bit).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/tensor_type.h"
#include "kernels/cpu_features.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"
#include "kernel_test_data.h"

namespace ubatch::kernels {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(fp16_to_fp32(0x03FF), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(bits(fp16_to_fp32(0x8000)), 0x80000000u);          // -0
  EXPECT_EQ(fp16_to_fp32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16_to_fp32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7E00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7C01)));  // signalling NaN stays NaN

  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7BFF);  // below the midpoint to 65536
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // the midpoint rounds to even: infinity
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xFC00);
  const uint16_t nan = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  // Ties to even, normal and subnormal.
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
}

TEST(Fp16, AllHalvesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) << h;
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), h) << "half 0x" << std::hex << h;
  }
}

// Every float rounds to the nearest half (ties to the even one), checked against its two
// neighbours.
TEST(Fp16, RoundsToNearestEven) {
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns from the subnormal range of half up to past its overflow.
    const uint32_t u = 0x33000000u + rng() % (0x47800000u - 0x33000000u);
    const float f = from_bits(u | (rng() & 1 ? 0x80000000u : 0));
    const uint16_t h = fp32_to_fp16(f);
    const float a = std::fabs(f);
    const uint16_t m = h & 0x7FFF;
    if (m == 0x7C00) {  // overflow: only values at or past the midpoint 65520
      ASSERT_GE(a, 65520.0f) << f;
      continue;
    }
    const double v = fp16_to_fp32(m);
    const double err = std::fabs(a - v);
    if (m > 0) {
      ASSERT_LE(err, std::fabs(a - double(fp16_to_fp32(m - 1)))) << f;
    }
    const double up = m + 1 == 0x7C00 ? 65536.0 : double(fp16_to_fp32(m + 1));
    const double err_up = std::fabs(a - up);
    ASSERT_LE(err, err_up) << f;
    if (err == err_up) {
      ASSERT_EQ(m & 1, 0) << "tie not to even for " << f;
    }
    ASSERT_EQ(h & 0x8000, f < 0 ? 0x8000 : 0);
  }
}

// The compiler's own binary16 conversion is an independent oracle where it exists: _Float16
// (GCC on x86-64), __fp16 (AArch64, IEEE format; FCVT rounds to nearest even).
#if defined(__FLT16_MAX__) && !defined(__aarch64__)
#define UBATCH_TEST_HALF _Float16
#elif defined(__aarch64__)
#define UBATCH_TEST_HALF __fp16
#endif
#if defined(UBATCH_TEST_HALF)
TEST(Fp16, MatchesCompilerFloat16) {
  std::mt19937 rng(2);
  for (int i = 0; i < 200000; ++i) {
    const float f = from_bits(rng());
    if (std::isnan(f)) continue;
    const UBATCH_TEST_HALF c = static_cast<UBATCH_TEST_HALF>(f);
    uint16_t ch;
    std::memcpy(&ch, &c, 2);
    ASSERT_EQ(fp32_to_fp16(f), ch) << f;
  }
}
#endif

TEST(Fp16, SimdQuantizeMatchesScalar) {
#if !defined(UBATCH_X86_KERNELS)
  GTEST_SKIP() << "SKIPPED: the SIMD f16 conversion is x86-64 AVX2 code, not in this build (scalar here)";
#else
  if (!cpu_features().avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(9);
  std::vector<float> x(100003);
  for (auto& v : x) v = from_bits(rng());  // every class: normal, subnormal, inf, NaN
  x[0] = 65520.0f;
  x[1] = std::ldexp(1.0f, -25);
  x[2] = 3 * std::ldexp(1.0f, -25);
  x[3] = from_bits(0x7F800001);  // signalling NaN
  x[4] = -0.0f;
  std::vector<uint16_t> a(x.size()), b(x.size());
  for (size_t i = 0; i < x.size(); ++i) a[i] = fp32_to_fp16(x[i]);
  detail::quantize_row_f16_avx2(x.data(), b.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(a[i], b[i]) << "bits 0x" << std::hex << bits(x[i]);
  quantize_row(TensorType::F16, x.data(), b.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(a, b);
#endif
}

TEST(Bf16, ConversionsAndRounding) {
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0xC040), -3.0f);
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808000)), 0x3F80);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F818000)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808001)), 0x3F81);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7F7FFFFF)), 0x7F80);  // rounds up to infinity
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00010000)), 0x0001);  // subnormal kept
  EXPECT_EQ(bf16_to_fp32(0x0001), from_bits(0x00010000));
  const uint16_t nan = fp32_to_bf16(from_bits(0x7F800001));  // payload only in the low bits
  EXPECT_TRUE(std::isnan(bf16_to_fp32(nan)));
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(fp32_to_bf16(f), h);
    }
  }
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

TEST(Quantize, Q8_0RoundTrip) {
  const int64_t n = 32 * 40;
  std::vector<float> x = random_floats(n, 3, 2.0f);
  x[5] = 0.0f;
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;  // an all-zero block
  std::vector<uint8_t> q(tensor_row_bytes(TensorType::Q8_0, n));
  quantize_row(TensorType::Q8_0, x.data(), q.data(), n);
  std::vector<float> y(n);
  dequantize_row(TensorType::Q8_0, q.data(), y.data(), n);
  const auto* b = reinterpret_cast<const detail::BlockQ8_0*>(q.data());
  for (int64_t i = 0; i < n / 32; ++i) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[i * 32 + j]));
    const float d = fp16_to_fp32(b[i].d);
    EXPECT_NEAR(d, amax / 127, amax / 127 * 1e-3 + 1e-30);
    for (int j = 0; j < 32; ++j) {
      ASSERT_GE(b[i].qs[j], -127);
      ASSERT_NEAR(y[i * 32 + j], x[i * 32 + j], 0.5f * d + 127 * std::fabs(d - amax / 127) + 1e-7f);
      ASSERT_EQ(y[i * 32 + j], static_cast<float>(b[i].qs[j]) * d);
    }
  }
  for (int i = 64; i < 96; ++i) EXPECT_EQ(y[i], 0.0f);
}

TEST(Quantize, Q8_KBlockSumsAndBounds) {
  const int64_t n = 256 * 3;
  const std::vector<float> x = random_floats(n, 4, 0.1f);
  std::vector<uint8_t> q(tensor_row_bytes(TensorType::Q8_K, n));
  ASSERT_EQ(q.size(), 3 * sizeof(detail::BlockQ8_K));
  quantize_row(TensorType::Q8_K, x.data(), q.data(), n);
  const auto* b = reinterpret_cast<const detail::BlockQ8_K*>(q.data());
  for (int i = 0; i < 3; ++i) {
    float amax = 0;
    for (int j = 0; j < 256; ++j) amax = std::fmax(amax, std::fabs(x[i * 256 + j]));
    EXPECT_FLOAT_EQ(b[i].d, amax / 127);
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += b[i].qs[16 * j + l];
      EXPECT_EQ(b[i].bsums[j], s);
    }
    for (int j = 0; j < 256; ++j)
      ASSERT_LE(std::fabs(b[i].d * b[i].qs[j] - x[i * 256 + j]), 0.5f * b[i].d * (1 + 1e-5f));
  }
}

TEST(Quantize, FloatFormatsRoundTrip) {
  const int64_t n = 1000;
  const std::vector<float> x = random_floats(n, 5, 3.0f);
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
    std::vector<uint8_t> q(tensor_row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    std::vector<float> y(n);
    dequantize_row(t, q.data(), y.data(), n);
    const float rel = t == TensorType::F32 ? 0.0f : t == TensorType::F16 ? 0x1p-11f : 0x1p-8f;
    for (int64_t i = 0; i < n; ++i)
      ASSERT_LE(std::fabs(y[i] - x[i]), rel * std::fabs(x[i]) + 1e-7f) << tensor_type_name(t);
  }
}

TEST(Quantize, Capabilities) {
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0,
                       TensorType::Q8_K})
    EXPECT_TRUE(can_quantize(t));
  EXPECT_FALSE(can_quantize(TensorType::Q4_K));
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q4_0,
                       TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
                       TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                       TensorType::Q6_K})
    EXPECT_TRUE(can_dequantize(t));
  EXPECT_FALSE(can_dequantize(TensorType::Q8_K));
  EXPECT_FALSE(can_dequantize(TensorType::I32));
}


[[maybe_unused]] std::vector<uint8_t> random_row(TensorType t, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> data(tensor_row_bytes(t, n));
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  if (t == TensorType::F16 || t == TensorType::BF16) {
    auto* h = reinterpret_cast<uint16_t*>(data.data());
    for (int64_t i = 0; i < n; ++i) h[i] = t == TensorType::F16 ? fp32_to_fp16(ud(rng)) : fp32_to_bf16(ud(rng));
  }
  const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(t));
  for (int64_t b = 0; b < n / tr->block_size; ++b)
    for (int off : half_fields(t)) {
      const uint16_t h = fp32_to_fp16(ud(rng) * 0.01f);
      std::memcpy(data.data() + b * tr->type_size + off, &h, 2);
    }
  return data;
}

const TensorType kDequantTypes[] = {TensorType::F16, TensorType::BF16, TensorType::Q4_0,
                                    TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                    TensorType::Q8_0, TensorType::Q2_K, TensorType::Q3_K,
                                    TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

TEST(Dequantize, SimdMatchesScalarBitForBit) {
#if !defined(UBATCH_X86_KERNELS)
  GTEST_SKIP() << "SKIPPED: the SIMD dequantizers are x86-64 AVX2 code, not in this build (scalar here)";
#else
  if (!cpu_features().avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  for (TensorType t : kDequantTypes) {
    const int64_t n = 256 * 5;
    const std::vector<uint8_t> row = random_row(t, n, 7);
    std::vector<float> a(n), b(n);
    detail::dequantize_row_scalar(t, row.data(), a.data(), n);
    detail::dequantize_row_avx2(t, row.data(), b.data(), n);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0) << tensor_type_name(t);
    dequantize_row(t, row.data(), b.data(), n);  // the dispatched entry point
    EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0) << tensor_type_name(t);
  }
  // Odd lengths of the plain types exercise the scalar tails.
  for (TensorType t : {TensorType::F16, TensorType::BF16}) {
    const std::vector<uint8_t> row = random_row(t, 13, 8);
    std::vector<float> a(13), b(13);
    detail::dequantize_row_scalar(t, row.data(), a.data(), 13);
    detail::dequantize_row_avx2(t, row.data(), b.data(), 13);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 13 * 4), 0);
  }
#endif
}

// Hand-built blocks with known values: the layouts as the GGUF spec describes them.
TEST(Dequantize, KnownBlocks) {
  {
    detail::BlockQ4_0 b{};
    b.d = fp32_to_fp16(0.5f);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    float y[32];
    dequantize_row(TensorType::Q4_0, &b, y, 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], 0.5f * (j - 8));
      EXPECT_EQ(y[j + 16], 0.5f * (7 - j));
    }
  }
  {
    detail::BlockQ5_1 b{};
    b.d = fp32_to_fp16(2.0f);
    b.m = fp32_to_fp16(-1.0f);
    const uint32_t qh = 0x80000001u;  // fifth bit of elements 0 and 31
    std::memcpy(b.qh, &qh, 4);
    float y[32];
    dequantize_row(TensorType::Q5_1, &b, y, 32);
    EXPECT_EQ(y[0], 2.0f * 16 - 1.0f);
    EXPECT_EQ(y[1], -1.0f);
    EXPECT_EQ(y[31], 2.0f * 16 - 1.0f);
  }
  {
    detail::BlockQ4_K b{};
    b.d = fp32_to_fp16(1.0f);
    b.dmin = fp32_to_fp16(0.25f);
    // Sub-block 1: scale 3 (scales[1] & 63), min 2 (scales[5] & 63).
    // Sub-block 5: scale low 4 bits from scales[9], high 2 bits from scales[1] >> 6.
    b.scales[1] = 3 | (1 << 6);
    b.scales[5] = 2;
    b.scales[9] = 0x07;
    for (int l = 0; l < 32; ++l) b.qs[l] = 0x50;     // elements 32..63 (sub-block 1): 5
    for (int l = 0; l < 32; ++l) b.qs[64 + l] = 0x90;  // elements 160..191 (sub-block 5): 9
    float y[256];
    dequantize_row(TensorType::Q4_K, &b, y, 256);
    EXPECT_EQ(y[40], 3.0f * 5 - 0.25f * 2);
    EXPECT_EQ(y[170], float(7 | (1 << 4)) * 9);
    EXPECT_EQ(y[0], 0.0f);
  }
  {
    detail::BlockQ6_K b{};
    b.d = fp32_to_fp16(0.5f);
    for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s - 8);
    for (auto& v : b.ql) v = 0xFF;
    // Element 128 + 64 + 3 (half 1, c = 2, l = 3): high bits (qh[32 + 3] >> 4) & 3.
    b.qh[35] = 2 << 4;
    float y[256];
    dequantize_row(TensorType::Q6_K, &b, y, 256);
    EXPECT_EQ(y[195], 0.5f * float(8 + 4 - 8) * float((15 | (2 << 4)) - 32));
    EXPECT_EQ(y[0], 0.5f * float(0 - 8) * float(15 - 32));
  }
}

}  // namespace
}  // namespace ubatch::kernels
