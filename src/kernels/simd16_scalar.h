// The 16-lane vocabulary of simd16.h in portable C++: each operation applied lane by lane,
// std::fma for the fused multiply-add, the same reduction tree as the SIMD levels. This is
// the reference arithmetic; include it only from translation units compiled without ISA
// flags (its inline functions must not be emitted with AVX instructions).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/simd16.h"

namespace ubatch::kernels::scalar {

struct Simd16 {
  struct F {
    float v[16];
  };
  struct D {
    double v[16];
  };
  struct M {
    bool v[16];
  };
  // Blocking hints (simd16.h): plain arrays here, so modest blocks.
  static constexpr int kScoreRegs = 4;
  static constexpr int kAccRegs = 4;

  static F zero() { return set1(0.0f); }
  static F set1(float x) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = x;
    return r;
  }
  static F load(const float* p) {
    F r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  // Loads go through memcpy: a KV row of F32 values may sit at any byte offset.
  static F load_n(const float* p, int n, float fill = 0.0f) {
    F r;
    for (int i = 0; i < 16; ++i) {
      if (i < n) std::memcpy(&r.v[i], p + i, 4);
      else r.v[i] = fill;
    }
    return r;
  }
  static void store(float* p, const F& a) { std::memcpy(p, a.v, sizeof a.v); }
  static void store_n(float* p, const F& a, int n) {
    for (int i = 0; i < n; ++i) p[i] = a.v[i];
  }
  static float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t e = (h >> 10) & 0x1F;
    const uint32_t m = h & 0x3FF;
    uint32_t bits;
    if (e == 0x1F) {
      bits = sign | 0x7F800000 | (m << 13) | (m ? 0x400000u : 0u);  // NaN quieted, as F16C does
    } else if (e != 0) {
      bits = sign | ((e + 112) << 23) | (m << 13);
    } else {
      const float v = static_cast<float>(m) * 0x1p-24f;  // zero or subnormal: exact
      return sign ? -v : v;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  static F load_f16(const uint16_t* p) { return load_f16_n(p, 16); }
  static F load_f16_n(const uint16_t* p, int n) {
    F r;
    for (int i = 0; i < 16; ++i) {
      uint16_t h = 0;
      if (i < n) std::memcpy(&h, p + i, 2);
      r.v[i] = i < n ? f16_to_f32(h) : 0.0f;
    }
    return r;
  }
  static F load_bf16(const uint16_t* p) { return load_bf16_n(p, 16); }
  static F load_bf16_n(const uint16_t* p, int n) {
    F r;
    for (int i = 0; i < 16; ++i) {
      uint16_t h = 0;
      if (i < n) std::memcpy(&h, p + i, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(&r.v[i], &bits, 4);
    }
    return r;
  }
  // float → bfloat16 (simd16.h: to nearest even, subnormals to a signed zero, NaN quieted).
  static uint16_t bf16_bits(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x0040);
    if ((x & 0x7F800000) == 0) return static_cast<uint16_t>((x >> 16) & 0x8000);
    return static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
  }
  static void store_bf16(uint16_t* p, const F& a) { store_bf16_n(p, a, 16); }
  static void store_bf16_n(uint16_t* p, const F& a, int n) {
    for (int i = 0; i < n && i < 16; ++i) {
      const uint16_t h = bf16_bits(a.v[i]);
      std::memcpy(p + i, &h, 2);
    }
  }
  static F load_i8(const int8_t* p) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = static_cast<float>(p[i]);
    return r;
  }

  static F add(const F& a, const F& b) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] + b.v[i];
    return r;
  }
  static F sub(const F& a, const F& b) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] - b.v[i];
    return r;
  }
  static F mul(const F& a, const F& b) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] * b.v[i];
    return r;
  }
  static F div(const F& a, const F& b) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] / b.v[i];
    return r;
  }
  static F fma(const F& a, const F& b, const F& c) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
    return r;
  }
  static F fnma(const F& a, const F& b, const F& c) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::fma(-a.v[i], b.v[i], c.v[i]);
    return r;
  }
  static F max(const F& a, const F& b) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i];
    return r;
  }
  static F min(const F& a, const F& b) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] < b.v[i] ? a.v[i] : b.v[i];
    return r;
  }
  static F abs(const F& a) {
    F r;
    for (int i = 0; i < 16; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &a.v[i], 4);
      bits &= 0x7FFFFFFFu;
      std::memcpy(&r.v[i], &bits, 4);
    }
    return r;
  }
  static F round(const F& a) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::nearbyint(a.v[i]);  // default mode: ties to even
    return r;
  }
  static F floor(const F& a) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::floor(a.v[i]);
    return r;
  }
  static F exp2i(const F& n) {
    F r;
    for (int i = 0; i < 16; ++i) {
      // Integral n in [-126, 127] by contract; anything else (NaN included) gives some float,
      // as the SIMD levels do, without undefined behaviour here.
      const float x = n.v[i];
      const int32_t k = x >= -126.0f && x <= 127.0f ? static_cast<int32_t>(x) : INT32_MIN;
      const uint32_t bits = (static_cast<uint32_t>(k) + 127u) << 23;
      std::memcpy(&r.v[i], &bits, 4);
    }
    return r;
  }
  static M lt(const F& a, const F& b) {
    M m;
    for (int i = 0; i < 16; ++i) m.v[i] = a.v[i] < b.v[i];
    return m;
  }
  static F select(const M& m, const F& a, const F& b) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = m.v[i] ? a.v[i] : b.v[i];
    return r;
  }

  static float hsum(const F& a) {
    float t[8];
    for (int i = 0; i < 8; ++i) t[i] = a.v[i] + a.v[i + 8];
    for (int i = 0; i < 4; ++i) t[i] = t[i] + t[i + 4];
    for (int i = 0; i < 2; ++i) t[i] = t[i] + t[i + 2];
    return t[0] + t[1];
  }
  // out[k] = hsum(a[k]) for 16 vectors.
  static void hsum16(const F* a, float* out) {
    for (int k = 0; k < 16; ++k) out[k] = hsum(a[k]);
  }
  static float hmax(const F& a) {
    float t[8];
    for (int i = 0; i < 8; ++i) t[i] = a.v[i] > a.v[i + 8] ? a.v[i] : a.v[i + 8];
    for (int i = 0; i < 4; ++i) t[i] = t[i] > t[i + 4] ? t[i] : t[i + 4];
    for (int i = 0; i < 2; ++i) t[i] = t[i] > t[i + 2] ? t[i] : t[i + 2];
    return t[0] > t[1] ? t[0] : t[1];
  }
  static float lane0(const F& a) { return a.v[0]; }

  static D dzero() {
    D d;
    for (int i = 0; i < 16; ++i) d.v[i] = 0.0;
    return d;
  }
  static void dadd(D& d, const F& a) {
    for (int i = 0; i < 16; ++i) d.v[i] += static_cast<double>(a.v[i]);
  }
  static void dadd_sq(D& d, const F& a) {
    for (int i = 0; i < 16; ++i) {
      const double x = a.v[i];
      d.v[i] += x * x;  // exact product (-ffp-contract=off: no fusing, none needed)
    }
  }
  static double dhsum(const D& d) {
    double t[8];
    for (int i = 0; i < 8; ++i) t[i] = d.v[i] + d.v[i + 8];
    for (int i = 0; i < 4; ++i) t[i] = t[i] + t[i + 4];
    for (int i = 0; i < 2; ++i) t[i] = t[i] + t[i + 2];
    return t[0] + t[1];
  }
};

}  // namespace ubatch::kernels::scalar
