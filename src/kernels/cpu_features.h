// Which SIMD instruction sets this CPU offers, detected once at run time.
//
// Kernels pick their implementation from this (scalar reference, AVX2, AVX-512) the first
// time they run; UBATCH_SIMD=scalar|avx2|avx512 in the environment caps the choice, so the
// reference path can be exercised on any machine.
#pragma once

namespace ubatch::kernels {

enum class SimdLevel { Scalar = 0, Avx2 = 1, Avx512 = 2 };

struct CpuFeatures {
  bool avx2 = false;      // AVX2 + FMA + F16C
  bool avx512 = false;    // AVX-512 F, BW, VL, DQ
  bool avx512_vnni = false;
};

const CpuFeatures& cpu_features();

// Highest level both the CPU and UBATCH_SIMD allow (cached after the first call).
SimdLevel simd_level();
const char* simd_level_name(SimdLevel level);

}  // namespace ubatch::kernels
