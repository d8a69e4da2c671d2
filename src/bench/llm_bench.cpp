#include "bench/llm_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <random>

#include "context/batch.h"
#include "grammar/matcher.h"

namespace ubatch::bench {

std::string BenchTest::name() const {
  std::string s;
  if (n_prompt > 0) s = fmt::format("pp{}", n_prompt);
  if (n_gen > 0) s += fmt::format("{}tg{}", s.empty() ? "" : "+", n_gen);
  if (s.empty()) s = "empty";
  if (batched) s += fmt::format(" B{}", n_seq);
  return s;
}

std::vector<BenchConfig> expand_configs(const std::vector<int64_t>& threads, const std::vector<int64_t>& n_batch,
                                        const std::vector<int64_t>& n_ubatch) {
  std::vector<BenchConfig> out;
  for (int64_t t : threads)
    for (int64_t b : n_batch)
      for (int64_t u : n_ubatch)
        out.push_back({static_cast<int32_t>(t), static_cast<int32_t>(b), static_cast<int32_t>(u)});
  return out;
}

std::vector<BenchTest> make_tests(const std::vector<int64_t>& n_prompt, const std::vector<int64_t>& n_gen,
                                  const std::vector<int64_t>& pp, const std::vector<int64_t>& tg,
                                  const std::vector<int64_t>& b_list) {
  std::vector<BenchTest> out;
  for (int64_t p : n_prompt)
    if (p > 0) out.push_back({static_cast<int32_t>(p), 0, 1, false});
  for (int64_t n : n_gen)
    if (n > 0) out.push_back({0, static_cast<int32_t>(n), 1, false});
  for (int64_t p : pp)
    for (int64_t g : tg)
      for (int64_t b : b_list)
        if (p + g > 0) out.push_back({static_cast<int32_t>(p), static_cast<int32_t>(g), static_cast<int32_t>(b), true});
  return out;
}

void compute_rates(BenchResult& r) {
  const double n_seq = r.test.n_seq;
  std::vector<double> pp, tg, total;
  for (size_t i = 0; i < r.prompt_s.size() && i < r.gen_s.size(); ++i) {
    const double ps = r.prompt_s[i], gs = r.gen_s[i];
    if (r.test.n_prompt > 0 && ps > 0) pp.push_back(n_seq * r.test.n_prompt / ps);
    if (r.test.n_gen > 0 && gs > 0) tg.push_back(n_seq * r.test.n_gen / gs);
    if (ps + gs > 0) total.push_back(n_seq * (r.test.n_prompt + r.test.n_gen) / (ps + gs));
  }
  r.prompt_tps = summarize(pp);
  r.gen_tps = summarize(tg);
  r.total_tps = summarize(total);
}

void apply_roofline(BenchResult& r, const ModelCost& cost, double bw_gbps, double peak_gflops) {
  std::vector<double> gbps, gflops;
  const double macs = prompt_macs(cost, r.test.n_prompt, r.test.n_seq);
  for (size_t i = 0; i < r.prompt_s.size() && i < r.gen_s.size(); ++i) {
    if (r.test.n_gen > 0 && r.gen_s[i] > 0)
      gbps.push_back(step_bytes(cost, r.test.n_seq) * r.test.n_gen / r.gen_s[i] / 1e9);
    if (r.test.n_prompt > 0 && r.prompt_s[i] > 0) gflops.push_back(2.0 * macs / r.prompt_s[i] / 1e9);
  }
  r.gen_gbps = mean(gbps);
  r.gen_bw_share = bw_gbps > 0 ? r.gen_gbps / bw_gbps : 0.0;
  r.prompt_gflops = mean(gflops);
  r.prompt_peak_share = peak_gflops > 0 ? r.prompt_gflops / peak_gflops : 0.0;
}

void apply_int8_roofline(BenchResult& r, const Int8Peaks* peaks, bool amx_level) {
  r.prompt_int8_share = r.prompt_amx_share = 0.0;
  r.int8_isa.clear();
  if (!peaks || r.prompt_gflops <= 0) return;
  if (const Int8Peak* v = peaks->best_vector(); v && v->gops() > 0) {
    r.int8_isa = int8_isa_name(v->isa);
    r.prompt_int8_share = r.prompt_gflops / v->gops();
  }
  if (amx_level && peaks->amx.measured && peaks->amx.gops() > 0) r.prompt_amx_share = r.prompt_gflops / peaks->amx.gops();
}

int32_t kv_cells_needed(const std::vector<BenchTest>& tests, int32_t block_size) {
  int64_t need = block_size;
  for (const BenchTest& t : tests) {
    const int64_t per_seq = (int64_t{t.n_prompt} + t.n_gen + block_size - 1) / block_size * block_size;
    need = std::max(need, per_seq * t.n_seq + block_size);
  }
  return static_cast<int32_t>(std::min<int64_t>(need, INT32_MAX / 2));
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

DecodeResult decode_or_explain(Context& ctx, const Batch& batch) {
  DecodeResult r = ctx.decode(batch);
  if (r.status == DecodeStatus::NoKvSpace)
    r.message += fmt::format(" (the KV cache holds {} tokens)", ctx.kv().n_cells());
  return r;
}

// Prefill: n_seq sequences of n_prompt random tokens from position 0, packed into batches of
// up to n_batch tokens; logits for each sequence's last token. Rows flagged chunkable as the
// scheduler flags a prompt (all but the last: Batch::chunkable).
DecodeResult run_prompt(Context& ctx, const BenchTest& t, std::mt19937_64& rng, Batch& batch) {
  std::uniform_int_distribution<int32_t> tok(0, ctx.n_vocab() - 1);
  const int32_t n_batch = ctx.params().n_batch;
  batch.clear();
  for (int32_t s = 0; s < t.n_seq; ++s) {
    for (int32_t p = 0; p < t.n_prompt; ++p) {
      batch.add(tok(rng), p, s, p + 1 == t.n_prompt);
      if (p + 1 < t.n_prompt) batch.mark_chunkable();
      if (batch.n_tokens() == n_batch) {
        if (DecodeResult r = decode_or_explain(ctx, batch); !r.ok()) return r;
        batch.clear();
      }
    }
  }
  if (batch.n_tokens() > 0) return decode_or_explain(ctx, batch);
  return {};
}

// One decode step: one random token per sequence at position pos (split into several
// decode calls only when n_seq > n_batch).
DecodeResult run_step(Context& ctx, const BenchTest& t, int32_t pos, std::mt19937_64& rng, Batch& batch) {
  std::uniform_int_distribution<int32_t> tok(0, ctx.n_vocab() - 1);
  const int32_t n_batch = ctx.params().n_batch;
  batch.clear();
  for (int32_t s = 0; s < t.n_seq; ++s) {
    batch.add(tok(rng), pos, s, true);
    if (batch.n_tokens() == n_batch) {
      if (DecodeResult r = decode_or_explain(ctx, batch); !r.ok()) return r;
      batch.clear();
    }
  }
  if (batch.n_tokens() > 0) return decode_or_explain(ctx, batch);
  return {};
}

// Constrained decoding state: a sampler and a matcher per sequence, and the tokens chosen.
struct Constrained {
  std::vector<Sampler> samplers;
  std::vector<grammar::Matcher> matchers;
  std::vector<int32_t> next;  // [n_seq] the token each sequence feeds at the next step
};

Constrained make_constrained(const BenchOptions& o, int32_t n_seq, int32_t n_vocab) {
  Constrained c;
  for (int32_t s = 0; s < n_seq; ++s) {
    SamplingParams sp = o.sampling;
    sp.seed += static_cast<uint64_t>(s);
    c.samplers.emplace_back(sp, n_vocab);
    c.matchers.emplace_back(o.grammar);
  }
  c.next.assign(static_cast<size_t>(n_seq), 0);
  return c;
}

// One decode step of the tokens c.next at position pos, then each sequence's next token under
// its grammar from the logits. Adds the decode and grammar seconds.
DecodeResult run_constrained_step(Context& ctx, const BenchTest& t, int32_t pos, Constrained& c, Batch& batch,
                                  BenchResult& r, double& decode_s, double& grammar_s) {
  const int32_t n_batch = ctx.params().n_batch;
  for (int32_t first = 0; first < t.n_seq; first += n_batch) {
    const int32_t last = std::min(t.n_seq, first + n_batch);
    batch.clear();
    for (int32_t s = first; s < last; ++s) batch.add(c.next[static_cast<size_t>(s)], pos, s, true);
    const auto t0 = Clock::now();
    if (DecodeResult d = decode_or_explain(ctx, batch); !d.ok()) return d;
    decode_s += seconds_since(t0);
    for (int32_t s = first; s < last; ++s) {
      const auto i = static_cast<size_t>(s);
      const float* logits = ctx.logits(s - first);
      const auto tg = Clock::now();
      std::shared_ptr<const grammar::TokenMask> mask = c.matchers[i].mask();
      if (mask->n_allowed == 0) {  // cannot happen with a vocabulary that spells every byte
        c.matchers[i].reset();
        mask = c.matchers[i].mask();
      }
      const float* masked = c.samplers[i].mask_logits(logits, mask->bits.data());
      grammar_s += seconds_since(tg);
      const int32_t tok = c.samplers[i].sample(masked, mask->bits.data());
      const auto ta = Clock::now();
      c.matchers[i].accept(tok);
      if (c.matchers[i].is_complete()) {  // a new sentence from here on
        c.matchers[i].reset();
        ++r.grammar_restarts;
      }
      grammar_s += seconds_since(ta);
      c.next[i] = tok;
      ++r.grammar_rows;
    }
  }
  return {};
}

}  // namespace

Result<BenchResult> run_test(Context& ctx, const BenchConfig& config, const BenchTest& test,
                             const BenchOptions& options) {
  if (test.n_seq < 1) return Status::error(fmt::format("bench: {}: need at least one sequence", test.name()));
  if (test.n_prompt < 0 || test.n_gen < 0) return Status::error(fmt::format("bench: {}: negative length", test.name()));
  if (options.reps < 1) return Status::error("bench: need at least one repetition");
  const int64_t cells = kv_cells_needed({test}, ctx.kv().block_size()) - ctx.kv().block_size();
  if (cells > ctx.kv().n_cells())
    return Status::error(fmt::format("bench: {} needs {} KV cells, the cache holds {}", test.name(), cells,
                                     ctx.kv().n_cells()));
  BenchResult r;
  r.config = config;
  r.test = test;
  r.n_threads = ctx.pool().n_threads();
  r.n_ubatch = ctx.params().n_ubatch;
  std::mt19937_64 rng(options.seed);
  Batch batch;
  if (options.warmup) {
    ctx.kv().clear();
    BenchTest w = test;
    w.n_prompt = std::min(test.n_prompt, ctx.params().n_batch / std::max(1, test.n_seq));
    if (w.n_prompt > 0)
      if (DecodeResult d = run_prompt(ctx, w, rng, batch); !d.ok()) return Status::error("bench: " + d.message);
    if (test.n_gen > 0)
      if (DecodeResult d = run_step(ctx, w, w.n_prompt, rng, batch); !d.ok()) return Status::error("bench: " + d.message);
  }
  for (int rep = 0; rep < options.reps; ++rep) {
    ctx.kv().clear();
    auto t0 = Clock::now();
    if (test.n_prompt > 0)
      if (DecodeResult d = run_prompt(ctx, test, rng, batch); !d.ok()) return Status::error("bench: " + d.message);
    r.prompt_s.push_back(test.n_prompt > 0 ? seconds_since(t0) : 0.0);
    t0 = Clock::now();
    if (options.grammar) {
      Constrained c = make_constrained(options, test.n_seq, ctx.n_vocab());
      std::uniform_int_distribution<int32_t> tok(0, ctx.n_vocab() - 1);
      for (int32_t& t : c.next) t = tok(rng);  // the first step feeds random tokens
      double decode_s = 0, grammar_s = 0;
      for (int32_t i = 0; i < test.n_gen; ++i)
        if (DecodeResult d = run_constrained_step(ctx, test, test.n_prompt + i, c, batch, r, decode_s, grammar_s); !d.ok())
          return Status::error("bench: " + d.message);
      r.decode_s.push_back(decode_s);
      r.grammar_s.push_back(grammar_s);
    } else {
      for (int32_t i = 0; i < test.n_gen; ++i)
        if (DecodeResult d = run_step(ctx, test, test.n_prompt + i, rng, batch); !d.ok())
          return Status::error("bench: " + d.message);
    }
    r.gen_s.push_back(test.n_gen > 0 ? seconds_since(t0) : 0.0);
  }
  ctx.kv().clear();
  compute_rates(r);
  return r;
}

double MachineInfo::peak_for(int n_threads) const {
  for (const Peak& p : peaks)
    if (p.n_threads == n_threads) return p.peak.gflops;
  return 0.0;
}

const Int8Peaks* MachineInfo::int8_peaks_for(int n_threads) const {
  for (const Int8Peaks& p : int8_peaks)
    if (p.n_threads == n_threads) return &p;
  return nullptr;
}

std::string describe_model(const Model& model, const ModelCost& cost) {
  const double p = static_cast<double>(cost.n_params);
  const std::string params = p >= 1e9 ? fmt::format("{:.1f}B", p / 1e9)
                             : p >= 1e6 ? fmt::format("{:.0f}M", p / 1e6)
                                        : fmt::format("{:.0f}K", p / 1e3);
  return fmt::format("{} {} {}", model.hparams().arch, params, tensor_type_name(cost.main_type));
}

namespace {

std::string mean_sd(const Summary& s) {
  if (s.n == 0) return "-";
  return fmt::format("{:.2f} ± {:.2f}", s.mean, s.sd);
}

std::string size_str(size_t bytes) {
  const double b = static_cast<double>(bytes);
  return b >= double(1u << 30) ? fmt::format("{:.2f} GiB", b / double(1u << 30)) : fmt::format("{:.2f} MiB", b / double(1u << 20));
}

// A CSV field in double quotes, inner quotes doubled.
std::string csv_quote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string params_str(uint64_t n) {
  const double p = static_cast<double>(n);
  return p >= 1e9 ? fmt::format("{:.2f} B", p / 1e9) : fmt::format("{:.2f} M", p / 1e6);
}

std::string bw_cell(const BenchResult& r) {
  if (r.test.n_gen <= 0 || r.gen_gbps <= 0) return "-";
  if (r.gen_bw_share <= 0) return fmt::format("{:.2f} GB/s", r.gen_gbps);
  return fmt::format("{:.2f} GB/s ({:.0f}% bw)", r.gen_gbps, 100.0 * r.gen_bw_share);
}

// "40.00 GFLOP/s (40% peak, 5% avx512-vnni, 1% amx)": the shares that were measured.
std::string peak_cell(const BenchResult& r) {
  if (r.test.n_prompt <= 0 || r.prompt_gflops <= 0) return "-";
  std::string shares;
  auto add = [&](double share, const std::string& what) {
    if (share > 0) shares += fmt::format("{}{:.0f}% {}", shares.empty() ? "" : ", ", 100.0 * share, what);
  };
  add(r.prompt_peak_share, "peak");
  add(r.prompt_int8_share, r.int8_isa);
  add(r.prompt_amx_share, "amx");
  if (shares.empty()) return fmt::format("{:.2f} GFLOP/s", r.prompt_gflops);
  return fmt::format("{:.2f} GFLOP/s ({})", r.prompt_gflops, shares);
}

// "prefill avx2 / decode avx2": the level of each phase the test has.
std::string levels_cell(const BenchResult& r) {
  std::string out = r.prompt_level;
  if (!r.gen_level.empty()) out += (out.empty() ? "" : " / ") + r.gen_level;
  return out.empty() ? "-" : out;
}

}  // namespace

std::string format_machine_markdown(const MachineInfo& m) {
  std::string out;
  out += fmt::format("- machine: {} hardware threads, SIMD {}{}\n", m.hw_threads, m.simd,
                     m.simd_reason.empty() ? "" : " (" + m.simd_reason + ")");
  if (!m.matmul_levels.empty())
    out += fmt::format("- matmul levels: {} ({})\n", m.matmul_levels, m.matmul_levels_source);
  if (m.bandwidth_given)
    out += fmt::format("- memory read bandwidth: {:.2f} GB/s (given)\n", m.bandwidth.gbps);
  else if (m.bandwidth.gbps > 0)
    out += fmt::format("- memory read bandwidth: {:.2f} GB/s (best of {} passes over {}, {} threads)\n",
                       m.bandwidth.gbps, m.bandwidth.n_runs, size_str(m.bandwidth.buffer_bytes), m.bandwidth.n_threads);
  for (const MachineInfo::Peak& p : m.peaks) {
    if (m.peak_given)
      out += fmt::format("- matmul peak: {:.2f} GFLOP/s (given)\n", p.peak.gflops);
    else
      out += fmt::format("- matmul peak ({} thread{}): {:.2f} GFLOP/s ({} weights, {} x {} slice, {} tokens)\n",
                         p.n_threads, p.n_threads == 1 ? "" : "s", p.peak.gflops, tensor_type_name(p.peak.type), p.peak.n_rows, p.peak.n_in,
                         p.peak.n_tokens);
  }
  for (const Int8Peaks& p : m.int8_peaks)
    out += fmt::format("- int8 peak ({} thread{}): {}\n", p.n_threads, p.n_threads == 1 ? "" : "s",
                       describe_int8_peaks(p));
  return out;
}

std::string format_markdown(const BenchReport& rep) {
  std::string out;
  const MachineInfo& m = rep.machine;
  const ModelCost& c = rep.model.cost;
  std::string parts;
  if (c.expert_bytes > 0)
    parts += fmt::format("; experts: {} of {} per token", c.n_expert_used, c.n_expert);
  if (c.state_bytes > 0)
    parts += fmt::format("; recurrent state {} per sequence, read and written each step", size_str(c.state_bytes));
  out += fmt::format("- model: {} ({}, {} params, {} streamed per decode step of one sequence{})\n", rep.model.path,
                     size_str(c.weight_bytes), params_str(c.n_params),
                     size_str(static_cast<size_t>(step_bytes(c, 1))), parts);
  out += format_machine_markdown(m);
  out += fmt::format("- repetitions: {}, seed {}\n\n", rep.options.reps, rep.options.seed);

  bool any_single = false, any_batched = false;
  for (const BenchResult& r : rep.results) (r.test.batched ? any_batched : any_single) = true;
  if (any_single) {
    out += "| model | size | params | threads | n_batch | n_ubatch | test | t/s | roofline | matmul level |\n";
    out += "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |\n";
    for (const BenchResult& r : rep.results) {
      if (r.test.batched) continue;
      const bool gen_only = r.test.n_prompt == 0;
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", rep.model.desc,
                         size_str(rep.model.cost.weight_bytes), params_str(rep.model.cost.n_params), r.n_threads,
                         r.config.n_batch, r.n_ubatch, r.test.name(),
                         mean_sd(gen_only ? r.gen_tps : r.test.n_gen == 0 ? r.prompt_tps : r.total_tps),
                         gen_only ? bw_cell(r) : peak_cell(r), levels_cell(r));
    }
  }
  if (any_batched) {
    if (any_single) out += "\n";
    out += "| threads | n_batch | n_ubatch | pp | tg | B | prompt t/s | gen t/s | total t/s | gen weights | prompt compute | matmul level (pp / tg) |\n";
    out += "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
    for (const BenchResult& r : rep.results) {
      if (!r.test.batched) continue;
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.n_threads, r.config.n_batch,
                         r.n_ubatch, r.test.n_prompt, r.test.n_gen, r.test.n_seq, mean_sd(r.prompt_tps),
                         mean_sd(r.gen_tps), mean_sd(r.total_tps), bw_cell(r), peak_cell(r), levels_cell(r));
    }
  }
  bool any_grammar = false;
  for (const BenchResult& r : rep.results) any_grammar = any_grammar || !r.grammar_s.empty();
  if (any_grammar) {
    out += fmt::format("\nConstrained decoding ({}): grammar work (masks, masking the logits, advancing) against the "
                       "decode calls of the same steps; the first repetition starts with cold grammar caches.\n\n",
                       rep.options.grammar_name);
    out += "| threads | B | tg | decode ms/step | grammar ms/step | grammar / decode: rep 1 (cold) | later reps min / median / max | sentences completed |\n";
    out += "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const BenchResult& r : rep.results) {
      if (r.grammar_s.empty() || r.test.n_gen <= 0) continue;
      std::vector<double> later;
      for (size_t i = 1; i < r.grammar_s.size(); ++i)
        if (r.decode_s[i] > 0) later.push_back(r.grammar_s[i] / r.decode_s[i]);
      std::sort(later.begin(), later.end());
      const std::string warm = later.empty() ? "-"
                                             : fmt::format("{:.2f}% / {:.2f}% / {:.2f}%", 100 * later.front(),
                                                           100 * later[later.size() / 2], 100 * later.back());
      out += fmt::format("| {} | {} | {} | {:.2f} | {:.3f} | {:.2f}% | {} | {} |\n", r.n_threads, r.test.n_seq,
                         r.test.n_gen, 1000 * mean(r.decode_s) / r.test.n_gen, 1000 * mean(r.grammar_s) / r.test.n_gen,
                         r.decode_s[0] > 0 ? 100 * r.grammar_s[0] / r.decode_s[0] : 0.0, warm, r.grammar_restarts);
    }
  }
  return out;
}

