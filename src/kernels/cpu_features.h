// Which SIMD instruction sets this CPU (and its OS) offers, detected once at run time.
//
// Kernels pick their implementation from simd_level() the first time they run. The levels
// form one ladder per architecture above the portable Scalar level, each level including the
// one below; a build reports only the levels of the architecture it was compiled for
// (CMakeLists.txt builds that architecture's SIMD translation units only), so comparisons
// (<, >=) between levels are meaningful within one ladder only.
//
// x86-64 (UBATCH_X86_KERNELS):
//   Avx2    AVX2 + FMA + F16C.
//   Avx512  AVX-512 F, BW, VL, DQ (kernels also check avx512_vnni where they need it).
//   Amx     AVX-512 with VNNI, plus AMX-TILE + AMX-INT8 enabled by the OS and granted to this
//           process (kernels/amx.h, amx_available()). Reaching this level makes the one-time,
//           process-wide arch_prctl(ARCH_REQ_XCOMP_PERM) request; a refusal caps the level at
//           Avx512 and the reason is kept (simd_level_reason()).
// aarch64 (UBATCH_ARM_KERNELS), from the Linux auxiliary vector (getauxval(AT_HWCAP)):
//   Neon    Advanced SIMD (HWCAP_ASIMD; ARMv8.0, e.g. Cortex-A72 of the Raspberry Pi 4).
//   Dotprod NEON with the dot-product instructions SDOT/UDOT (HWCAP_ASIMDDP; ARMv8.2+, e.g.
//           Cortex-A76/A78AE, Neoverse N1/V1, Apple cores).
// Any other architecture: Scalar only.
//
// UBATCH_SIMD=<level name> in the environment caps the choice (it never raises it), so the
// reference path can be exercised on any machine; a value that names no level of this build's
// architecture is ignored with one warning line on stderr.
#pragma once

#include <string>

namespace ubatch::kernels {

enum class SimdLevel { Scalar = 0, Avx2 = 1, Avx512 = 2, Amx = 3, Neon = 4, Dotprod = 5 };

// The highest level this build has kernels for: Amx (x86-64), Dotprod (aarch64), else Scalar.
SimdLevel top_simd_level();

struct CpuFeatures {
  bool avx2 = false;         // AVX2 + FMA + F16C (and OS-enabled YMM state)
  bool avx512 = false;       // AVX-512 F, BW, VL, DQ (and OS-enabled ZMM state)
  bool avx512_vnni = false;  // AVX-512 VNNI (vpdpbusd on zmm), only with avx512
  bool avx_vnni = false;     // AVX-VNNI (VEX vpdpbusd on ymm): CPUID.(EAX=7,ECX=1):EAX[4]
  bool avx512_bf16 = false;  // AVX512_BF16 (vcvtneps2bf16): CPUID.(EAX=7,ECX=1):EAX[5], only with avx512
  bool amx_int8 = false;     // AMX-TILE and AMX-INT8: CPUID.(EAX=7,ECX=0):EDX[24] and EDX[25]
  bool os_amx = false;       // XCR0[17] (XTILECFG) and XCR0[18] (XTILEDATA) set (xgetbv, needs OSXSAVE)
  bool neon = false;         // aarch64: Advanced SIMD (HWCAP_ASIMD)
  bool dotprod = false;      // aarch64: SDOT/UDOT (HWCAP_ASIMDDP)
  bool i8mm = false;         // aarch64: SMMLA/UMMLA/USDOT (HWCAP2_I8MM); reported, not used yet
};

// What this CPU reports, read once (thread-safe): CPUID and XCR0 on x86 (the aarch64 fields
// false), getauxval(AT_HWCAP, AT_HWCAP2) on Linux/aarch64 (the x86 fields false); all false
// elsewhere.
const CpuFeatures& cpu_features();

// Parses a UBATCH_SIMD value naming a level of this build's architecture (exact, lower case):
// x86-64 "amx", "avx512", "avx2", aarch64 "dotprod", "neon", and "scalar" everywhere → that
// level with *ok = true. nullptr or "" means "no cap": top_simd_level() with *ok = true.
// Anything else (a level of another architecture included): top_simd_level() (no cap) with
// *ok = false. ok may be nullptr. Pure function, no environment access.
SimdLevel parse_simd_cap(const char* text, bool* ok);

// The level names parse_simd_cap accepts in this build, highest first, comma-separated:
// "amx, avx512, avx2, scalar" (x86-64), "dotprod, neon, scalar" (aarch64), "scalar".
const char* simd_level_names();

// Highest level this CPU and OS support, ignoring UBATCH_SIMD. Reaching Amx performs the
// AMX permission request (amx_available()). When why is given it receives one line saying
// why the next level up is not supported (e.g. "amx not used: CPU has no AMX-INT8",
// "dotprod not used: CPU has no dot product (HWCAP_ASIMDDP)"), or "" at top_simd_level().
// Thread-safe.
SimdLevel cpu_simd_level(std::string* why = nullptr);

// Highest level both the CPU and UBATCH_SIMD allow (cached after the first call; thread-safe).
// When UBATCH_SIMD caps the level below Amx, the AMX permission request is not made.
SimdLevel simd_level();

// One line saying why simd_level() is not one level higher: "capped by UBATCH_SIMD=avx2", or
// the missing CPU/OS feature ("amx not used: arch_prctl(ARCH_REQ_XCOMP_PERM) refused: ...");
// "" when simd_level() is top_simd_level(). The pointer stays valid for the life of the process.
const char* simd_level_reason();

// "scalar", "avx2", "avx512", "amx", "neon", "dotprod".
const char* simd_level_name(SimdLevel level);

}  // namespace ubatch::kernels
