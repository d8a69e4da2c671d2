// Block formats: scalar reference dequantization and quantization, fp16/bf16 conversion, and
// the run-time dispatch to the SIMD dequantizers (quant_avx2.cpp; x86-64 builds only — other
// architectures use the scalar code, which is not on a hot path: embedding rows and KV writes).
#include "kernels/quant.h"

#include <cmath>
#include <cstring>

#include "common/status.h"
#include "kernels/cpu_features.h"
#include "kernels/quant_blocks.h"

namespace ubatch::kernels {

namespace {

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

// IEEE 754 binary16 -> binary32 (exact).
float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) {  // inf, or NaN: payload kept and quieted (as the hardware conversion does)
    return bits_f32(sign | 0x7F800000 | (mant << 13) | (mant ? 0x400000u : 0u));
  }
  if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in binary32.
  const float v = static_cast<float>(mant) * 0x1p-24f;
  return sign ? -v : v;
}

// binary32 -> binary16, round to nearest even; overflow gives inf, NaN stays a (quiet) NaN.
uint16_t fp32_to_fp16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7FFFFFFF;
  if (ax > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00 | ((ax >> 13) & 0x3FF));
  if (ax >= 0x38800000) {  // normal in binary16 (|f| >= 2^-14), or overflow
    uint32_t r = ax - 0x38000000;  // rebias the exponent from 127 to 15
    r = (r + 0x0FFF + ((r >> 13) & 1)) >> 13;
    if (r >= 0x7C00) return static_cast<uint16_t>(sign | 0x7C00);
    return static_cast<uint16_t>(sign | r);
  }
  // Subnormal (or zero) in binary16: round mant24 * 2^(e - 126) to an integer, ties to even.
  const uint32_t e = ax >> 23;
  if (e < 102) return sign;  // below half of the smallest subnormal (also float subnormals)
  const uint32_t mant24 = (ax & 0x7FFFFF) | 0x800000;
  const uint32_t shift = 126 - e;  // 14 .. 24
  uint32_t q = mant24 >> shift;
  const uint32_t rem = mant24 & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  return static_cast<uint16_t>(sign | q);
}

float bf16_to_fp32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x0040);
  return static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

namespace detail {

namespace {

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((b[i].qs[j] & 0x0F) - 8) * d;
      y[j + 16] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(b[i].qs[j] & 0x0F) * d + m;
      y[j + 16] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
    }
  }
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void dequant_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (b[i].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

void dequant_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (b[i].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
    }
  }
}

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void dequant_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = b[i].qs + 32 * h;
      for (int j = 0; j < 4; ++j) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = b[i].scales[8 * h + 2 * j + half];
          const float dl = d * static_cast<float>(sc & 0x0F);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l)
            *y++ = dl * static_cast<float>((q[16 * half + l] >> (2 * j)) & 3) - ml;
        }
      }
    }
  }
}

void dequant_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = b[i].qs + 32 * h;
      for (int j = 0; j < 4; ++j) {
        const uint8_t m = static_cast<uint8_t>(1u << (4 * h + j));
        for (int half = 0; half < 2; ++half) {
          const float dl = d * static_cast<float>(q3k_scale(b[i].scales, 8 * h + 2 * j + half));
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int v = ((q[l] >> (2 * j)) & 3) - ((b[i].hmask[l] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    for (int j = 0; j < 4; ++j) {
      uint8_t sc, mn;
      k4_scale_min(b[i].scales, 2 * j, sc, mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      k4_scale_min(b[i].scales, 2 * j + 1, sc, mn);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
      const uint8_t* q = b[i].qs + 32 * j;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    for (int j = 0; j < 4; ++j) {
      uint8_t sc, mn;
      k4_scale_min(b[i].scales, 2 * j, sc, mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      k4_scale_min(b[i].scales, 2 * j + 1, sc, mn);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
      const uint8_t* q = b[i].qs + 32 * j;
      const uint8_t* qh = b[i].qh;
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] & 0x0F) | (((qh[l] >> (2 * j)) & 1) << 4);
        *y++ = d1 * static_cast<float>(v) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4);
        *y++ = d2 * static_cast<float>(v) - m2;
      }
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const uint8_t* qh = b[i].qh + 32 * h;
      const int8_t* sc = b[i].scales + 8 * h;
      for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t lb = ql[l + 32 * (c & 1)];
          const int low = c < 2 ? (lb & 0x0F) : (lb >> 4);
          const int q = low | (((qh[l] >> (2 * c)) & 3) << 4);
          const float dl = d * static_cast<float>(sc[2 * c + l / 16]);
          *y++ = dl * static_cast<float>(q - 32);
        }
      }
    }
  }
}

// MXFP4: weight j of a block = k[low nibble of qs[j]], weight j + 16 = k[high nibble], times
// 2^(e − 128) (kernels/quant.h).
void dequant_mxfp4(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 17, y += 32) {
    const int exp2 = int{b[0]} - 128;
    for (int j = 0; j < 16; ++j) {
      y[j] = std::ldexp(static_cast<float>(mxfp4_code(b[1 + j] & 0x0F)), exp2);
      y[j + 16] = std::ldexp(static_cast<float>(mxfp4_code(b[1 + j] >> 4)), exp2);
    }
  }
}

}  // namespace

