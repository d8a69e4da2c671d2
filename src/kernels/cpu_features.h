// Which SIMD instruction sets this CPU (and its OS) offers, detected once at run time.
//
// Kernels pick their implementation from simd_level() (scalar reference, AVX2, AVX-512, AMX)
// the first time they run. UBATCH_SIMD=amx|avx512|avx2|scalar in the environment caps the
// choice (it never raises it), so the reference path can be exercised on any machine; any
// other non-empty value is ignored with one warning line on stderr.
//
// Levels, each including the one below:
//   Scalar  portable C++ only.
//   Avx2    AVX2 + FMA + F16C.
//   Avx512  AVX-512 F, BW, VL, DQ (kernels also check avx512_vnni where they need it).
//   Amx     AVX-512 with VNNI, plus AMX-TILE + AMX-INT8 enabled by the OS and granted to this
//           process (kernels/amx.h, amx_available()). Reaching this level makes the one-time,
//           process-wide arch_prctl(ARCH_REQ_XCOMP_PERM) request; a refusal caps the level at
//           Avx512 and the reason is kept (simd_level_reason()).
#pragma once

#include <string>

namespace ubatch::kernels {

enum class SimdLevel { Scalar = 0, Avx2 = 1, Avx512 = 2, Amx = 3 };

struct CpuFeatures {
  bool avx2 = false;         // AVX2 + FMA + F16C (and OS-enabled YMM state)
  bool avx512 = false;       // AVX-512 F, BW, VL, DQ (and OS-enabled ZMM state)
  bool avx512_vnni = false;  // AVX-512 VNNI (vpdpbusd on zmm), only with avx512
  bool avx_vnni = false;     // AVX-VNNI (VEX vpdpbusd on ymm): CPUID.(EAX=7,ECX=1):EAX[4]
  bool amx_int8 = false;     // AMX-TILE and AMX-INT8: CPUID.(EAX=7,ECX=0):EDX[24] and EDX[25]
  bool os_amx = false;       // XCR0[17] (XTILECFG) and XCR0[18] (XTILEDATA) set (xgetbv, needs OSXSAVE)
};

// What CPUID and XCR0 report, read once (thread-safe); all false off x86.
const CpuFeatures& cpu_features();

// Parses a UBATCH_SIMD value: "amx", "avx512", "avx2" or "scalar" (exact, lower case) → that
// level with *ok = true. nullptr or "" means "no cap": Amx with *ok = true. Anything else:
// Amx (no cap) with *ok = false. ok may be nullptr. Pure function, no environment access.
SimdLevel parse_simd_cap(const char* text, bool* ok);

// Highest level this CPU and OS support, ignoring UBATCH_SIMD. Reaching Amx performs the
// AMX permission request (amx_available()). When why is given it receives one line saying
// why the next level up is not supported (e.g. "amx not used: CPU has no AMX-INT8"), or ""
// at Amx. Thread-safe.
SimdLevel cpu_simd_level(std::string* why = nullptr);

// Highest level both the CPU and UBATCH_SIMD allow (cached after the first call; thread-safe).
// When UBATCH_SIMD caps the level below Amx, the AMX permission request is not made.
SimdLevel simd_level();

// One line saying why simd_level() is not one level higher: "capped by UBATCH_SIMD=avx2", or
// the missing CPU/OS feature ("amx not used: arch_prctl(ARCH_REQ_XCOMP_PERM) refused: ...");
// "" when simd_level() is Amx. The pointer stays valid for the life of the process.
const char* simd_level_reason();

// "scalar", "avx2", "avx512", "amx".
const char* simd_level_name(SimdLevel level);

}  // namespace ubatch::kernels