std::string format_csv(const BenchReport& rep) {
  std::string out =
      "model,test,n_prompt,n_gen,n_seq,threads,n_batch,n_ubatch,reps,"
      "prompt_tps_mean,prompt_tps_sd,gen_tps_mean,gen_tps_sd,total_tps_mean,total_tps_sd,"
      "gen_weight_gbps,gen_bw_share,prompt_gflops,prompt_peak_share,mem_bw_gbps,matmul_peak_gflops,"
      "simd,int8_isa,int8_peak_gops,prompt_int8_share,amx_peak_gops,prompt_amx_share,prompt_level,gen_level\n";
  for (const BenchResult& r : rep.results) {
    out += fmt::format("{},{},{},{},{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f}",
                       csv_quote(rep.model.desc), csv_quote(r.test.name()), r.test.n_prompt, r.test.n_gen, r.test.n_seq,
                       r.n_threads, r.config.n_batch, r.n_ubatch, r.prompt_s.size(), r.prompt_tps.mean,
                       r.prompt_tps.sd, r.gen_tps.mean, r.gen_tps.sd, r.total_tps.mean, r.total_tps.sd, r.gen_gbps,
                       r.gen_bw_share, r.prompt_gflops, r.prompt_peak_share, rep.machine.bandwidth.gbps,
                       rep.machine.peak_for(r.n_threads));
    const Int8Peaks* p8 = rep.machine.int8_peaks_for(r.n_threads);
    const Int8Peak* vec = p8 ? p8->best_vector() : nullptr;
    out += fmt::format(",{},{},{:.4f},{:.4f},{:.4f},{:.4f},{},{}\n", csv_quote(rep.machine.simd), csv_quote(r.int8_isa),
                       vec ? vec->gops() : 0.0, r.prompt_int8_share, p8 ? p8->amx.gops() : 0.0, r.prompt_amx_share,
                       csv_quote(r.prompt_level), csv_quote(r.gen_level));
  }
  return out;
}

