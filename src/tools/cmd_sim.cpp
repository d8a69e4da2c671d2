// `ubatch sim`: replay simulated users against the scheduler on a virtual clock, with a
// step-time cost model (given, or fitted from steps measured on a real model with --fit).
#include <algorithm>
#include <chrono>
#include <mutex>
#include <cstdio>
#include <fmt/format.h>
#include <sstream>

#include <atomic>
#include <thread>

#include "sched/engine.h"
#include "sched/sim.h"
#include "tools/command.h"
#include "tools/options.h"

namespace ubatch::tools {
namespace {

struct SimOptions {
  ModelOptions model;
  bool fit = false;
  bool real = false;
  std::string cost = "4,0.35,0.5";
  std::string policies = "static,grouped,ubatch";
  std::string users = "4,16,64";
  double rate = 0.0;
  int32_t requests = 0;  // 0: 4 per user
  std::string prompt_tokens = "16:256";
  std::string max_tokens = "16:128";
  int32_t n_parallel = 8;
  int32_t n_batch = 512;
  int32_t n_ctx_sim = 16384;
  double batch_window_ms = 0.0;
  double lambda = 1.0, mu = 1.0;
  double aging_ms = sched::EngineConfig{}.aging_ms;
  int32_t preempt_margin = sched::EngineConfig{}.preempt_margin;
  double preempt_min_run_ms = sched::EngineConfig{}.preempt_min_run_ms;
  double urgent_share = 0.0;
  int32_t urgent_priority = 10;
  int64_t urgent_deadline_ms = 0;
  uint64_t seed = 1;
  sched::EngineConfig spec;  // the speculative-decoding fields (--spec-*)
};

bool parse_range(const std::string& s, int32_t& lo, int32_t& hi) {
  const size_t colon = s.find(':');
  try {
    lo = std::stoi(s.substr(0, colon));
    hi = colon == std::string::npos ? lo : std::stoi(s.substr(colon + 1));
  } catch (...) {
    return false;
  }
  return lo >= 1 && hi >= lo;
}

using Clock = std::chrono::steady_clock;

// Times real decode steps: B sequences × 1 token (decode) and 1 sequence × T tokens (prefill).
Result<sched::sim::CostModel> fit_from_model(const ModelOptions& mo) {
  ModelOptions o = mo;
  if (o.n_ctx <= 0) o.n_ctx = 8192;
  Result<Loaded> loaded = load(o, false);
  if (!loaded) return loaded.status();
  Context& ctx = *loaded->context;
  std::vector<std::array<double, 3>> samples;
  auto timed = [&](const Batch& b) {
    const auto t0 = Clock::now();
    DecodeResult r = ctx.decode(b);
    UBATCH_CHECK_MSG(r.ok(), r.message.c_str());
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  const int32_t n_vocab = ctx.n_vocab();
  for (int32_t B : {1, 2, 4, 8, 16, 32}) {
    ctx.kv().clear();
    Batch b;
    for (int32_t s = 0; s < B; ++s)
      for (int32_t i = 0; i < 32; ++i) b.add((s * 131 + i * 17) % n_vocab, i, s, false);
    timed(b);
    for (int rep = 0; rep < 4; ++rep) {
      b.clear();
      for (int32_t s = 0; s < B; ++s) b.add((s * 7 + rep) % n_vocab, 32 + rep, s, true);
      samples.push_back({double(B), double(B), timed(b)});
    }
  }
  for (int32_t T : {32, 64, 128, 256, 512}) {
    for (int rep = 0; rep < 2; ++rep) {
      ctx.kv().clear();
      Batch b;
      for (int32_t i = 0; i < T; ++i) b.add((i * 13 + rep) % n_vocab, i, 0, i + 1 == T);
      samples.push_back({double(T), 1.0, timed(b)});
    }
  }
  for (const auto& s : samples) fmt::print(stderr, "fit sample: tokens {:4.0f} sequences {:3.0f} -> {:8.2f} ms\n", s[0], s[1], s[2]);
  return sched::sim::fit_cost_model(samples);
}

// Runs the workload through the real engine on the model: n_users client threads, each
// sending its next request when the previous one ends. Returns generated tokens/s and TTFT p50.
Result<sched::sim::SimResult> run_real(const ModelOptions& mo, const sched::EngineConfig& cfg,
                                       const sched::sim::Workload& w) {
  ModelOptions o = mo;
  if (o.n_ctx <= 0) o.n_ctx = 8192;
  Result<Loaded> loaded = load(o, true);
  if (!loaded) return loaded.status();
  sched::Engine engine(*loaded->context, *loaded->tokenizer, cfg);
  const std::vector<sched::Request> reqs = sched::sim::workload_requests(w, loaded->context->n_vocab());
  std::atomic<size_t> next{0};
  std::atomic<int64_t> generated{0};
  std::mutex mu;
  std::vector<double> ttft;
  int32_t completed = 0;
  const auto t0 = Clock::now();
  std::vector<std::thread> users;
  for (int32_t u = 0; u < w.n_users; ++u) {
    users.emplace_back([&] {
      for (size_t i = next++; i < reqs.size(); i = next++) {
        sched::Engine::Submitted s = engine.submit(reqs[i]);
        if (!s.ok()) continue;
        sched::Event e;
        while (s.stream->next(e, std::chrono::seconds(600)))
          if (e.kind == sched::Event::Kind::Done) {
            generated += e.usage.completion_tokens;
            std::lock_guard<std::mutex> lock(mu);
            ttft.push_back(e.timings.ttft_ms);
            ++completed;
            break;
          }
      }
    });
  }
  for (auto& t : users) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  sched::sim::SimResult r;
  r.completed = completed;
  r.makespan_ms = secs * 1000.0;
  r.generated_tokens = generated.load();
  r.throughput_tps = generated.load() / secs;
  std::sort(ttft.begin(), ttft.end());
  if (!ttft.empty()) r.ttft_p50_ms = ttft[(ttft.size() - 1) / 2];
  const sched::MetricsSnapshot m = engine.metrics();
  r.steps = static_cast<int64_t>(m.steps);
  r.batch_fill = m.batch_fill();
  return r;
}

int run_sim(const SimOptions& o) {
  sched::sim::CostModel cost;
  if (o.fit) {
    Result<sched::sim::CostModel> c = fit_from_model(o.model);
    if (!c) return fmt::print(stderr, "error: {}\n", c.message()), 1;
    cost = c.value();
  } else {
    std::istringstream in(o.cost);
    char comma1 = 0, comma2 = 0;
    if (!(in >> cost.a_ms >> comma1 >> cost.b_ms_per_token >> comma2 >> cost.c_ms_per_seq) || comma1 != ',' || comma2 != ',')
      return fmt::print(stderr, "error: --cost wants a,b,c in ms (got '{}')\n", o.cost), 1;
  }
  if (cost.a_ms < 0 || cost.b_ms_per_token < 0 || cost.c_ms_per_seq < 0)
    return fmt::print(stderr, "error: --cost coefficients must be >= 0\n"), 1;
  if (o.n_ctx_sim < 16) return fmt::print(stderr, "error: --sim-n-ctx must be >= 16 (one KV block)\n"), 1;
  fmt::print("cost model: step_ms = {:.3f} + {:.4f}·tokens + {:.4f}·sequences\n\n", cost.a_ms, cost.b_ms_per_token,
             cost.c_ms_per_seq);
  sched::sim::Workload w;
  if (!parse_range(o.prompt_tokens, w.prompt_min, w.prompt_max))
    return fmt::print(stderr, "error: bad --prompt-tokens '{}'\n", o.prompt_tokens), 1;
  if (!parse_range(o.max_tokens, w.output_min, w.output_max))
    return fmt::print(stderr, "error: bad --max-tokens '{}'\n", o.max_tokens), 1;
  w.rate_per_s = o.rate;
  w.seed = o.seed;
  w.urgent_share = o.urgent_share;
  w.urgent_priority = o.urgent_priority;
  w.urgent_deadline_ms = o.urgent_deadline_ms;
  // With an urgent class the table gains the deadline and urgent-class columns; without, it
  // is the table of docs/SCHEDULER.md.
  const bool mixed = o.urgent_share > 0;
  Result<std::vector<int32_t>> users = parse_id_list(o.users);
  if (!users || users->empty()) return fmt::print(stderr, "error: bad --users '{}'\n", o.users), 1;
  for (int32_t u : *users)
    if (u < 1) return fmt::print(stderr, "error: --users must be >= 1\n"), 1;
  std::vector<sched::Policy> policies;
  {
    std::string p;
    std::istringstream in(o.policies);
    while (std::getline(in, p, ',')) {
      sched::Policy pol;
      if (!sched::parse_policy(p, pol)) return fmt::print(stderr, "error: unknown policy '{}'\n", p), 1;
      policies.push_back(pol);
    }
  }
  fmt::print("| policy | users | requests | throughput (tok/s) | TTFT p50 (ms) | TTFT p99 (ms) | TPOT p50 (ms) | "
             "e2e p99 (ms) | steps | batch fill | preemptions |{}\n",
             mixed ? " deadline misses | urgent TTFT p99 (ms) |" : "");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|{}\n", mixed ? "---:|---:|" : "");
  for (int32_t u : *users) {
    if (u < 1) return fmt::print(stderr, "error: --users must be >= 1\n"), 1;
    for (sched::Policy p : policies) {
      sched::EngineConfig c;
      c.policy = p;
      c.n_parallel = o.n_parallel;
      c.n_batch = o.n_batch;
      c.batch_window_ms = o.batch_window_ms;
      c.lambda = o.lambda;
      c.mu = o.mu;
      c.aging_ms = o.aging_ms;
      c.preempt_margin = o.preempt_margin;
      c.preempt_min_run_ms = o.preempt_min_run_ms;
      c.spec_ngram = o.spec.spec_ngram;
      c.spec_k = o.spec.spec_k;
      c.spec_table = o.spec.spec_table;
      c.spec_always = o.spec.spec_always;
      c.step_cost_prior = sched::StepCost{cost.a_ms, cost.b_ms_per_token, cost.c_ms_per_seq};
      w.n_users = u;
      w.n_requests = o.requests > 0 ? o.requests : 4 * u;
      const auto t0 = Clock::now();
      sched::sim::SimResult r = sched::sim::simulate(c, cost, w, o.n_ctx_sim);
      const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!mixed)
        fmt::print("| {} | {} | {} | {:.1f} | {:.0f} | {:.0f} | {:.1f} | {:.0f} | {} | {:.2f} | {} |\n",
                   sched::policy_name(p), u, r.completed, r.throughput_tps, r.ttft_p50_ms, r.ttft_p99_ms, r.tpot_p50_ms,
                   r.e2e_p99_ms, r.steps, r.batch_fill, r.preemptions);
      else  // preemptions as memory + priority; deadline misses as a share of requests with a deadline
        fmt::print("| {} | {} | {} | {:.1f} | {:.0f} | {:.0f} | {:.1f} | {:.0f} | {} | {:.2f} | {} + {} | {:.1f}% ({}/{}) "
                   "| {:.0f} |\n",
                   sched::policy_name(p), u, r.completed + r.rejected, r.throughput_tps, r.ttft_p50_ms, r.ttft_p99_ms,
                   r.tpot_p50_ms, r.e2e_p99_ms, r.steps, r.batch_fill, r.preemptions_memory, r.preemptions_priority,
                   100.0 * r.deadline_miss_rate(), r.deadline_missed, r.with_deadline, r.urgent_ttft_p99_ms);
      fmt::print(stderr, "  ({} users, {}: simulated {:.1f} s in {:.2f} s)\n", u, sched::policy_name(p),
                 r.makespan_ms / 1000.0, wall);
      if (o.real) {
        Result<sched::sim::SimResult> real = run_real(o.model, c, w);
        if (!real) return fmt::print(stderr, "error: {}\n", real.message()), 1;
        fmt::print("| {} (real run) | {} | {} | {:.1f} | {:.0f} | | | | {} | {:.2f} | |\n", sched::policy_name(p), u,
                   real->completed, real->throughput_tps, real->ttft_p50_ms, real->steps, real->batch_fill);
        fmt::print(stderr, "  real/sim throughput ratio: {:.3f}\n", real->throughput_tps / r.throughput_tps);
      }
    }
  }
  return 0;
}

UBATCH_REGISTER_COMMAND("sim", "simulate users against the scheduler on a virtual clock",
                        [](CLI::App& sub) -> std::function<int()> {
  auto o = std::make_shared<SimOptions>();
  add_model_options(sub, o->model);
  sub.add_flag("--fit", o->fit, "fit the cost model from steps measured on the model (-m)");
  sub.add_flag("--real", o->real, "also run each workload through the real engine on the model (-m) and compare");
  sub.add_option("--cost", o->cost, "cost model a,b,c: step ms = a + b·tokens + c·sequences")->capture_default_str();
  sub.add_option("--sched-policy", o->policies, "policies to compare (comma list)")->capture_default_str();
  sub.add_option("--users", o->users, "closed-loop user counts (comma list)")->capture_default_str();
  sub.add_option("--rate", o->rate, "open loop: Poisson arrivals per second instead of closed-loop users");
  sub.add_option("--requests", o->requests, "requests per run (0: 4 per user)")->capture_default_str();
  sub.add_option("--prompt-tokens", o->prompt_tokens, "prompt length range MIN:MAX")->capture_default_str();
  sub.add_option("--max-tokens", o->max_tokens, "output length range MIN:MAX")->capture_default_str();
  sub.add_option("--n-parallel", o->n_parallel, "most sequences decoding at once")->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub.add_option("--sim-n-batch", o->n_batch, "token budget per step")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub.add_option("--sim-n-ctx", o->n_ctx_sim, "simulated KV capacity in tokens")->capture_default_str();
  sub.add_option("--batch-window-ms", o->batch_window_ms, "collection window")->capture_default_str();
  sub.add_option("--lambda", o->lambda, "weight of the latency penalty")->capture_default_str();
  sub.add_option("--mu", o->mu, "weight of the cache-hit bonus")->capture_default_str();
  sub.add_option("--aging-ms", o->aging_ms, "waiting this long raises priority by one level (0: no aging)")
      ->capture_default_str()->check(CLI::Range(0.0, 1e9));
  sub.add_option("--preempt-margin", o->preempt_margin, "levels a waiting request must outrank a running one by to "
                 "preempt it (0: never)")->capture_default_str()->check(CLI::Range(0, 2000000));
  sub.add_option("--preempt-min-run-ms", o->preempt_min_run_ms, "least run time before a priority preemption")
      ->capture_default_str()->check(CLI::Range(0.0, 1e9));
  sub.add_option("--urgent-share", o->urgent_share, "share of urgent requests (priority --urgent-priority, "
                 "deadline --urgent-deadline-ms); adds deadline-miss and urgent TTFT columns")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  sub.add_option("--urgent-priority", o->urgent_priority, "priority of urgent requests")->capture_default_str()
      ->check(CLI::Range(-1000000, 1000000));
  sub.add_option("--urgent-deadline-ms", o->urgent_deadline_ms, "strict deadline of urgent requests (0: none)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  sub.add_option("--seed", o->seed, "workload seed")->capture_default_str();
  add_spec_options(sub, o->spec);
  return [o] { return run_sim(*o); };
});

}  // namespace
}  // namespace ubatch::tools
