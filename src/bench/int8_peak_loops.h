// The register-only loops behind bench/int8_peak.h, one translation unit per ISA, each
// compiled with that ISA's flags (int8_peak_avx512.cpp, int8_peak_avx2.cpp, int8_peak_amx.cpp)
// and called only when the CPU has it. Each runs n_iter iterations of independent int8
// multiply-accumulate chains on data held in registers (or tiles) and returns a checksum of
// its accumulators so the work stays live. seed only varies the data.
#pragma once

#include <cstdint>

namespace ubatch::bench {

namespace avx512 {
// 16 independent vpdpbusd zmm per iteration (64 u8·s8 MACs each): 1024 MACs.
inline constexpr int64_t kVnniMacsPerIter = 16 * 64;
int32_t vnni_loop(int64_t n_iter, int32_t seed);
}  // namespace avx512

namespace avx2 {
// 4 independent vpmaddubsw → vpmaddwd → vpaddd ymm chains per iteration (only the 1-cycle
// vpaddd is loop-carried, so 4 cover its latency without spilling), counted as 32 MACs per
// vpmaddubsw: 128 MACs.
inline constexpr int64_t kMaddubsMacsPerIter = 4 * 32;
int32_t maddubs_loop(int64_t n_iter, int32_t seed);
}  // namespace avx2

namespace amx {
// 4 independent tdpbusd per iteration, each C[16×16 int32] += A[16×64 u8] · B[64×16 s8]:
// 4 × 16 384 MACs. Configures this thread's tiles (kernels::amx_ensure_config) and leaves
// them loaded; the caller releases them (kernels::amx_release).
inline constexpr int64_t kTdpbusdMacsPerIter = 4 * 16 * 16 * 64;
int32_t tdpbusd_loop(int64_t n_iter, int32_t seed);
}  // namespace amx

}  // namespace ubatch::bench
