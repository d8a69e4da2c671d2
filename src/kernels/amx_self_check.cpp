// A start-up check of the AMX GEMM before the engine trusts it (see gemm_internal.h).
//
// The AMX path is chosen only where the CPU and the kernel allow it, and it must give the
// AVX-512 path's bits. Both can fail in ways nothing else detects in time: a hypervisor that
// advertises AMX but faults on tile instructions (SIGILL), or a wrong result. So, once per
// process, a forked child runs a small packed product on both paths and compares the bytes;
// the parent only reads the child's exit status. A child that crashes or disagrees leaves the
// engine on AVX-512, with the reason kept for logs and tests.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/amx.h"
#include "kernels/gemm_internal.h"
#include "kernels/quant.h"

namespace ubatch::kernels::detail {

namespace {

// 0 when AMX and AVX-512 agree on every type's product; 1 on a mismatch; 2 on a setup error.
int compare_paths() {
  std::mt19937 rng(12345);
  for (TensorType t : {TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_0, TensorType::Q6_K}) {
    const int64_t n_in = 512, n_out = 40, n_tokens = 37;  // two 16-token AMX blocks + a tail
    const size_t row_bytes = tensor_row_bytes(t, n_in);
    std::vector<uint8_t> w(row_bytes * n_out);
    for (auto& b : w) b = static_cast<uint8_t>(rng());
    // Finite small f16 scales where each type keeps them.
    const int64_t n_blocks = n_in * n_out / static_cast<int64_t>(tensor_type_traits(static_cast<uint32_t>(t))->block_size);
    const size_t block_bytes = row_bytes * n_out / static_cast<size_t>(n_blocks);
    const uint16_t h = fp32_to_fp16(0.01f);
    for (int64_t b = 0; b < n_blocks; ++b) {
      uint8_t* blk = w.data() + b * block_bytes;
      if (t == TensorType::Q6_K) std::memcpy(blk + 208, &h, 2);
      else std::memcpy(blk, &h, 2);
      if (t == TensorType::Q4_K) std::memcpy(blk + 2, &h, 2);
    }
    auto pw = pack_weight(t, w.data(), n_in, n_out);
    if (!pw) return 2;
    const PackedWeight& p = **pw;
    const ActLayout a = act_layout(p.fmt, n_in);
    std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
    std::normal_distribution<float> nd;
    for (auto& v : x) v = nd(rng);
    std::vector<uint8_t> xp(static_cast<size_t>(n_tokens * a.stride + 64));
    pack_acts(p.fmt, a, x.data(), 0, n_tokens, xp.data());
    std::vector<uint8_t> scratch(static_cast<size_t>(gemm_scratch_bytes(p)) + 64);
    uint8_t* sc = scratch.data() + ((64 - (reinterpret_cast<uintptr_t>(scratch.data()) & 63)) & 63);
    std::vector<float> y1(static_cast<size_t>(n_tokens * n_out)), y2(y1.size());
    gemm_panels_avx512(p, a, xp.data(), n_tokens, y1.data(), n_out, 0, p.n_panels, sc);
    gemm_panels_amx(p, a, xp.data(), n_tokens, y2.data(), n_out, 0, p.n_panels, sc);
    if (std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)) != 0) return 1;
  }
  amx_release();
  return 0;
}

}  // namespace

bool amx_gemm_self_check(std::string* why) {
  static const std::string failure = []() -> std::string {
    std::string reason;
    if (!amx_available(&reason)) return reason;
    const pid_t pid = fork();
    if (pid < 0) return "AMX self-check: fork failed";
    if (pid == 0) {
      // Default handlers and no blocked signals, so a fault always ends the child with its
      // signal (the parent may block SIGINT/SIGTERM or handle SIGSEGV).
      for (int sig : {SIGILL, SIGSEGV, SIGBUS, SIGFPE, SIGABRT}) signal(sig, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      _exit(compare_paths());
    }
    int status = 0;
    pid_t r;
    while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (r != pid) return "AMX self-check: waitpid failed";
    if (WIFSIGNALED(status))
      return "AMX self-check: the tile kernel died with signal " + std::to_string(WTERMSIG(status));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return WEXITSTATUS(status) == 1 ? "AMX self-check: AMX and AVX-512 results differ"
                                      : "AMX self-check: setup failed";
    return "";
  }();
  if (why) *why = failure;
  return failure.empty();
}

}  // namespace ubatch::kernels::detail
