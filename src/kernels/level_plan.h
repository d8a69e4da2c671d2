// Which SIMD level the matmul runs at, per shape class, chosen by measurement (issue 24).
//
// A newer instruction set is not always the faster one for a given shape: on a Xeon with AMX
// the AMX path was 11-13% slower than AVX-512 VNNI for prompt processing, and a level may win
// at prefill but not at decode. Every level gives the same bits (gemm_internal.h), so the
// engine may run each shape class on whichever level is fastest at it. This header has the
// pure parts of that choice: the shape classes, the rule that picks a level from measured
// times, and the text of the small cache file that keeps the times per CPU model. The
// measurement itself is in level_probe.cpp; matmul.cpp applies the plan.
//
// Shape classes, by the rows (tokens) of one matmul call:
//   decode       1-2 rows   (one or two sequences' next token; the output projection of a prefill)
//   small batch  3-64 rows  (batched decode, speculative verification, short prompt chunks)
//   prefill      65+ rows   (prompt processing)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"

namespace ubatch::kernels {

enum class ShapeClass : int { Decode = 0, SmallBatch = 1, Prefill = 2 };
constexpr int kShapeClasses = 3;
constexpr int64_t kDecodeMaxRows = 2;       // 1-2 rows: Decode
constexpr int64_t kSmallBatchMaxRows = 64;  // 3-64 rows: SmallBatch; more: Prefill

// The class of a matmul with n_tokens rows (n_tokens <= 2, 0 included: Decode).
ShapeClass shape_class(int64_t n_tokens);
// "decode", "small-batch", "prefill".
const char* shape_class_name(ShapeClass c);
// "1-2 rows", "3-64 rows", "65+ rows".
const char* shape_class_rows(ShapeClass c);

// What was measured for one level. seconds[c]: the time of shape class c's probe (any unit,
// the same for every level of one measurement); <= 0 means not measured (the level is then no
// candidate for that class). passed: the level ran the probes and gave the scalar reference's
// bits (its self-check); a level that failed is never chosen.
struct LevelTiming {
  SimdLevel level = SimdLevel::Scalar;
  bool passed = false;
  double seconds[kShapeClasses] = {0, 0, 0};
};

// One level per shape class.
struct LevelPlan {
  SimdLevel level[kShapeClasses] = {SimdLevel::Scalar, SimdLevel::Scalar, SimdLevel::Scalar};
  SimdLevel at(int64_t n_tokens) const { return level[static_cast<int>(shape_class(n_tokens))]; }
  SimdLevel of(ShapeClass c) const { return level[static_cast<int>(c)]; }
  // The same level for every class.
  static LevelPlan uniform(SimdLevel l) {
    LevelPlan p;
    for (SimdLevel& x : p.level) x = l;
    return p;
  }
};

// Times within this fraction of the fastest count as a tie (the measurement's noise).
constexpr double kLevelTieFraction = 0.03;

// The rule, a pure function: for each class, the candidates are the levels of `timings` that
// passed, are <= cap (the UBATCH_SIMD cap, see cpu_features.h) and have a time for the class;
// the fastest wins, and among candidates within `tie` of the fastest the LOWEST level wins (a
// level is never chosen for being newer, only for being measurably faster). A class without
// candidates runs at Scalar (the reference, which needs no self-check). A level listed twice:
// its first entry counts.
LevelPlan choose_level_plan(const std::vector<LevelTiming>& timings, SimdLevel cap,
                            double tie = kLevelTieFraction);

// "decode avx2, small-batch avx512, prefill avx512".
std::string describe_level_plan(const LevelPlan& plan);

// The cache file: one text file per CPU model and build (file name from level_cache_key), e.g.
//
//   ubatch kernel level timings v1
//   key x86-64 "AMD EPYC" family 25 model 1 stepping 1 | amx, avx512, avx2, scalar | layout 1 | probe 1
//   level avx2 passed 1.234e-04 5.600e-04 2.100e-03
//   level scalar passed 5.000e-03 3.000e-02 1.100e-01
//
// (seconds per class in ShapeClass order; "failed" instead of "passed" for a level whose
// self-check failed; "-" for a class it was not measured at.)
std::string format_level_cache(const std::string& key, const std::vector<LevelTiming>& timings);
// Parses such a text. False (out untouched) when the header or key differ from `key`, a line
// is malformed, or a level name is not one of this build's (parse_simd_cap).
bool parse_level_cache(const std::string& text, const std::string& key, std::vector<LevelTiming>* out);

// The cache key of this CPU and build: the CPU model (x86: CPUID brand string, family, model,
// stepping; aarch64: MIDR_EL1 from sysfs when readable), this build's levels, the packed
// layout version and the probe's version, then " | build " and the executable's size and
// modification time (a rebuilt binary, whose kernels may differ, measures again). Read once.
const std::string& level_cache_key();
// Where the cache file of `key` lives: $XDG_CACHE_HOME/ubatch/ (else $HOME/.cache/ubatch/)
// kernel-levels-<16 hex digits of a hash of key up to " | build ">.txt — one file per CPU
// model and ladder, rewritten by a build whose key differs; "" when neither variable is set
// (or empty). Pure: the variables' values are arguments (nullptr: unset).
std::string level_cache_path(const char* xdg_cache_home, const char* home, const std::string& key);

}  // namespace ubatch::kernels
