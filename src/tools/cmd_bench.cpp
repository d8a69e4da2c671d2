// `ubatch bench`: prompt-processing, generation and batched throughput of the engine on
// random token ids, over repetitions and every combination of --threads, --n-batch and
// --n-ubatch, with each result's share of the measured roofline (memory read bandwidth for
// generation, the matmul kernel's peak and the int8 multiply-accumulate peaks for prompt
// processing). --peaks-only runs just the machine probes (bandwidth, int8 peaks), no model.
// Logic in bench/llm_bench.h; usage in docs/BENCH_TOOLS.md.
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "bench/args.h"
#include "common/cpu_topology.h"
#include "bench/int8_peak.h"
#include "bench/llm_bench.h"
#include "bench/membw.h"
#include "bench/roofline.h"
#include "gguf/gguf.h"
#include "grammar/grammar_cache.h"
#include "tokenizer/tokenizer.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "tools/command.h"
#include "tools/options.h"
#include "tools/spec_bench.h"
#include "common/large_buffer.h"

namespace ubatch::tools {
namespace {

struct BenchCliOptions {
  std::string model;
  std::string n_prompt = "512", n_gen = "128";
  std::string pp = "128", tg = "128", batch_sizes;
  std::string threads, n_batch = "2048", n_ubatch = "512";
  std::string kv_type = "f16";
  std::string state_type = "f32";
  std::string output = "md";
  int reps = 5;
  uint64_t seed = 1234;
  bool no_warmup = false;
  bool no_roofline = false;
  bool peaks_only = false;
  double bw_gbps = 0, peak_gflops = 0;
  int64_t bw_mib = 0;
  int probe_runs = 5;
  bool single_given = false;  // -p or -n on the command line
  std::string grammar_file, json_schema_file;  // constrained decoding
  float temperature = 0.8f;                    // its sampling (--temp when given)
  // Speculative decoding (tools/spec_bench.h): prompt files or directories of *.txt.
  std::string spec = "0,16";
  std::string spec_prompts;
  int32_t spec_n = 256;
  SamplingParams sampling;
};

template <typename T>
bool ok_or_print(const Result<T>& r) {
  if (!r) fmt::print(stderr, "error: {}\n", r.message());
  return r.is_ok();
}

// Where a pool of `t` threads runs: where serve and run would put it (the fast cores of a
// heterogeneous CPU) when --threads was not given and t is the default count; else anywhere.
std::vector<int> bench_cpus(const BenchCliOptions& o, int64_t t) {
  if (!o.threads.empty()) return {};
  const ThreadChoice c = default_thread_choice();
  return t == c.n_threads ? c.cpus : std::vector<int>{};
}

// The machine probes that need no model, unless --no-roofline: memory read bandwidth with the
// largest thread count (or --bw-gbps), then the int8 peaks per thread count. False on error
// (printed).
bool probe_machine(const BenchCliOptions& o, const std::set<int64_t>& thread_counts, bench::MachineInfo& m) {
  using namespace ubatch::bench;
  // The level the matmul runs at (the AMX self-check may keep it on AVX-512).
  std::string lowered;
  m.simd = kernels::simd_level_name(kernels::matmul_simd_level(&lowered));
  m.simd_reason = lowered.empty() ? kernels::simd_level_reason() : lowered;
  const kernels::MatmulLevels& levels = kernels::matmul_levels();
  m.matmul_levels = kernels::describe_level_plan(levels.plan);
  m.matmul_levels_source = levels.source;
  for (int c = 0; c < kernels::kShapeClasses; ++c)
    m.matmul_level_by_class.emplace_back(kernels::shape_class_name(static_cast<kernels::ShapeClass>(c)),
                                         kernels::simd_level_name(levels.plan.level[c]));
  if (o.bw_gbps > 0) {
    m.bandwidth.gbps = o.bw_gbps;
    m.bandwidth_given = true;
  } else if (!o.no_roofline) {
    kernels::ThreadPool pool(static_cast<int>(*thread_counts.rbegin()), bench_cpus(o, *thread_counts.rbegin()));
    const size_t bytes = o.bw_mib > 0 ? static_cast<size_t>(o.bw_mib) << 20 : default_bandwidth_buffer_bytes();
    fmt::print(stderr, "bench: measuring memory read bandwidth ({} MiB, {} threads)...\n", bytes >> 20, pool.n_threads());
    Result<BandwidthResult> bw = measure_read_bandwidth(pool, bytes, o.probe_runs);
    if (!ok_or_print(bw)) return false;
    m.bandwidth = bw.value();
  }
  if (o.no_roofline) return true;
  for (int64_t t : thread_counts) {
    kernels::ThreadPool pool(static_cast<int>(t), bench_cpus(o, t));
    fmt::print(stderr, "bench: measuring int8 multiply-accumulate peaks ({} threads)...\n", pool.n_threads());
    Result<Int8Peaks> peaks = measure_int8_peaks(pool, o.probe_runs);
    if (!ok_or_print(peaks)) return false;
    m.int8_peaks.push_back(peaks.value());
  }
  return true;
}

// --peaks-only: the machine probes in the chosen format, no model.
int run_peaks_only(const BenchCliOptions& o, const std::set<int64_t>& thread_counts) {
  bench::MachineInfo m;
  m.hw_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!probe_machine(o, thread_counts, m)) return 1;
  if (o.output == "csv")
    fmt::print("{}", bench::format_peaks_csv(m));
  else if (o.output == "json")
    fmt::print("{}\n", nlohmann::json{{"machine", bench::machine_json(m)}}.dump(2));
  else
    fmt::print("{}", bench::format_machine_markdown(m));
  return 0;
}

// --spec-prompts: generation from prompt files with speculation off and on (spec_bench.h).
int run_spec(const BenchCliOptions& o) {
  Result<std::vector<SpecSetting>> settings = parse_spec_settings(o.spec);
  if (!ok_or_print(settings)) return 1;
  SpecBenchOptions so;
  so.settings = settings.value();
  so.sampling = o.sampling;
  so.n_gen = o.spec_n;
  so.reps = o.reps;
  std::string item;
  std::istringstream in(o.spec_prompts);
  while (std::getline(in, item, ',')) {
    std::error_code ec;
    if (std::filesystem::is_directory(item, ec)) {
      std::vector<std::string> files;
      for (const auto& e : std::filesystem::directory_iterator(item, ec))
        if (e.path().extension() == ".txt") files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      so.prompt_files.insert(so.prompt_files.end(), files.begin(), files.end());
    } else {
      so.prompt_files.push_back(item);
    }
  }
  if (so.prompt_files.empty()) return fmt::print(stderr, "error: --spec-prompts names no prompt files\n"), 1;
  auto first = [](const std::string& list, int64_t dflt) {
    Result<std::vector<int64_t>> v = bench::parse_int_list(list, "list", 0, 1 << 20);
    return v && !v->empty() ? v->front() : dflt;
  };
  ModelOptions mo;
  mo.model = o.model;
  mo.n_threads = static_cast<int32_t>(first(o.threads, 0));
  mo.n_batch = static_cast<int32_t>(first(o.n_batch, 2048));
  mo.n_ubatch = static_cast<int32_t>(first(o.n_ubatch, 512));
  mo.n_ctx = 8192;
  mo.kv_type = o.kv_type;
  mo.state_type = o.state_type;
  Result<Loaded> loaded = load(mo, true);
  if (!loaded) return fmt::print(stderr, "error: {}\n", loaded.message()), 1;
  Result<std::vector<SpecBenchRow>> rows = run_spec_bench(*loaded->context, *loaded->tokenizer, so);
  if (!ok_or_print(rows)) return 1;
  if (o.output == "csv") {
    fmt::print("{}", format_spec_csv(rows.value()));
  } else if (o.output == "json") {
    fmt::print("{}\n", nlohmann::json{{"model", o.model},
                                      {"threads", loaded->context->pool().n_threads()},
                                      {"reps", o.reps},
                                      {"n_gen", o.spec_n},
                                      {"temperature", o.sampling.temperature},
                                      {"results", spec_json(rows.value())}}
                           .dump(2));
  } else {
    fmt::print("- model: {}, {} threads, {} rounds (settings alternate order each round), up to {} tokens, "
               "temperature {}, seed {}\n\n{}",
               o.model, loaded->context->pool().n_threads(), o.reps, o.spec_n, o.sampling.temperature, o.sampling.seed,
               format_spec_markdown(rows.value()));
  }
  return 0;
}

int run_bench(const BenchCliOptions& o) {
  using namespace ubatch::bench;
  if (!o.spec_prompts.empty()) return run_spec(o);
  constexpr int64_t kMaxLen = 1 << 20;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto n_prompt = parse_int_list(o.n_prompt, "-p/--n-prompt", 0, kMaxLen);
  auto n_gen = parse_int_list(o.n_gen, "-n/--n-gen", 0, kMaxLen);
  auto pp = parse_int_list(o.pp, "--pp", 0, kMaxLen);
  auto tg = parse_int_list(o.tg, "--tg", 0, kMaxLen);
  auto threads = parse_int_list(o.threads.empty() ? std::to_string(default_thread_choice().n_threads) : o.threads,
                                "--threads", 1, 4096);
  auto n_batch = parse_int_list(o.n_batch, "--n-batch", 1, kMaxLen);
  auto n_ubatch = parse_int_list(o.n_ubatch, "--n-ubatch", 1, kMaxLen);
  if (!ok_or_print(n_prompt) || !ok_or_print(n_gen) || !ok_or_print(pp) || !ok_or_print(tg) ||
      !ok_or_print(threads) || !ok_or_print(n_batch) || !ok_or_print(n_ubatch))
    return 1;
  const std::set<int64_t> thread_counts(threads->begin(), threads->end());
  if (o.peaks_only) return run_peaks_only(o, thread_counts);
  std::vector<int64_t> b_list;
  if (!o.batch_sizes.empty()) {
    auto b = parse_int_list(o.batch_sizes, "-B/--batch-sizes", 1, 65536);
    if (!ok_or_print(b)) return 1;
    b_list = b.value();
  }
  // With batched runs requested, the single-sequence defaults run only when asked for.
  const bool single = b_list.empty() || o.single_given;
  const std::vector<BenchTest> tests = make_tests(single ? n_prompt.value() : std::vector<int64_t>{},
                                                  single ? n_gen.value() : std::vector<int64_t>{}, pp.value(),
                                                  tg.value(), b_list);
  if (tests.empty()) return fmt::print(stderr, "error: no tests to run (all lengths are 0)\n"), 1;

  Result<std::unique_ptr<Model>> loaded = Model::load_file(o.model);
  if (!loaded) return fmt::print(stderr, "error: {}: {}\n", o.model, loaded.message()), 1;
  std::shared_ptr<Model> model(std::move(loaded.value()));
  fmt::print(stderr, "bench: {}\n", huge_page_summary());

  BenchReport report;
  report.model.path = o.model;
  report.model.cost = model_cost(*model);
  // The roofline counts each sequence's state in the storage this run uses.
  report.model.cost.state_bytes = state_bytes_per_sequence(model->hparams(), state_type_of(o.state_type));
  report.model.desc = describe_model(*model, report.model.cost);
  report.options.reps = o.reps;
  report.options.seed = o.seed;
  report.options.warmup = !o.no_warmup;
  report.options.kv_type = kv_type_of(o.kv_type);
  report.options.state_type = state_type_of(o.state_type);
  MachineInfo& m = report.machine;
  m.hw_threads = hw;

  // Roofline probes.
  if (!probe_machine(o, thread_counts, m)) return 1;
  for (int64_t t : thread_counts) {
    MachineInfo::Peak p;
    p.n_threads = static_cast<int>(t);
    if (o.peak_gflops > 0) {
      p.peak.gflops = o.peak_gflops;
      p.peak.type = report.model.cost.main_type;
      p.peak.n_threads = p.n_threads;
      m.peak_given = true;
    } else if (!o.no_roofline) {
      kernels::ThreadPool pool(p.n_threads, bench_cpus(o, p.n_threads));
      fmt::print(stderr, "bench: measuring matmul peak ({} threads)...\n", pool.n_threads());
      Result<ComputePeak> peak = measure_matmul_peak(*model, pool, o.probe_runs);
      if (!ok_or_print(peak)) return 1;
      p.peak = peak.value();
    } else {
      continue;
    }
    m.peaks.push_back(p);
  }

  // Constrained decoding: the grammar compiled for the model's vocabulary.
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<grammar::GrammarCache> grammars;
  if (!o.grammar_file.empty() || !o.json_schema_file.empty()) {
    const bool gbnf = !o.grammar_file.empty();
    const std::string& path = gbnf ? o.grammar_file : o.json_schema_file;
    std::ifstream in(path, std::ios::binary);
    if (!in) return fmt::print(stderr, "error: cannot read {}\n", path), 1;
    std::stringstream text;
    text << in.rdbuf();
    Result<std::unique_ptr<gguf::File>> file = gguf::File::open(o.model);
    if (!ok_or_print(file)) return 1;
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*file.value());
    if (!ok_or_print(tok)) return 1;
    tokenizer = std::move(tok.value());
    grammars = std::make_unique<grammar::GrammarCache>(*tokenizer);
    auto g = grammars->get(gbnf ? grammar::GrammarKind::Gbnf : grammar::GrammarKind::JsonSchema, text.str());
    if (!g) return fmt::print(stderr, "error: {}: {}\n", path, g.message()), 1;
    report.options.grammar = g.value();
    report.options.grammar_name = std::filesystem::path(path).filename().string();
    report.options.sampling.temperature = o.temperature;
    report.options.sampling.seed = o.seed;
  }
  BenchOptions bo = report.options;
  for (const BenchConfig& cfg : expand_configs(threads.value(), n_batch.value(), n_ubatch.value())) {
    ContextParams cp;
    cp.n_ctx = kv_cells_needed(tests, cp.kv_block_size);
    cp.n_batch = cfg.n_batch;
    cp.n_ubatch = cfg.n_ubatch;
    cp.n_threads = cfg.n_threads;
    cp.cpus = bench_cpus(o, cfg.n_threads);
    cp.kv_type = bo.kv_type;
    cp.state_type = bo.state_type;
    Result<std::unique_ptr<Context>> ctx = Context::create(model, cp);
    if (!ok_or_print(ctx)) return 1;
    for (const BenchTest& t : tests) {
      fmt::print(stderr, "bench: {} (threads {}, n_batch {}, n_ubatch {}, {} reps)\n", t.name(), cfg.n_threads,
                 cfg.n_batch, cfg.n_ubatch, bo.reps);
      Result<BenchResult> r = run_test(**ctx, cfg, t, bo);
      if (!ok_or_print(r)) return 1;
      apply_roofline(r.value(), report.model.cost, m.bandwidth.gbps, m.peak_for(r->n_threads));
      const kernels::LevelPlan& plan = kernels::matmul_levels().plan;
      // Rows per matmul: a prompt ubatch (the layers' matrices; the output projection of a
      // prompt has one row per sequence), a generation step's B rows.
      const int64_t prompt_rows = std::min<int64_t>(r->n_ubatch, int64_t{t.n_prompt} * t.n_seq);
      const std::string phase_class[2] = {kernels::shape_class_name(kernels::shape_class(prompt_rows)),
                                          kernels::shape_class_name(kernels::shape_class(t.n_seq))};
      if (t.n_prompt > 0) r->prompt_level = phase_class[0] + " " + kernels::simd_level_name(plan.at(prompt_rows));
      if (t.n_gen > 0) r->gen_level = phase_class[1] + " " + kernels::simd_level_name(plan.at(t.n_seq));
      apply_int8_roofline(r.value(), m.int8_peaks_for(r->n_threads), plan.at(prompt_rows) == kernels::SimdLevel::Amx);
      report.results.push_back(std::move(r.value()));
    }
  }

