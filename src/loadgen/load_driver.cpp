#include "loadgen/load_driver.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <fmt/format.h>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

namespace ubatch::loadgen {

using Clock = std::chrono::steady_clock;

Status validate(const LoadConfig& cfg) {
  if (Status s = validate(cfg.endpoint); !s) return s;
  if (!(cfg.duration_s > 0) && cfg.n_requests <= 0)
    return Status::error("load: give a duration (--duration S) or a request count (--requests N)");
  if (cfg.duration_s < 0 || std::isnan(cfg.duration_s)) return Status::error("--duration: must be >= 0");
  if (cfg.n_requests < 0) return Status::error("--requests: must be >= 0");
  if (cfg.rate < 0 || std::isnan(cfg.rate) || std::isinf(cfg.rate)) return Status::error("--rate: must be a finite number >= 0");
  if (!cfg.open_loop() && cfg.users < 1) return Status::error("--users: must be >= 1");
  if (cfg.think_ms < 0 || std::isnan(cfg.think_ms)) return Status::error("--think-ms: must be >= 0");
  if (cfg.max_in_flight < 1) return Status::error("--max-in-flight: must be >= 1");
  return Status::ok();
}

LoadReport summarize_requests(std::vector<RequestResult> requests, double wall_s) {
  LoadReport r;
  r.wall_s = wall_s;
  std::vector<double> ttft, itl, tpot, e2e, out;
  for (const RequestResult& q : requests) {
    r.n_reconnects += q.reconnects;
    if (!q.ok) {
      ++r.n_errors;
      ++r.errors[q.error_kind];
      r.error_examples.emplace(q.error_kind, q.error);
      continue;
    }
    ++r.n_completed;
    r.n_output_tokens += q.n_output_tokens;
    if (q.n_prompt_tokens > 0) r.n_prompt_tokens += q.n_prompt_tokens;
    if (q.usage_reported) ++r.n_usage_reported;
    if (q.ttft_ms >= 0) ttft.push_back(q.ttft_ms);
    itl.insert(itl.end(), q.itl_ms.begin(), q.itl_ms.end());
    if (q.tpot_ms() >= 0) tpot.push_back(q.tpot_ms());
    e2e.push_back(q.e2e_ms);
    out.push_back(static_cast<double>(q.n_output_tokens));
  }
  r.n_started = static_cast<int64_t>(requests.size());
  r.ttft_ms = summarize(std::move(ttft));
  r.itl_ms = summarize(std::move(itl));
  r.tpot_ms = summarize(std::move(tpot));
  r.e2e_ms = summarize(std::move(e2e));
  r.output_tokens = summarize(std::move(out));
  r.urgent = summarize_class(requests, true);
  r.normal = summarize_class(requests, false);
  r.n_lost = r.urgent.n_lost + r.normal.n_lost;
  r.kinds = summarize_kinds(requests);
  r.request_rate = wall_s > 0 ? static_cast<double>(r.n_completed) / wall_s : 0.0;
  r.output_tps = wall_s > 0 ? static_cast<double>(r.n_output_tokens) / wall_s : 0.0;
  r.requests = std::move(requests);
  return r;
}

namespace {

// State shared by the caller and every worker (held by shared_ptr so detached open-loop
// workers can never outlive it).
struct Shared {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<RequestResult> done;
  std::atomic<int64_t> next_index{0};
  std::atomic<int64_t> started{0}, completed{0}, errors{0}, in_flight{0}, output_tokens{0}, dropped{0};
  int workers_left = 0;  // closed loop users / open loop dispatcher still running (under mutex)

  void record(RequestResult r) {
    if (r.ok) {
      completed.fetch_add(1);
      output_tokens.fetch_add(r.n_output_tokens);
    } else {
      errors.fetch_add(1);
    }
    std::lock_guard<std::mutex> lock(mutex);
    done.push_back(std::move(r));
    in_flight.fetch_sub(1);
    changed.notify_all();
  }
  void worker_done() {
    std::lock_guard<std::mutex> lock(mutex);
    --workers_left;
    changed.notify_all();
  }
};

bool past(Clock::time_point deadline, bool has_deadline) { return has_deadline && Clock::now() >= deadline; }

}  // namespace

Result<LoadReport> run_load(const LoadConfig& cfg, const RequestMix& mix,
                            const std::function<void(const Progress&)>& on_progress) {
  if (Status s = validate(cfg); !s) return s;
  auto st = std::make_shared<Shared>();
  const Clock::time_point t_run = Clock::now();
  const bool has_deadline = cfg.duration_s > 0;
  const Clock::time_point deadline =
      t_run + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(has_deadline ? cfg.duration_s : 0));
  std::vector<std::thread> threads;

