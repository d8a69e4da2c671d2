// How fast this CPU issues 512-bit loads, broadcasts and vpdpbusd: ten independent instructions
// per loop iteration (inline asm, so the compiler neither spills nor merges them), 5·10⁷
// iterations, ns per instruction and cycles at the clock a dependent `add` chain measures beside
// them. docs/BENCHMARKS.md ("Two panels per activation broadcast") uses it to explain why the
// AVX-512 decode tile counts loads. x86-64 with AVX-512 VNNI only; says so and exits 0 elsewhere.
//   g++ -O2 bench/bench_load_issue.cpp -o /tmp/bench_load_issue && /tmp/bench_load_issue
#include <chrono>
#include <cstdio>

#if defined(__x86_64__)
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define UB_CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9"
#define UB_TEN(ins) ins(0) ins(1) ins(2) ins(3) ins(4) ins(5) ins(6) ins(7) ins(8) ins(9)
#define UB_BCAST_Z(r) "vpbroadcastd " #r "*4(%0), %%zmm" #r "\n"
#define UB_BCAST_Y(r) "vpbroadcastd " #r "*4(%0), %%ymm" #r "\n"
#define UB_BCASTSS_Z(r) "vbroadcastss " #r "*4(%0), %%zmm" #r "\n"
#define UB_LOAD_Z(r) "vmovdqu32 " #r "*64(%0), %%zmm" #r "\n"
#define UB_LOAD_Y(r) "vmovdqu " #r "*32(%0), %%ymm" #r "\n"
#define UB_DPBUSD_Z(r) "vpdpbusd %%zmm20, %%zmm21, %%zmm" #r "\n"
#define UB_XOR_Z(r) "vpxord %%zmm20, %%zmm21, %%zmm" #r "\n"
#define UB_ADD4 "add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0\n"

constexpr long kIters = 50000000;
alignas(64) int g_buf[1024] = {1};

}  // namespace

int main() {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vnni")) {
    std::printf("SKIPPED: this CPU has no AVX-512 VNNI\n");
    return 0;
  }
  // The clock: 20 dependent adds (one cycle each) per iteration.
  long x = 0;
  double t0 = now();
  for (long i = 0; i < kIters; ++i) asm volatile(UB_ADD4 UB_ADD4 UB_ADD4 UB_ADD4 UB_ADD4 : "+r"(x));
  const double ghz = 20.0 * kIters / (now() - t0) / 1e9;
  std::printf("clock (dependent add chain): %.2f GHz\n", ghz);
  const int* p = g_buf;
  auto run = [&](const char* name, auto body) {
    const double s = now();
    for (long i = 0; i < kIters; ++i) body();
    const double ns = (now() - s) / kIters / 10 * 1e9;
    std::printf("%-26s %.3f ns each, %.2f cycles\n", name, ns, ns * ghz);
  };
  run("vpbroadcastd zmm, m32", [&] { asm volatile(UB_TEN(UB_BCAST_Z)::"r"(p) : UB_CLOBBER); });
  run("vpbroadcastd ymm, m32", [&] { asm volatile(UB_TEN(UB_BCAST_Y)::"r"(p) : UB_CLOBBER); });
  run("vbroadcastss zmm, m32", [&] { asm volatile(UB_TEN(UB_BCASTSS_Z)::"r"(p) : UB_CLOBBER); });
  run("vmovdqu32 zmm, m512", [&] { asm volatile(UB_TEN(UB_LOAD_Z)::"r"(p) : UB_CLOBBER); });
  run("vmovdqu ymm, m256", [&] { asm volatile(UB_TEN(UB_LOAD_Y)::"r"(p) : UB_CLOBBER); });
  run("vpdpbusd zmm", [&] { asm volatile(UB_TEN(UB_DPBUSD_Z)::: UB_CLOBBER); });
  run("vpxord zmm", [&] { asm volatile(UB_TEN(UB_XOR_Z)::: UB_CLOBBER); });
  return 0;
}
#else
int main() {
  std::printf("SKIPPED: x86-64 only\n");
  return 0;
}
#endif
