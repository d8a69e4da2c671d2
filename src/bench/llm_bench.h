// The engine benchmark behind `ubatch bench`: prompt processing, generation and batched
// runs on random token ids, timed over repetitions, reported with their roofline shares
// (bench/roofline.h) as Markdown, CSV or JSON.
//
// A test is (n_prompt, n_gen, n_seq): n_seq sequences each get n_prompt random tokens
// (prefilled together in batches of n_batch tokens, logits for each sequence's last token),
// then n_gen decode steps of one random token per sequence, all sequences in the same step
// (logits for every row). The classic tests are special cases: ppN = (N, 0, 1), tgN =
// (0, N, 1); the batched tests (after llama-batched-bench) are (pp, tg, B).
// Rates per repetition: prompt t/s = n_seq·n_prompt / prompt seconds, generation t/s =
// n_seq·n_gen / generation seconds (aggregate over sequences), total t/s = all tokens / all
// seconds; reported as mean ± sample sd over repetitions. The KV cache is cleared before
// every repetition; token ids come from a seeded mt19937_64, uniform over the vocabulary.
//
// Constrained decoding (options.grammar set, `ubatch bench --grammar/--json-schema`): from the
// second decode step on, every sequence's token is sampled under the grammar from the
// previous step's logits (mask, masked logits, sampling, advance of its matcher; a sequence
// whose grammar completes starts a new sentence) instead of drawn at random, and the grammar
// work is timed apart from the decode calls: grammar_s / decode_s per repetition is the mask
// cost as a share of the decode step. The compiled grammar keeps its caches across
// repetitions, so the first repetition shows the cold cost and the others the warm one.
//
// Runs on the calling thread; the Context's pool does the work.
#pragma once

#include <memory>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/int8_peak.h"
#include "bench/membw.h"
#include "bench/roofline.h"
#include "bench/stats.h"
#include "common/status.h"
#include "context/context.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace ubatch::grammar {
class CompiledGrammar;
}

namespace ubatch::bench {

struct BenchTest {
  int32_t n_prompt = 0;  // prompt tokens per sequence
  int32_t n_gen = 0;     // decode steps (tokens per sequence)
  int32_t n_seq = 1;     // sequences run together
  bool batched = false;  // from the batched lists (-B): reported in the batched table