namespace {
nlohmann::json summary_json(const Summary& s) {
  return {{"n", s.n}, {"mean", s.mean}, {"sd", s.sd}, {"min", s.min}, {"max", s.max}};
}
}  // namespace

nlohmann::json machine_json(const MachineInfo& m) {
  nlohmann::json peaks = nlohmann::json::array();
  for (const MachineInfo::Peak& p : m.peaks)
    peaks.push_back({{"n_threads", p.n_threads},
                     {"gflops", p.peak.gflops},
                     {"given", m.peak_given},
                     {"type", std::string(tensor_type_name(p.peak.type))},
                     {"n_rows", p.peak.n_rows},
                     {"n_in", p.peak.n_in},
                     {"n_tokens", p.peak.n_tokens}});
  nlohmann::json int8 = nlohmann::json::array();
  for (const Int8Peaks& p : m.int8_peaks) int8.push_back(int8_peaks_json(p));
  nlohmann::json levels = nlohmann::json::object();
  for (const auto& [cls, level] : m.matmul_level_by_class) levels[cls] = level;
  if (!m.matmul_levels_source.empty()) levels["source"] = m.matmul_levels_source;
  return {{"simd", m.simd},
          {"simd_reason", m.simd_reason},
          {"matmul_levels", levels},
          {"hw_threads", m.hw_threads},
          {"mem_read_bw", {{"gbps", m.bandwidth.gbps},
                           {"mean_gbps", m.bandwidth.mean_gbps},
                           {"given", m.bandwidth_given},
                           {"buffer_bytes", m.bandwidth.buffer_bytes},
                           {"n_threads", m.bandwidth.n_threads},
                           {"n_runs", m.bandwidth.n_runs}}},
          {"matmul_peak", peaks},
          {"int8_peak", int8}};
}