  if (!cfg.open_loop()) {
    st->workers_left = cfg.users;
    for (int32_t u = 0; u < cfg.users; ++u) {
      threads.emplace_back([st, &cfg, &mix, t_run, deadline, has_deadline] {
        HttpStreamClient client(cfg.endpoint);
        while (!past(deadline, has_deadline)) {
          const int64_t idx = st->next_index.fetch_add(1);
          if (cfg.n_requests > 0 && idx >= cfg.n_requests) break;
          const RequestSpec spec = mix.make(idx);
          st->started.fetch_add(1);
          st->in_flight.fetch_add(1);
          st->record(client.send(spec, t_run));
          const bool more = cfg.n_requests <= 0 || st->next_index.load() < cfg.n_requests;
          if (cfg.think_ms > 0 && more && !past(deadline, has_deadline))
            std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(cfg.think_ms));
        }
        st->worker_done();
      });
    }
  } else {
    st->workers_left = 1;
    threads.emplace_back([st, cfg, &mix, t_run, deadline, has_deadline] {
      std::mt19937_64 rng(cfg.seed ^ 0x5eed0fa77a1ull);
      std::exponential_distribution<double> gap(cfg.rate);
      Clock::time_point next = t_run;
      for (int64_t idx = 0;; ++idx) {
        next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
        if (has_deadline && next >= deadline) break;
        if (cfg.n_requests > 0 && idx >= cfg.n_requests) break;
        std::this_thread::sleep_until(next);
        if (st->in_flight.load() >= cfg.max_in_flight) {
          st->dropped.fetch_add(1);
          continue;
        }
        st->started.fetch_add(1);
        st->in_flight.fetch_add(1);
        RequestSpec spec = mix.make(idx);
        std::thread([st, endpoint = cfg.endpoint, spec = std::move(spec), t_run] {
          RequestResult r;
          {
            HttpStreamClient client(endpoint);
            r = client.send(spec, t_run);
          }  // the connection is closed before the caller can see in_flight reach 0
          st->record(std::move(r));
        }).detach();
      }
      st->worker_done();
    });
  }

  auto progress = [&] {
    Progress p;
    p.elapsed_s = std::chrono::duration<double>(Clock::now() - t_run).count();
    p.started = st->started.load();
    p.completed = st->completed.load();
    p.errors = st->errors.load();
    p.in_flight = st->in_flight.load();
    p.output_tokens = st->output_tokens.load();
    double f = 0.0;
    if (has_deadline) f = std::max(f, p.elapsed_s / cfg.duration_s);
    if (cfg.n_requests > 0) f = std::max(f, static_cast<double>(p.completed + p.errors) / cfg.n_requests);
    p.fraction = std::min(1.0, f);
    return p;
  };
  {
    std::unique_lock<std::mutex> lock(st->mutex);
    while (st->workers_left > 0 || st->in_flight.load() > 0) {
      st->changed.wait_for(lock, std::chrono::milliseconds(200));
      if (on_progress) {
        lock.unlock();
        on_progress(progress());
        lock.lock();
      }
    }
  }
  const double wall_s = std::chrono::duration<double>(Clock::now() - t_run).count();
  for (std::thread& t : threads) t.join();
  if (on_progress) on_progress(progress());

  std::vector<RequestResult> done;
  {
    std::lock_guard<std::mutex> lock(st->mutex);
    done.swap(st->done);
  }
  LoadReport r = summarize_requests(std::move(done), wall_s);
  r.mode = cfg.open_loop() ? "open" : "closed";
  r.users = cfg.open_loop() ? 0 : cfg.users;
  r.rate = cfg.rate;
  r.n_dropped = st->dropped.load();
  r.has_classes = mix.has_urgent_class();
  return r;
}

namespace {
nlohmann::json summary_json(const Summary& s) {
  return {{"n", s.n},     {"mean", s.mean}, {"sd", s.sd},   {"min", s.min},  {"max", s.max},
          {"p50", s.p50}, {"p90", s.p90},   {"p95", s.p95}, {"p99", s.p99}};
}
}  // namespace