void dequantize_row_scalar(TensorType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case TensorType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case TensorType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
      return;
    }
    case TensorType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
      return;
    }
    case TensorType::Q4_0: return dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, n / kQK);
    case TensorType::Q4_1: return dequant_q4_1(static_cast<const BlockQ4_1*>(src), dst, n / kQK);
    case TensorType::Q5_0: return dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, n / kQK);
    case TensorType::Q5_1: return dequant_q5_1(static_cast<const BlockQ5_1*>(src), dst, n / kQK);
    case TensorType::Q8_0: return dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, n / kQK);
    case TensorType::Q2_K: return dequant_q2_k(static_cast<const BlockQ2_K*>(src), dst, n / kQK_K);
    case TensorType::Q3_K: return dequant_q3_k(static_cast<const BlockQ3_K*>(src), dst, n / kQK_K);
    case TensorType::Q4_K: return dequant_q4_k(static_cast<const BlockQ4_K*>(src), dst, n / kQK_K);
    case TensorType::Q5_K: return dequant_q5_k(static_cast<const BlockQ5_K*>(src), dst, n / kQK_K);
    case TensorType::Q6_K: return dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / kQK_K);
    case TensorType::MXFP4: return dequant_mxfp4(static_cast<const uint8_t*>(src), dst, n / 32);
    default: break;
  }
  UBATCH_CHECK_MSG(false, "dequantize_row: unsupported type");
}

}  // namespace detail

bool can_dequantize(TensorType t) {
  switch (t) {
    case TensorType::F32: case TensorType::F16: case TensorType::BF16:
    case TensorType::Q4_0: case TensorType::Q4_1: case TensorType::Q5_0: case TensorType::Q5_1:
    case TensorType::Q8_0: case TensorType::Q2_K: case TensorType::Q3_K: case TensorType::Q4_K:
    case TensorType::Q5_K: case TensorType::Q6_K: case TensorType::MXFP4:
      return true;
    default:
      return false;
  }
}

float mxfp4_block_scale(const uint8_t* block) {
  uint8_t any = 0;
  for (int j = 0; j < 16; ++j) any |= block[1 + j] & 0x77;  // codes 0 and 8 are the zeros
  if (!any) return 0.0f;
  // 2^(e − 128) built from its bits (called per block at load, where ldexp showed in profiles):
  // biased exponent e − 1 for e >= 2; the denormals 2^-127 (e = 1) and 2^-128 (e = 0).
  const uint32_t e = block[0];
  const uint32_t bits = e >= 2 ? (e - 1) << 23 : 1u << (21 + e);
  float d;
  std::memcpy(&d, &bits, 4);
  return d;
}

bool mxfp4_scales_fit_f16(const void* src, int64_t n) {
  UBATCH_CHECK(n >= 0 && n % 32 == 0);
  const auto* b = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / 32; ++i, b += 17) {
    if (!mxfp4_scale_fits_f16(mxfp4_block_scale(b))) return false;
  }
  return true;
}

void dequantize_row(TensorType t, const void* src, float* dst, int64_t n) {
  UBATCH_CHECK_MSG(can_dequantize(t), "dequantize_row: unsupported type");
  const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(t));
  UBATCH_CHECK(n >= 0 && n % tr->block_size == 0);
#if defined(UBATCH_X86_KERNELS)
  static const bool use_avx2 = simd_level() >= SimdLevel::Avx2;
  if (use_avx2 && detail::dequantize_row_avx2_supports(t)) {
    detail::dequantize_row_avx2(t, src, dst, n);
    return;
  }
#endif
  detail::dequantize_row_scalar(t, src, dst, n);
}

bool can_quantize(TensorType t) {
  return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16 ||
         t == TensorType::Q8_0 || t == TensorType::Q8_K;
}

namespace {

// The Q8 rule shared by Q8_0 and Q8_K: d = max|x| / 127, q = x * (127 / max|x|) rounded to
// nearest (ties to even), so |q| <= 127 and |x - d q| <= d / 2 (before d is stored).
float q8_quantize_block(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < n; ++i) {
    float v = std::nearbyint(x[i] * id);
    v = std::fmin(127.0f, std::fmax(-127.0f, v));
    q[i] = static_cast<int8_t>(v);
  }
  return d;
}

}  // namespace

void quantize_row(TensorType t, const float* src, void* dst, int64_t n) {
  UBATCH_CHECK_MSG(can_quantize(t), "quantize_row: unsupported type");
  const TensorTypeTraits* tr = tensor_type_traits(static_cast<uint32_t>(t));
  UBATCH_CHECK(n >= 0 && n % tr->block_size == 0);
  switch (t) {
    case TensorType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case TensorType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
#if defined(UBATCH_X86_KERNELS)
      static const bool use_avx2 = simd_level() >= SimdLevel::Avx2;
      if (use_avx2) {
        detail::quantize_row_f16_avx2(src, d, n);
        return;
      }
#endif
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
      return;
    }
    case TensorType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
      return;
    }
    case TensorType::Q8_0: {
      auto* b = static_cast<detail::BlockQ8_0*>(dst);
      for (int64_t i = 0; i < n / detail::kQK; ++i)
        b[i].d = fp32_to_fp16(q8_quantize_block(src + i * detail::kQK, detail::kQK, b[i].qs));
      return;
    }
    case TensorType::Q8_K: {
      auto* b = static_cast<detail::BlockQ8_K*>(dst);
      for (int64_t i = 0; i < n / detail::kQK_K; ++i) {
        b[i].d = q8_quantize_block(src + i * detail::kQK_K, detail::kQK_K, b[i].qs);
        for (int j = 0; j < detail::kQK_K / 16; ++j) {
          int s = 0;
          for (int l = 0; l < 16; ++l) s += b[i].qs[16 * j + l];
          b[i].bsums[j] = static_cast<int16_t>(s);
        }
      }
      return;
    }
    default:
      break;
  }
}

}  // namespace ubatch::kernels
