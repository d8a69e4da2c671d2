// `ubatch load`: a load generator for any OpenAI-compatible endpoint — closed loop (--users)
// or open loop (--rate, Poisson), synthetic or JSONL prompts, streaming with per-token
// timing; TTFT, ITL, TPOT, end-to-end latency percentiles, throughput, errors by kind;
// --json / --svg results and a --sweep over user counts. Logic in loadgen/load_driver.h;
// usage in docs/BENCH_TOOLS.md.
#include <fmt/format.h>

#include "bench/args.h"
#include "loadgen/load_driver.h"
#include "loadgen/load_plots.h"
#include "loadgen/progress.h"
#include "loadgen/prompts.h"
#include "loadgen/svg.h"
#include "tools/command.h"

namespace ubatch::tools {
namespace {

struct LoadCliOptions {
  loadgen::LoadConfig cfg;
  std::string prompt_tokens = "32:256";
  std::string max_tokens = "16:128";
  std::string prompts_file;
  std::string sweep;
  std::string json_out, svg_out;
  std::string mix;  // --mix (load_mix.h)
  loadgen::UrgentClass urgent;
  loadgen::SharedPrefixes prefixes;
  bool quiet = false;
};

nlohmann::json config_json(const LoadCliOptions& o) {
  const loadgen::LoadConfig& c = o.cfg;
  return {{"url", c.endpoint.url},           {"endpoint", c.endpoint.endpoint},
          {"model", c.endpoint.model},       {"users", c.users},
          {"rate", c.rate},                  {"think_ms", c.think_ms},
          {"duration_s", c.duration_s},      {"requests", c.n_requests},
          {"seed", c.seed},                  {"prompt_tokens", o.prompt_tokens},
          {"max_tokens", o.max_tokens},      {"prompts_file", o.prompts_file},
          {"ignore_eos", c.endpoint.ignore_eos},
          {"urgent_share", o.urgent.share},  {"urgent_priority", o.urgent.priority},
          {"urgent_deadline_ms", o.urgent.deadline_ms},
          {"shared_prefixes", o.prefixes.count},  {"prefix_tokens", o.prefixes.words},
          {"mix", o.mix}};
}

int run_load_cmd(LoadCliOptions o) {
  using namespace ubatch::bench;
  using namespace ubatch::loadgen;
  if (o.cfg.duration_s <= 0 && o.cfg.n_requests <= 0) o.cfg.duration_s = 30;
  auto pt = parse_range(o.prompt_tokens, "--prompt-tokens", 1, 1 << 20);
  if (!pt) return fmt::print(stderr, "error: {}\n", pt.message()), 1;
  auto mt = parse_range(o.max_tokens, "--max-tokens", 1, 1 << 24);
  if (!mt) return fmt::print(stderr, "error: {}\n", mt.message()), 1;
  std::vector<PromptEntry> prompts;
  if (!o.prompts_file.empty()) {
    auto p = read_prompts_jsonl(o.prompts_file);
    if (!p) return fmt::print(stderr, "error: {}\n", p.message()), 1;
    prompts = std::move(p.value());
  }
  std::vector<int64_t> users_list;
  if (!o.sweep.empty()) {
    if (o.cfg.rate > 0) return fmt::print(stderr, "error: --sweep runs closed loops; drop --rate\n"), 1;
    auto s = parse_int_list(o.sweep, "--sweep", 1, 100000);
    if (!s) return fmt::print(stderr, "error: {}\n", s.message()), 1;
    users_list = s.value();
  } else {
    users_list = {o.cfg.users};
  }
  if (Status s = validate(o.cfg); !s) return fmt::print(stderr, "error: {}\n", s.message()), 1;

  RequestMix mix(o.cfg.seed, pt.value(), mt.value(), std::move(prompts), o.urgent, o.prefixes);
  if (!o.mix.empty()) {
    auto classes = parse_mix(o.mix);
    if (!classes) return fmt::print(stderr, "error: {}\n", classes.message()), 1;
    mix.set_classes(std::move(classes.value()));
  }
  // With a mix, each model's busy time comes from the server's /metrics before and after.
  auto scrape = [&o] {
    std::string text;
    HttpStreamClient c(o.cfg.endpoint);
    return c.get("/metrics", &text) == 200 ? text : std::string();
  };
  ProgressBar bar(!o.quiet);
  std::vector<LoadReport> reports;
  for (int64_t users : users_list) {
    LoadConfig cfg = o.cfg;
    cfg.users = static_cast<int32_t>(users);
    const std::string label = o.cfg.rate > 0 ? fmt::format("rate {}", cfg.rate) : fmt::format("users {}", users);
    const std::string before = mix.has_kinds() ? scrape() : std::string();
    Result<LoadReport> r = run_load(cfg, mix, [&](const Progress& p) { bar.update(p, label); });
    bar.finish();
    if (!r) return fmt::print(stderr, "error: {}\n", r.message()), 1;
    if (mix.has_kinds()) r->model_busy_s = busy_seconds_delta(before, scrape());
    if (!o.quiet || users_list.size() == 1) fmt::print("{}", format_text(r.value()));
    reports.push_back(std::move(r.value()));
  }
  if (users_list.size() > 1) {
    const bool classes = mix.has_urgent_class();
    fmt::print("\n| users | req/s | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | TPOT p50 ms | e2e p99 ms | completed | errors |{}\n",
               classes ? " deadline misses | urgent TTFT p99 ms | lost |" : "");
    fmt::print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |{}\n", classes ? " ---: | ---: | ---: |" : "");
    for (const LoadReport& r : reports) {
      fmt::print("| {} | {:.2f} | {:.2f} | {:.1f} | {:.1f} | {:.2f} | {:.2f} | {:.1f} | {} | {} |", r.users,
                 r.request_rate, r.output_tps, r.ttft_ms.p50, r.ttft_ms.p99, r.itl_ms.p50, r.tpot_ms.p50, r.e2e_ms.p99,
                 r.n_completed, r.n_errors);
      const int64_t with = r.urgent.n_with_deadline + r.normal.n_with_deadline;
      const int64_t missed = r.urgent.n_deadline_missed + r.normal.n_deadline_missed;
      if (classes)
        fmt::print(" {:.1f}% ({}/{}) | {:.1f} | {} |", with ? 100.0 * missed / with : 0.0, missed, with,
                   r.urgent.ttft_ms.p99, r.n_lost);
      fmt::print("\n");
    }
  }
  if (!o.json_out.empty()) {
    nlohmann::json j = {{"config", config_json(o)}};
    if (users_list.size() > 1) {
      j["sweep"] = nlohmann::json::array();
      for (const LoadReport& r : reports) j["sweep"].push_back(to_json(r, false));
    } else {
      j["result"] = to_json(reports.front(), true);
    }
    if (Status s = write_text_file(o.json_out, j.dump(2) + "\n"); !s) return fmt::print(stderr, "error: {}\n", s.message()), 1;
  }
  if (!o.svg_out.empty()) {
    SvgOptions so;
    so.title = fmt::format("ubatch load: {}{}", o.cfg.endpoint.url, o.cfg.endpoint.endpoint);
    const std::string svg = render_svg(users_list.size() > 1 ? sweep_panels(reports) : run_panels(reports.front()), so);
    if (Status s = write_text_file(o.svg_out, svg); !s) return fmt::print(stderr, "error: {}\n", s.message()), 1;
  }
  int64_t completed = 0, errors = 0;
  for (const LoadReport& r : reports) completed += r.n_completed, errors += r.n_errors;
  if (completed == 0 && errors > 0) return fmt::print(stderr, "error: every request failed\n"), 2;
  return 0;
}

std::function<int()> setup_load(CLI::App& sub) {
  auto o = std::make_shared<LoadCliOptions>();
  loadgen::LoadConfig& c = o->cfg;
  sub.add_option("--url", c.endpoint.url, "server base URL")->capture_default_str();
  sub.add_option("--endpoint", c.endpoint.endpoint, "/v1/completions or /v1/chat/completions")->capture_default_str();
  sub.add_option("--model", c.endpoint.model, "\"model\" field of the requests (default: omitted)");
  sub.add_option("--mix", o->mix,
                 "a mix of request kinds, each request drawn by weight: KIND[@MODEL][:WEIGHT],... with KIND chat, "
                 "completion or embedding (e.g. chat@smollm2-135m-instruct-q4_1:2,completion@gemma-3-270m-q4_k_m:1,"
                 "embedding@gemma-3-270m-q4_k_m:1); reports each kind and each model's busy share (from /metrics)");
  sub.add_option("--api-key", c.endpoint.api_key, "sent as Authorization: Bearer KEY");
  sub.add_option("--users", c.users, "closed loop: concurrent users")->capture_default_str()->check(CLI::Range(1, 100000));
  sub.add_option("--rate", c.rate, "open loop: Poisson arrivals per second (overrides --users)")
      ->check(CLI::PositiveNumber);
  sub.add_option("--think-ms", c.think_ms, "closed loop: pause between a user's requests (ms)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--prompt-tokens", o->prompt_tokens, "synthetic prompt length MIN:MAX (approximated by words)")
      ->capture_default_str();
  sub.add_option("--max-tokens", o->max_tokens, "max_tokens per request MIN:MAX")->capture_default_str();
  sub.add_option("--prompts", o->prompts_file, "JSONL file of {\"prompt\": ..., \"max_tokens\": n} lines");
  sub.add_option("--shared-prefixes", o->prefixes.count,
                 "every prompt starts with one of this many shared prefixes (like system prompts; 0: none)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 20));
  sub.add_option("--prefix-tokens", o->prefixes.words, "length of each shared prefix (approximated by words)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub.add_option("--seed", c.seed, "seed of the request mix and arrivals")->capture_default_str();
  sub.add_option("--duration", c.duration_s, "seconds during which requests are started (default 30 unless --requests)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--requests", c.n_requests, "number of requests to start")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  sub.add_option("--sweep", o->sweep, "closed loops for each user count, comma list (e.g. 1,4,16,64)");
  sub.add_option("--json", o->json_out, "write results as JSON to this file");
  sub.add_option("--svg", o->svg_out, "write a plot (SVG) to this file");
  sub.add_option("--timeout", c.endpoint.timeout_s, "read timeout per request (s)")->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub.add_option("--max-in-flight", c.max_in_flight, "open loop: most requests in flight (later arrivals are dropped)")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  sub.add_option("--temperature", c.endpoint.temperature, "\"temperature\" field (default: omitted)")
      ->check(CLI::NonNegativeNumber);
  sub.add_flag("--ignore-eos", c.endpoint.ignore_eos, "ask the server to ignore end-of-sequence (\"ignore_eos\": true)");
  sub.add_option("--urgent-share", o->urgent.share,
                 "priority/deadline mix: this share of requests is urgent (sent with --urgent-priority and "
                 "--urgent-deadline-ms); results per class, deadline misses, lost requests")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  sub.add_option("--urgent-priority", o->urgent.priority, "\"priority\" of urgent requests")->capture_default_str()
      ->check(CLI::Range(-1000000, 1000000));
  sub.add_option("--urgent-deadline-ms", o->urgent.deadline_ms, "\"deadline_ms\" of urgent requests (0: none)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  sub.add_flag("-q,--quiet", o->quiet, "no progress bar");
  return [o] { return run_load_cmd(*o); };
}

UBATCH_REGISTER_COMMAND("load", "load-test an OpenAI-compatible endpoint (TTFT, ITL, TPOT, latency, throughput)", setup_load);

}  // namespace
}  // namespace ubatch::tools