nlohmann::json to_json(const LoadReport& r, bool with_requests) {
  nlohmann::json j = {{"mode", r.mode},
                      {"users", r.users},
                      {"rate", r.rate},
                      {"wall_s", r.wall_s},
                      {"started", r.n_started},
                      {"completed", r.n_completed},
                      {"errors", r.n_errors},
                      {"dropped", r.n_dropped},
                      {"reconnects", r.n_reconnects},
                      {"errors_by_kind", r.errors},
                      {"error_examples", r.error_examples},
                      {"output_tokens", r.n_output_tokens},
                      {"prompt_tokens", r.n_prompt_tokens},
                      {"usage_reported", r.n_usage_reported},
                      {"request_rate", r.request_rate},
                      {"output_tokens_per_s", r.output_tps},
                      {"ttft_ms", summary_json(r.ttft_ms)},
                      {"itl_ms", summary_json(r.itl_ms)},
                      {"tpot_ms", summary_json(r.tpot_ms)},
                      {"e2e_ms", summary_json(r.e2e_ms)},
                      {"output_tokens_per_request", summary_json(r.output_tokens)},
                      {"lost", r.n_lost}};
  if (r.has_classes) j["classes"] = {{"urgent", to_json(r.urgent)}, {"normal", to_json(r.normal)}};
  if (!r.kinds.empty()) {
    nlohmann::json kinds = nlohmann::json::object();
    for (const auto& [kind, c] : r.kinds) kinds[kind] = to_json(c);
    j["kinds"] = kinds;
  }
  if (!r.model_busy_s.empty()) {
    nlohmann::json models = nlohmann::json::object();
    for (const auto& [model, busy] : r.model_busy_s)
      models[model] = {{"busy_s", busy}, {"share_of_wall", r.wall_s > 0 ? busy / r.wall_s : 0.0}};
    j["models"] = models;
  }
  if (with_requests) {
    nlohmann::json a = nlohmann::json::array();
    for (const RequestResult& q : r.requests)
      a.push_back({{"index", q.index},
                   {"t_start_s", q.t_start_s},
                   {"ok", q.ok},
                   {"status", q.status},
                   {"error_kind", q.error_kind},
                   {"ttft_ms", q.ttft_ms},
                   {"e2e_ms", q.e2e_ms},
                   {"tpot_ms", q.tpot_ms()},
                   {"output_tokens", q.n_output_tokens},
                   {"prompt_tokens", q.n_prompt_tokens},
                   {"finish_reason", q.finish_reason},
                   {"urgent", q.urgent},
                   {"kind", q.kind},
                   {"deadline_missed", q.deadline_missed()}});
    j["requests"] = a;
  }
  return j;
}

std::string format_text(const LoadReport& r) {
  std::string s;
  s += r.mode == "open" ? fmt::format("open loop at {:.2f} req/s", r.rate) : fmt::format("closed loop, {} users", r.users);
  s += fmt::format(": {:.2f} s, {} completed, {} errors", r.wall_s, r.n_completed, r.n_errors);
  if (r.n_dropped > 0) s += fmt::format(", {} dropped (too many in flight)", r.n_dropped);
  if (r.n_reconnects > 0) s += fmt::format(", {} resent after a closed keep-alive connection", r.n_reconnects);
  s += "\n";
  for (const auto& [kind, n] : r.errors) {
    auto ex = r.error_examples.find(kind);
    s += fmt::format("  error {:<14} {:6}  e.g. {}\n", kind, n, ex == r.error_examples.end() ? "" : ex->second);
  }
  s += fmt::format("  requests/s     {:10.2f}\n", r.request_rate);
  s += fmt::format("  output tok/s   {:10.2f}   ({} tokens, {} of {} counts from usage)\n", r.output_tps,
                   r.n_output_tokens, r.n_usage_reported, r.n_completed);
  s += fmt::format("  {:<12} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "(ms)", "mean", "p50", "p95", "p99", "max");
  auto row = [&](const char* name, const Summary& x) {
    s += fmt::format("  {:<12} {:10.2f} {:10.2f} {:10.2f} {:10.2f} {:10.2f}\n", name, x.mean, x.p50, x.p95, x.p99, x.max);
  };
  row("TTFT", r.ttft_ms);
  row("ITL", r.itl_ms);
  row("TPOT", r.tpot_ms);
  row("e2e", r.e2e_ms);
  if (r.has_classes) {
    s += format_class("urgent", r.urgent);
    s += format_class("normal", r.normal);
  }
  for (const auto& [kind, c] : r.kinds) s += format_class(kind, c);
  for (const auto& [model, busy] : r.model_busy_s)
    s += fmt::format("  model {}: busy {:.2f} s of {:.2f} s ({:.0f}% of the wall time; the server's "
                     "ubatch_busy_seconds_total)\n", model, busy, r.wall_s, r.wall_s > 0 ? 100.0 * busy / r.wall_s : 0.0);
  return s;
}

}  // namespace ubatch::loadgen
