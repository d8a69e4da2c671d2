#include "kernels/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace ubatch::kernels {

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
#endif
    return f;
  }();
  return features;
}

SimdLevel simd_level() {
  static const SimdLevel level = [] {
    const CpuFeatures& f = cpu_features();
    SimdLevel best = f.avx512 ? SimdLevel::Avx512 : f.avx2 ? SimdLevel::Avx2 : SimdLevel::Scalar;
    if (const char* env = std::getenv("UBATCH_SIMD")) {
      SimdLevel cap = best;
      if (std::strcmp(env, "scalar") == 0) cap = SimdLevel::Scalar;
      else if (std::strcmp(env, "avx2") == 0) cap = SimdLevel::Avx2;
      else if (std::strcmp(env, "avx512") == 0) cap = SimdLevel::Avx512;
      if (cap < best) best = cap;
    }
    return best;
  }();
  return level;
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Scalar: return "scalar";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace ubatch::kernels
