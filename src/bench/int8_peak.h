// int8 multiply-accumulate peak probes: the compute ceiling of the integer dot products the
// quantized matmul is built from, per instruction set, measured on this machine.
//
// Method: every thread of the pool runs a register-only loop of independent int8 multiply-
// accumulate chains (no memory traffic) until it has lasted ≥ min_seconds, counting
// iterations; its rate is MACs / its own elapsed seconds; a run's rate is the sum over
// threads; the result is the best of n_runs runs. The loops (bench/int8_peak_loops.h):
//   avx512-vnni  16 independent vpdpbusd zmm (64 u8·s8 MACs each)       needs AVX-512 VNNI
//   avx2         8 vpmaddubsw → vpmaddwd → vpaddd ymm chains, 32 MACs    needs AVX2
//                per vpmaddubsw (the widening adds are overhead, as in the kernels)
//   amx          4 independent tdpbusd, C[16×16] += A[16×64] · B[64×16]  needs amx_available()
//                (16 384 MACs each), each thread configuring its tiles
// GMAC/s = 10^9 MACs per second; GOP/s = 2 × GMAC/s (a multiply and an add per MAC), the
// unit the prompt-processing rates of `ubatch bench` use. A probe the machine cannot run is
// reported as not measured, with the reason, never run.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kernels/thread_pool.h"

namespace ubatch::bench {

enum class Int8Isa { Avx512Vnni = 0, Avx2 = 1, Amx = 2 };

// "avx512-vnni", "avx2", "amx".
const char* int8_isa_name(Int8Isa isa);

// Whether this machine can run the probe of isa (CPU features; for Amx, amx_available(),
// which makes the process-wide AMX permission request). On false, why (when given) receives
// one line, e.g. "CPU has no AVX-512 VNNI".
bool int8_isa_supported(Int8Isa isa, std::string* why = nullptr);

struct Int8Peak {
  explicit Int8Peak(Int8Isa which = Int8Isa::Avx2) : isa(which) {}
  Int8Isa isa;
  bool measured = false;
  std::string why;        // why not measured ("" when measured)
  double gmacs = 0.0;     // best run, 10^9 int8 MACs/s summed over threads (0: not measured)
  int n_threads = 0;
  int n_runs = 0;
  double gops() const { return 2.0 * gmacs; }  // 10^9 int8 ops/s
};

struct Int8Peaks {
  int n_threads = 0;
  Int8Peak avx512_vnni{Int8Isa::Avx512Vnni}, avx2{Int8Isa::Avx2}, amx{Int8Isa::Amx};
  // The best measured non-AMX probe: avx512-vnni when measured, else avx2; nullptr if neither.
  const Int8Peak* best_vector() const;
};

// Runs one probe on every thread of pool. An ISA the machine lacks is not an error: the
// result has measured = false and why set. Errors: n_runs < 1 or min_seconds <= 0.
Result<Int8Peak> measure_int8_peak(Int8Isa isa, kernels::ThreadPool& pool, int n_runs, double min_seconds = 0.05);

// All three probes on pool's threads. Errors: as measure_int8_peak.
Result<Int8Peaks> measure_int8_peaks(kernels::ThreadPool& pool, int n_runs, double min_seconds = 0.05);

// One line: "avx512-vnni 812.3 GOP/s, avx2 203.1 GOP/s, amx: not available: CPU has no AMX-INT8".
std::string describe_int8_peaks(const Int8Peaks& peaks);

// {"n_threads", "best_vector_isa" (null if none), "avx512_vnni"/"avx2"/"amx": {"measured",
// "gmacs", "gops", "n_runs", "why"}}.
nlohmann::json int8_peaks_json(const Int8Peaks& peaks);

}  // namespace ubatch::bench
