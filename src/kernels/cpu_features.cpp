#include "kernels/cpu_features.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/amx.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace ubatch::kernels {

namespace {

#if defined(__x86_64__) || defined(__i386__)
// XCR0 (which register states the OS saves and restores); 0 when OSXSAVE is off.
uint64_t read_xcr0() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0;  // CPUID.1:ECX[27] OSXSAVE
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

#if defined(UBATCH_X86_KERNELS)
// The levels below Amx, from the CPU alone; *why: why the next one up is missing.
SimdLevel vector_level(const CpuFeatures& f, std::string* why) {
  if (!f.avx2) return *why = "avx2 not used: CPU has no AVX2+FMA+F16C", SimdLevel::Scalar;
  if (!f.avx512) return *why = "avx512 not used: CPU has no AVX-512 (F, BW, VL, DQ)", SimdLevel::Avx2;
  return SimdLevel::Avx512;
}

// Highest level the CPU allows; AMX is checked (and requested) only when check_amx.
SimdLevel detect_level(bool check_amx, std::string* why) {
  const CpuFeatures& f = cpu_features();
  std::string reason;
  SimdLevel level = vector_level(f, &reason);
  if (level == SimdLevel::Avx512) {
    std::string amx_why;
    if (!f.avx512_vnni) {
      reason = "amx not used: CPU has no AVX-512 VNNI";
    } else if (!check_amx) {
      reason.clear();  // not asked: the caller's cap is the reason
    } else if (amx_available(&amx_why)) {
      level = SimdLevel::Amx;
    } else {
      reason = "amx not used: " + amx_why;
    }
  }
  if (why) *why = reason;
  return level;
}
#elif defined(UBATCH_ARM_KERNELS)
SimdLevel detect_level(bool /*check_amx*/, std::string* why) {
  const CpuFeatures& f = cpu_features();
  std::string reason;
  SimdLevel level = SimdLevel::Dotprod;
  if (!f.neon) {
    level = SimdLevel::Scalar;
    reason = "neon not used: CPU has no Advanced SIMD (HWCAP_ASIMD)";
  } else if (!f.dotprod) {
    level = SimdLevel::Neon;
    reason = "dotprod not used: CPU has no dot product (HWCAP_ASIMDDP)";
  }
  if (why) *why = reason;
  return level;
}
#else
SimdLevel detect_level(bool /*check_amx*/, std::string* why) {
  if (why) why->clear();  // Scalar is this build's top level
  return SimdLevel::Scalar;
}
#endif

struct LevelChoice {
  SimdLevel level = SimdLevel::Scalar;
  std::string reason;
};

const LevelChoice& level_choice() {
  static const LevelChoice choice = [] {
    LevelChoice c;
    const char* env = std::getenv("UBATCH_SIMD");
    bool ok = true;
    const SimdLevel cap = parse_simd_cap(env, &ok);
    if (!ok)
      std::fprintf(stderr, "ubatch: warning: UBATCH_SIMD=%s is not one of %s; ignored\n", env, simd_level_names());
    c.level = detect_level(cap == top_simd_level(), &c.reason);
    if (cap < c.level || (c.level != top_simd_level() && c.reason.empty())) {
      c.level = cap;
      c.reason = std::string("capped by UBATCH_SIMD=") + env;
    }
    return c;
  }();
  return choice;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c".
    unsigned l1a = 0, l1b = 0, l1c = 0, l1d = 0;
    const bool f16c = __get_cpuid(1, &l1a, &l1b, &l1c, &l1d) && (l1c & (1u << 29));
    f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      const unsigned max_subleaf = a;
      f.amx_int8 = (d & (1u << 24)) && (d & (1u << 25));  // AMX-TILE, AMX-INT8
      if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        f.avx_vnni = f.avx2 && (a & (1u << 4));
        f.avx512_bf16 = f.avx512 && (a & (1u << 5));
      }
    }
    const uint64_t xcr0 = read_xcr0();
    f.os_amx = (xcr0 & (uint64_t{1} << 17)) && (xcr0 & (uint64_t{1} << 18));
#elif defined(__aarch64__) && defined(__linux__)
    // Bit numbers of the Linux arm64 ABI (arch/arm64/include/uapi/asm/hwcap.h).
    const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
    f.neon = (hwcap & (1ul << 1)) != 0;                // HWCAP_ASIMD
    f.dotprod = f.neon && (hwcap & (1ul << 20)) != 0;  // HWCAP_ASIMDDP
    f.i8mm = f.neon && (hwcap2 & (1ul << 13)) != 0;    // HWCAP2_I8MM
#endif
    return f;
  }();
  return features;
}

SimdLevel top_simd_level() {
#if defined(UBATCH_X86_KERNELS)
  return SimdLevel::Amx;
#elif defined(UBATCH_ARM_KERNELS)
  return SimdLevel::Dotprod;
#else
  return SimdLevel::Scalar;
#endif
}

const char* simd_level_names() {
#if defined(UBATCH_X86_KERNELS)
  return "amx, avx512, avx2, scalar";
#elif defined(UBATCH_ARM_KERNELS)
  return "dotprod, neon, scalar";
#else
  return "scalar";
#endif
}

SimdLevel parse_simd_cap(const char* text, bool* ok) {
  if (ok) *ok = true;
  if (!text || !*text) return top_simd_level();
  if (std::strcmp(text, "scalar") == 0) return SimdLevel::Scalar;
#if defined(UBATCH_X86_KERNELS)
  if (std::strcmp(text, "amx") == 0) return SimdLevel::Amx;
  if (std::strcmp(text, "avx512") == 0) return SimdLevel::Avx512;
  if (std::strcmp(text, "avx2") == 0) return SimdLevel::Avx2;
#elif defined(UBATCH_ARM_KERNELS)
  if (std::strcmp(text, "dotprod") == 0) return SimdLevel::Dotprod;
  if (std::strcmp(text, "neon") == 0) return SimdLevel::Neon;
#endif
  if (ok) *ok = false;
  return top_simd_level();
}

SimdLevel cpu_simd_level(std::string* why) { return detect_level(true, why); }

SimdLevel simd_level() { return level_choice().level; }

const char* simd_level_reason() { return level_choice().reason.c_str(); }

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Scalar: return "scalar";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::Avx512: return "avx512";
    case SimdLevel::Amx: return "amx";
    case SimdLevel::Neon: return "neon";
    case SimdLevel::Dotprod: return "dotprod";
  }
  return "?";
}

}  // namespace ubatch::kernels