std::string format_peaks_csv(const MachineInfo& m) {
  std::string out = "probe,n_threads,isa,measured,gbps,gmacs,gops,note\n";
  if (m.bandwidth.gbps > 0)
    out += fmt::format("mem_read_bw,{},,1,{:.4f},,,{}\n", m.bandwidth.n_threads, m.bandwidth.gbps,
                       csv_quote(m.bandwidth_given ? "given" : fmt::format("{} MiB, best of {}", m.bandwidth.buffer_bytes >> 20,
                                                                      m.bandwidth.n_runs)));
  for (const Int8Peaks& p : m.int8_peaks)
    for (const Int8Peak* q : {&p.avx512_vnni, &p.avx2, &p.amx})
      out += fmt::format("int8_peak,{},{},{},,{:.4f},{:.4f},{}\n", p.n_threads, int8_isa_name(q->isa),
                         q->measured ? 1 : 0, q->gmacs, q->gops(), csv_quote(q->why));
  return out;
}

nlohmann::json to_json(const BenchReport& rep) {
  nlohmann::json j;
  const ModelCost& c = rep.model.cost;
  j["model"] = {{"path", rep.model.path},
                {"desc", rep.model.desc},
                {"weight_bytes", c.weight_bytes},
                {"streamed_bytes_per_step", static_cast<uint64_t>(step_bytes(c, 1))},
                {"packed_weight_bytes", c.streamed_bytes},
                {"expert_bytes", c.expert_bytes},
                {"n_expert", c.n_expert},
                {"n_expert_used", c.n_expert_used},
                {"state_bytes_per_sequence", c.state_bytes},
                {"n_params", c.n_params},
                {"layer_matmul_params", c.layer_params},
                {"output_params", c.output_params},
                {"main_type", std::string(tensor_type_name(c.main_type))}};
  j["machine"] = machine_json(rep.machine);
  j["options"] = {{"reps", rep.options.reps}, {"seed", rep.options.seed}, {"warmup", rep.options.warmup},
                  {"kv_type", std::string(tensor_type_name(rep.options.kv_type))},
                  {"state_type", std::string(tensor_type_name(rep.options.state_type))}};
  nlohmann::json results = nlohmann::json::array();
  for (const BenchResult& r : rep.results) {
    results.push_back({{"test", r.test.name()},
                       {"n_prompt", r.test.n_prompt},
                       {"n_gen", r.test.n_gen},
                       {"n_seq", r.test.n_seq},
                       {"batched", r.test.batched},
                       {"n_threads", r.n_threads},
                       {"n_batch", r.config.n_batch},
                       {"n_ubatch", r.n_ubatch},
                       {"prompt_s", r.prompt_s},
                       {"gen_s", r.gen_s},
                       {"prompt_tps", summary_json(r.prompt_tps)},
                       {"gen_tps", summary_json(r.gen_tps)},
                       {"total_tps", summary_json(r.total_tps)},
                       {"gen_weight_gbps", r.gen_gbps},
                       {"gen_bw_share", r.gen_bw_share},
                       {"prompt_gflops", r.prompt_gflops},
                       {"prompt_peak_share", r.prompt_peak_share},
                       {"int8_isa", r.int8_isa},
                       {"prompt_int8_share", r.prompt_int8_share},
                       {"prompt_amx_share", r.prompt_amx_share},
                       {"prompt_level", r.prompt_level},
                       {"gen_level", r.gen_level},
                       {"constrained_decode_s", r.decode_s},
                       {"constrained_grammar_s", r.grammar_s},
                       {"constrained_rows", r.grammar_rows},
                       {"constrained_sentences", r.grammar_restarts}});
  }
  j["results"] = results;
  return j;
}

}  // namespace ubatch::bench