  if (o.output == "csv")
    fmt::print("{}", format_csv(report));
  else if (o.output == "json")
    fmt::print("{}\n", to_json(report).dump(2));
  else
    fmt::print("{}", format_markdown(report));
  return 0;
}

std::function<int()> setup_bench(CLI::App& sub) {
  auto o = std::make_shared<BenchCliOptions>();
  o->model = default_model_path();
  sub.add_option("-m,--model", o->model, "GGUF model file")->capture_default_str();
  CLI::Option* p = sub.add_option("-p,--n-prompt", o->n_prompt, "prompt lengths, comma list (ppN tests; 0 skips)")
                       ->capture_default_str();
  CLI::Option* n = sub.add_option("-n,--n-gen", o->n_gen, "generation lengths, comma list (tgN tests; 0 skips)")
                       ->capture_default_str();
  sub.add_option("--pp", o->pp, "batched runs: prompt tokens per sequence, comma list")->capture_default_str();
  sub.add_option("--tg", o->tg, "batched runs: decode steps, comma list")->capture_default_str();
  sub.add_option("-B,--batch-sizes", o->batch_sizes,
                 "batched runs: sequences run together, comma list (e.g. 1,2,4,8,16,32); with -B, -p/-n run only when given");
  sub.add_option("-r,--repetitions", o->reps, "repetitions of each test")->capture_default_str()->check(CLI::Range(1, 1000));
  sub.add_option("-t,--threads", o->threads, "thread counts, comma list (default: as serve and run choose, see `ubatch info`)");
  sub.add_option("-b,--n-batch", o->n_batch, "logical batch sizes, comma list")->capture_default_str();
  sub.add_option("-u,--n-ubatch", o->n_ubatch, "micro-batch sizes, comma list")->capture_default_str();
  sub.add_option("--kv-type", o->kv_type, "KV cache storage type")->capture_default_str()
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}));
  sub.add_option("--state-type", o->state_type, "recurrent state storage of hybrid models")->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  sub.add_option("-o,--output", o->output, "output format")->capture_default_str()
      ->check(CLI::IsMember({"md", "csv", "json"}));
  sub.add_option("-s,--seed", o->seed, "seed of the random token ids (with --spec-prompts: the sampling seed)")
      ->capture_default_str();
  sub.add_flag("--no-warmup", o->no_warmup, "skip the untimed warm-up decode before each test");
  CLI::Option* no_roofline =
      sub.add_flag("--no-roofline", o->no_roofline, "skip the bandwidth, matmul-peak and int8-peak probes");
  sub.add_flag("--peaks-only", o->peaks_only,
               "run only the machine probes (memory bandwidth, int8 peaks per --threads value), print them and exit; "
               "no model is loaded")
      ->excludes(no_roofline);
  sub.add_option("--bw-gbps", o->bw_gbps, "use this memory bandwidth (GB/s) instead of measuring it")
      ->check(CLI::PositiveNumber);
  sub.add_option("--peak-gflops", o->peak_gflops, "use this compute peak (GFLOP/s) instead of measuring it")
      ->check(CLI::PositiveNumber);
  sub.add_option("--bw-mib", o->bw_mib, "bandwidth probe buffer in MiB (default: max(1 GiB, 4 x last-level cache))")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub.add_option("--probe-runs", o->probe_runs, "runs of each probe (the best counts)")->capture_default_str()
      ->check(CLI::Range(1, 100));
  CLI::Option* gr = sub.add_option("--grammar", o->grammar_file,
                                   "constrained decoding: sample every generated token under this GBNF grammar (file) "
                                   "and time the grammar work against the decode calls");
  sub.add_option("--json-schema", o->json_schema_file, "constrained decoding under a JSON Schema (file)")->excludes(gr);
  sub.add_option("--spec", o->spec,
                 "with --spec-prompts: speculation settings to compare, comma list of K or N:K (draft tokens K, "
                 "n-gram length N, default the engine's; 0: off, the baseline of the speedup column; a trailing 'a': "
                 "--spec-always)")
      ->capture_default_str();
  sub.add_option("--spec-prompts", o->spec_prompts,
                 "benchmark speculative decoding instead: single-sequence generation from these prompt files "
                 "(comma list; a directory means its *.txt files), e.g. bench/spec");
  sub.add_option("--spec-n", o->spec_n, "with --spec-prompts: tokens to generate per run")->capture_default_str()
      ->check(CLI::Range(2, 1 << 20));
  o->sampling.temperature = 0;  // greedy unless --temp says otherwise
  add_sampling_options(sub, o->sampling, false);  // --seed is shared (below)
  CLI::Option* temp = sub.get_option("--temp");
  return [o, p, n, temp] {
    o->sampling.seed = o->seed;
    // Constrained decoding samples at 0.8 unless --temp is given; --spec-prompts runs greedy.
    o->temperature = temp->count() > 0 ? o->sampling.temperature : 0.8f;
    o->single_given = p->count() > 0 || n->count() > 0;
    return run_bench(*o);
  };
}

UBATCH_REGISTER_COMMAND("bench", "benchmark prompt processing, generation and batched decoding (roofline shares)", setup_bench);

}  // namespace
}  // namespace ubatch::tools