  // "pp512", "tg128", "pp512+tg128"; batched tests add " B8".
  std::string name() const;
};

struct BenchConfig {
  int32_t n_threads = 0;
  int32_t n_batch = 2048;
  int32_t n_ubatch = 512;
};

// Every combination of the three lists, threads outermost, then n_batch, then n_ubatch.
std::vector<BenchConfig> expand_configs(const std::vector<int64_t>& threads, const std::vector<int64_t>& n_batch,
                                        const std::vector<int64_t>& n_ubatch);

// Tests in run order: ppN for each n_prompt > 0, tgN for each n_gen > 0 (zeros skipped),
// then (pp, tg, B) for every combination of the batched lists (empty b_list: none).
std::vector<BenchTest> make_tests(const std::vector<int64_t>& n_prompt, const std::vector<int64_t>& n_gen,
                                  const std::vector<int64_t>& pp, const std::vector<int64_t>& tg,
                                  const std::vector<int64_t>& b_list);

struct BenchOptions {
  int reps = 5;
  uint64_t seed = 1234;
  bool warmup = true;                  // one short untimed decode before each test
  TensorType kv_type = TensorType::F16;
  TensorType state_type = TensorType::F32;  // recurrent state storage (hybrid models)
  int32_t kv_block_size = 16;
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  // non-null: constrained decoding
  std::string grammar_name;                                 // for the report (the file)
  SamplingParams sampling;                                  // constrained decoding's sampling (seed + sequence)
};

struct BenchResult {
  BenchConfig config;          // as requested
  BenchTest test;
  int32_t n_threads = 0;       // threads actually used
  int32_t n_ubatch = 0;        // effective (≤ n_batch)
  std::vector<double> prompt_s;  // [reps] seconds of the prompt phase
  std::vector<double> gen_s;     // [reps] seconds of the generation phase
  // Constrained decoding only: [reps] seconds of the generation phase spent in decode calls,
  // and in grammar work (masks, masking the logits, advancing the matchers).
  std::vector<double> decode_s, grammar_s;
  int64_t grammar_rows = 0;       // constrained samples, all repetitions
  int64_t grammar_restarts = 0;   // sentences completed (each starts a new one)
  Summary prompt_tps, gen_tps, total_tps;  // tokens/s over repetitions
  // Roofline (0 when not measured or not applicable):
  double gen_gbps = 0.0;        // mean weight GB/s streamed in generation
  double gen_bw_share = 0.0;    // gen_gbps / measured read bandwidth
  double prompt_gflops = 0.0;   // mean 2·MACs/s of the prompt phase, 10^9
  double prompt_peak_share = 0.0;  // prompt_gflops / measured matmul peak
  // int8 roofline (0 / "" when not measured): the prompt rate as a share of the int8
  // multiply-accumulate peak (bench/int8_peak.h) of the best non-AMX ISA, and of the AMX peak
  // when the SIMD level is amx.
  double prompt_int8_share = 0.0;  // prompt_gflops / int8_isa peak GOP/s
  std::string int8_isa;            // "avx512-vnni" or "avx2": the ISA of prompt_int8_share
  double prompt_amx_share = 0.0;   // prompt_gflops / AMX peak GOP/s (SIMD level amx only)
  // The matmul level each phase ran at (kernels::matmul_levels(): the plan's level for the
  // phase's rows per matmul); "" when the phase is absent or not filled in.
  std::string prompt_level, gen_level;
};

// Rates from the per-repetition times (fills the three Summary fields).
void compute_rates(BenchResult& r);
// Roofline fields from the model cost, the measured bandwidth (GB/s, 0: unknown) and matmul
// peak (GFLOP/s, 0: unknown).
void apply_roofline(BenchResult& r, const ModelCost& cost, double bw_gbps, double peak_gflops);

// int8 roofline fields from the prompt rate (call after apply_roofline) and the int8 peaks
// measured with r.n_threads threads (nullptr: unknown, fields stay 0); amx_level: the SIMD
// level is amx, so the AMX share is filled too.
void apply_int8_roofline(BenchResult& r, const Int8Peaks* peaks, bool amx_level);

// KV cells a context needs to run every test in `tests`.
int32_t kv_cells_needed(const std::vector<BenchTest>& tests, int32_t block_size);

// Runs one test `reps` times on ctx (times only; call compute_rates/apply_roofline after).
// Errors: the test does not fit the context's KV cache, or decode rejects a batch.
Result<BenchResult> run_test(Context& ctx, const BenchConfig& config, const BenchTest& test,
                             const BenchOptions& options);

struct MachineInfo {
  std::string simd;              // kernels::simd_level_name
  std::string simd_reason;       // kernels::simd_level_reason(): why not one level higher ("" at amx)
  // The matmul level per shape class (kernels::matmul_levels()): "decode avx2, small-batch
  // avx2, prefill avx2", how it was decided, and per class the level name; empty: unknown.
  std::string matmul_levels, matmul_levels_source;
  std::vector<std::pair<std::string, std::string>> matmul_level_by_class;  // (class, level)
  int hw_threads = 0;
  BandwidthResult bandwidth;     // gbps 0: not measured
  bool bandwidth_given = false;  // --bw-gbps overrode the probe
  struct Peak {
    int n_threads = 0;
    ComputePeak peak;
  };
  std::vector<Peak> peaks;       // per thread count
  bool peak_given = false;       // --peak-gflops overrode the probe
  double peak_for(int n_threads) const;  // 0 if unknown
  std::vector<Int8Peaks> int8_peaks;  // per thread count; empty: not measured
  const Int8Peaks* int8_peaks_for(int n_threads) const;  // nullptr if not measured
};

struct ModelInfo {
  std::string path;
  std::string desc;      // "gemma3 268M Q4_K"
  ModelCost cost;
};

// "llama 268M Q8_0" style description.
std::string describe_model(const Model& model, const ModelCost& cost);

struct BenchReport {
  ModelInfo model;
  MachineInfo machine;
  BenchOptions options;
  std::vector<BenchResult> results;
};

std::string format_markdown(const BenchReport& report);
std::string format_csv(const BenchReport& report);
nlohmann::json to_json(const BenchReport& report);

// The machine part of the reports (for `ubatch bench --peaks-only` too): Markdown list lines
// (SIMD level and reason, bandwidth, matmul and int8 peaks), the JSON "machine" object, and
// CSV with one row per probe: probe,n_threads,isa,measured,gbps,gmacs,gops,note.
std::string format_machine_markdown(const MachineInfo& machine);
nlohmann::json machine_json(const MachineInfo& machine);
std::string format_peaks_csv(const MachineInfo& machine);

}  // namespace ubatch::bench
