#include "bench/int8_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fmt/format.h>
#include <vector>

#include "bench/int8_peak_loops.h"
#include "kernels/amx.h"
#include "kernels/matmul.h"
#include "kernels/cpu_features.h"

namespace ubatch::bench {

namespace {

struct Probe {
  int32_t (*loop)(int64_t n_iter, int32_t seed);
  int64_t macs_per_iter;
  int64_t chunk;  // iterations between clock reads (tens of microseconds)
};

Probe probe_for(Int8Isa isa) {
#if defined(UBATCH_X86_KERNELS)
  switch (isa) {
    case Int8Isa::Avx512Vnni: return {&avx512::vnni_loop, avx512::kVnniMacsPerIter, 4096};
    case Int8Isa::Avx2: return {&avx2::maddubs_loop, avx2::kMaddubsMacsPerIter, 4096};
    case Int8Isa::Amx: return {&amx::tdpbusd_loop, amx::kTdpbusdMacsPerIter, 1024};
  }
#else
  (void)isa;  // the probe loops are built for x86-64 only (int8_isa_supported says so)
#endif
  return {nullptr, 0, 0};
}

nlohmann::json peak_json(const Int8Peak& p) {
  nlohmann::json j = {{"measured", p.measured}, {"gmacs", p.gmacs}, {"gops", p.gops()}, {"n_runs", p.n_runs}};
  j["why"] = p.why;
  return j;
}

std::string peak_text(const Int8Peak& p) {
  if (!p.measured) return fmt::format("{}: not available: {}", int8_isa_name(p.isa), p.why);
  return fmt::format("{} {:.1f} GOP/s", int8_isa_name(p.isa), p.gops());
}

}  // namespace

const char* int8_isa_name(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::Avx512Vnni: return "avx512-vnni";
    case Int8Isa::Avx2: return "avx2";
    case Int8Isa::Amx: return "amx";
  }
  return "?";
}

bool int8_isa_supported(Int8Isa isa, std::string* why) {
  std::string reason;
#if defined(UBATCH_X86_KERNELS)
  const kernels::CpuFeatures& f = kernels::cpu_features();
  switch (isa) {
    case Int8Isa::Avx512Vnni:
      if (!f.avx512_vnni) reason = "CPU has no AVX-512 VNNI";
      break;
    case Int8Isa::Avx2:
      if (!f.avx2) reason = "CPU has no AVX2";
      break;
    case Int8Isa::Amx:
      // Only where the engine's own AMX self-check passed (a forked child ran the tile
      // kernel): a VM that advertises AMX but faults on tile instructions must not take the
      // probe down with SIGILL.
      kernels::amx_matmul_usable(&reason);
      break;
  }
#else
  (void)isa;
  reason = "x86-64 probe, not built for this architecture";
#endif
  if (why) *why = reason;
  return reason.empty();
}

const Int8Peak* Int8Peaks::best_vector() const {
  if (avx512_vnni.measured) return &avx512_vnni;
  if (avx2.measured) return &avx2;
  return nullptr;
}

Result<Int8Peak> measure_int8_peak(Int8Isa isa, kernels::ThreadPool& pool, int n_runs, double min_seconds) {
  if (n_runs < 1) return Status::error("int8 peak probe: need at least one run");
  if (!(min_seconds > 0)) return Status::error("int8 peak probe: the minimum run time must be positive");
  Int8Peak r(isa);
  r.n_threads = pool.n_threads();
  if (!int8_isa_supported(isa, &r.why)) return r;
  const Probe probe = probe_for(isa);
  std::vector<double> rates(static_cast<size_t>(r.n_threads), 0.0);   // [thread] MACs/s
  std::vector<int32_t> sinks(static_cast<size_t>(r.n_threads), 0);    // [thread] checksums
  using Clock = std::chrono::steady_clock;
  for (int run = 0; run < n_runs; ++run) {
    pool.run([&](int ith, int) {
      int32_t sink = 0;
      int64_t iters = 0;
      double s = 0.0;
      const auto t0 = Clock::now();
      do {
        sink ^= probe.loop(probe.chunk, ith + run);
        iters += probe.chunk;
        s = std::chrono::duration<double>(Clock::now() - t0).count();
      } while (s < min_seconds);
      if (isa == Int8Isa::Amx) kernels::amx_release();  // leave no tile state in pool threads
      rates[static_cast<size_t>(ith)] = static_cast<double>(iters) * static_cast<double>(probe.macs_per_iter) / s;
      sinks[static_cast<size_t>(ith)] ^= sink;
    });
    double total = 0.0;
    for (double v : rates) total += v;
    r.gmacs = std::max(r.gmacs, total / 1e9);
  }
  r.n_runs = n_runs;
  r.measured = true;
  // Keep the checksums observable so the loops cannot be optimized away.
  volatile int32_t keep = 0;
  for (int32_t v : sinks) keep = keep ^ v;
  (void)keep;
  return r;
}

Result<Int8Peaks> measure_int8_peaks(kernels::ThreadPool& pool, int n_runs, double min_seconds) {
  Int8Peaks peaks;
  peaks.n_threads = pool.n_threads();
  for (Int8Isa isa : {Int8Isa::Avx512Vnni, Int8Isa::Avx2, Int8Isa::Amx}) {
    Result<Int8Peak> p = measure_int8_peak(isa, pool, n_runs, min_seconds);
    if (!p) return p.status();
    (isa == Int8Isa::Avx512Vnni ? peaks.avx512_vnni : isa == Int8Isa::Avx2 ? peaks.avx2 : peaks.amx) = p.value();
  }
  return peaks;
}

std::string describe_int8_peaks(const Int8Peaks& p) {
  return fmt::format("{}, {}, {}", peak_text(p.avx512_vnni), peak_text(p.avx2), peak_text(p.amx));
}

nlohmann::json int8_peaks_json(const Int8Peaks& p) {
  const Int8Peak* best = p.best_vector();
  nlohmann::json j = {{"n_threads", p.n_threads},
                      {"avx512_vnni", peak_json(p.avx512_vnni)},
                      {"avx2", peak_json(p.avx2)},
                      {"amx", peak_json(p.amx)}};
  j["best_vector_isa"] = best ? nlohmann::json(int8_isa_name(best->isa)) : nlohmann::json(nullptr);
  return j;
}

}  // namespace ubatch::bench
