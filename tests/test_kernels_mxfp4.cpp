// MXFP4 (GGUF type 39; OCP Microscaling Formats v1.0) against its definition: hand-built blocks
// with every code and edge exponents (e = 0 and 1: denormal float scales; 127, 128; 253..255:
// overflow), the nibble order (halves, not interleaved), and the exact packed copy the matmul
// kernels read (packed_weight.h) and where it declines. Every kernel level against the
// definition: test_kernels_matmul.cpp and test_kernels_gemm.cpp (MXFP4 is in their type lists).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/tensor_type.h"
#include "kernels/packed_weight.h"
#include "kernels/quant.h"

namespace ubatch::kernels {
namespace {

// One block: exponent e, codes c[0..32) (nibbles), laid out as the format says.
std::vector<uint8_t> mx_block(uint8_t e, const uint8_t* c) {
  std::vector<uint8_t> b(17);
  b[0] = e;
  for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>((c[j] & 15) | ((c[j + 16] & 15) << 4));
  return b;
}

// The definition, in double: k[n] · 2^(e − 128).
double mx_value(uint8_t e, uint8_t nibble) {
  static const int k[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  return k[nibble] * std::ldexp(1.0, int{e} - 128);
}

TEST(KernelsMxfp4, TypeTraits) {
  const TensorTypeTraits* tr = tensor_type_traits(39);
  ASSERT_NE(tr, nullptr);
  EXPECT_EQ(tr->name, "MXFP4");
  EXPECT_EQ(tr->block_size, 32);
  EXPECT_EQ(tr->type_size, 17);
  EXPECT_EQ(tensor_row_bytes(TensorType::MXFP4, 256), 136u);
  EXPECT_TRUE(can_dequantize(TensorType::MXFP4));
}

TEST(KernelsMxfp4, DequantizeMatchesTheDefinition) {
  uint8_t codes[32];
  for (int j = 0; j < 32; ++j) codes[j] = static_cast<uint8_t>((j * 7 + 3) % 16);  // every code, both halves
  for (int e : {0, 1, 2, 100, 119, 126, 127, 128, 129, 140, 200, 252}) {
    const std::vector<uint8_t> b = mx_block(static_cast<uint8_t>(e), codes);
    float out[32];
    dequantize_row(TensorType::MXFP4, b.data(), out, 32);
    for (int j = 0; j < 32; ++j) {
      const double want = mx_value(static_cast<uint8_t>(e), codes[j]);
      EXPECT_EQ(static_cast<double>(out[j]), want) << "e " << e << " weight " << j;  // exact in f32
    }
  }
  // e = 128: the codes themselves; weight j from the low nibble, j + 16 from the high one.
  uint8_t two[32] = {};
  two[0] = 7;    // 12
  two[16] = 15;  // −12
  two[5] = 9;    // −1
  const std::vector<uint8_t> b = mx_block(128, two);
  EXPECT_EQ(b[1], 0xF7);
  float out[32];
  dequantize_row(TensorType::MXFP4, b.data(), out, 32);
  EXPECT_EQ(out[0], 12.0f);
  EXPECT_EQ(out[16], -12.0f);
  EXPECT_EQ(out[5], -1.0f);
  EXPECT_EQ(out[1], 0.0f);
  // Code 8 is zero (a signed zero in E2M1, read as 0).
  EXPECT_EQ(mxfp4_code(8), 0);
  // e = 0 and 1: float denormal scales, still exact.
  const std::vector<uint8_t> d0 = mx_block(0, two);
  dequantize_row(TensorType::MXFP4, d0.data(), out, 32);
  EXPECT_EQ(out[5], -std::ldexp(1.0f, -128));
  EXPECT_EQ(out[0], 12 * std::ldexp(1.0f, -128));
  // e >= 253: 12 · 2^125 and up overflow float32 (the loader refuses such weights).
  const std::vector<uint8_t> big = mx_block(254, two);
  dequantize_row(TensorType::MXFP4, big.data(), out, 32);
  EXPECT_TRUE(std::isinf(out[0]));
  EXPECT_EQ(out[5], -std::ldexp(1.0f, 126));
}

// The packed layout keeps MXFP4 as u = code + 12 with the block scale as f16: exact for every
// scale an f16 holds (2^-24 .. 2^15, and 0 for an all-zero block whatever its e), refused for
// the others (the model keeps those weights as F32).
TEST(KernelsMxfp4, PacksExactlyOrDeclines) {
  uint8_t codes[32];
  for (int j = 0; j < 32; ++j) codes[j] = static_cast<uint8_t>((j * 5 + 1) % 16);
  for (int e = 0; e < 256; ++e) {
    // Two blocks: the second all-zero codes (any e) always fits.
    std::vector<uint8_t> src = mx_block(static_cast<uint8_t>(e), codes);
    const uint8_t zeros[32] = {0, 8, 0, 8};
    const std::vector<uint8_t> z = mx_block(static_cast<uint8_t>(255 - e), zeros);
    src.insert(src.end(), z.begin(), z.end());
    EXPECT_EQ(mxfp4_block_scale(z.data()), 0.0f);
    EXPECT_EQ(mxfp4_block_scale(src.data()), std::ldexp(1.0f, e - 128));
    const bool expect_ok = e - 128 >= -24 && e - 128 <= 15;
    EXPECT_EQ(mxfp4_scales_fit_f16(src.data(), 64), expect_ok) << "e " << e;
    auto pw = pack_weight(TensorType::MXFP4, src.data(), 64, 1);
    EXPECT_EQ(pw.is_ok(), expect_ok) << "e " << e;
    if (!pw.is_ok()) {
      EXPECT_NE(pw.message().find("MXFP4 block scale"), std::string::npos) << pw.message();
      continue;
    }
    float a[64], b[64];
    dequantize_row(TensorType::MXFP4, src.data(), a, 64);
    packed_dequantize_row(**pw, 0, b);
    EXPECT_EQ(std::memcmp(a, b, sizeof(a)), 0) << "e " << e;
  }
}

}  // namespace
}  // namespace ubatch::kernels
