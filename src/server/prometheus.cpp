#include "server/prometheus.h"

#include <cmath>
#include <initializer_list>
#include <utility>

#include <fmt/format.h>

namespace ubatch::server {

namespace {

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void counter(std::string& out, const std::string& name, const std::string& help, uint64_t v) {
  header(out, name, "counter", help);
  out += fmt::format("{} {}\n", name, v);
}

// One counter family with a label: name{label="value"} per entry.
void labeled_counter(std::string& out, const std::string& name, const std::string& help, const char* label,
                     std::initializer_list<std::pair<const char*, uint64_t>> values) {
  header(out, name, "counter", help);
  for (const auto& [value, n] : values) out += fmt::format("{}{{{}=\"{}\"}} {}\n", name, label, value, n);
}

void gauge(std::string& out, const std::string& name, const std::string& help, double v) {
  header(out, name, "gauge", help);
  out += fmt::format("{} {}\n", name, number(v));
}

}  // namespace

std::string render_histogram(const std::string& name, const std::string& help,
                             const std::vector<std::pair<std::string, const sched::Histogram*>>& series) {
  std::string out;
  header(out, name, "histogram", help);
  for (const auto& [labels, h] : series) {
    const std::string pre = labels.empty() ? "" : labels + ",";
    const std::string own = labels.empty() ? "" : "{" + labels + "}";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h->buckets.size(); ++i) {
      cumulative += h->buckets[i];
      out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, pre, number(sched::Histogram::kBoundsMs[i] / 1000.0),
                         cumulative);
    }
    // Observations above the last bound are only in `count`; +Inf holds them all.
    out += fmt::format("{}_bucket{{{}le=\"+Inf\"}} {}\n", name, pre, std::max(cumulative, h->count));
    out += fmt::format("{}_sum{} {}\n", name, own, number(h->sum_ms / 1000.0));
    out += fmt::format("{}_count{} {}\n", name, own, std::max(cumulative, h->count));
  }
  return out;
}

namespace {

using Snapshot = sched::MetricsSnapshot;

// A label value, escaped (\\, \", \n: the text format's rules).
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// The engine series, one family at a time, a sample per loaded model.
class EngineSeries {
 public:
  EngineSeries(std::string& out, const std::vector<ModelMetrics>& models) : out_(out) {
    for (const ModelMetrics& m : models)
      if (m.engine) loaded_.emplace_back("model=\"" + label_value(m.name) + "\"", &*m.engine);
  }
  bool empty() const { return loaded_.empty(); }

  template <typename F>
  void family(const char* name, const char* type, const std::string& help, F value) {
    header(out_, name, type, help);
    for (const auto& [label, m] : loaded_) out_ += fmt::format("{}{{{}}} {}\n", name, label, number(value(*m)));
  }
  // One family with a second label: name{model="…",label="key"} per (model, key).
  template <typename F>
  void labeled(const char* name, const char* type, const std::string& help, const char* label,
               std::initializer_list<const char*> keys, F value) {
    header(out_, name, type, help);
    for (const auto& [model, m] : loaded_)
      for (const char* key : keys)
        out_ += fmt::format("{}{{{},{}=\"{}\"}} {}\n", name, model, label, key, number(value(*m, std::string(key))));
  }
  template <typename F>
  void histogram(const char* name, const std::string& help, F pick) {
    std::vector<std::pair<std::string, const sched::Histogram*>> series;
    for (const auto& [label, m] : loaded_) series.emplace_back(label, &pick(*m));
    out_ += render_histogram(name, help, series);
  }

 private:
  std::string& out_;
  std::vector<std::pair<std::string, const Snapshot*>> loaded_;
};

void render_models(std::string& out, const std::vector<ModelMetrics>& models, const ServerMetrics& s) {
  header(out, "ubatch_model_state", "gauge", "each model's state: 1 on the series of its state");
  for (const ModelMetrics& m : models)
    for (ModelState st : {ModelState::Unloaded, ModelState::Loading, ModelState::Loaded})
      out += fmt::format("ubatch_model_state{{model=\"{}\",state=\"{}\"}} {}\n", label_value(m.name),
                         model_state_name(st), m.state == st ? 1 : 0);
  header(out, "ubatch_model_loads_total", "counter", "times the model was loaded");
  for (const ModelMetrics& m : models)
    out += fmt::format("ubatch_model_loads_total{{model=\"{}\"}} {}\n", label_value(m.name), m.loads);
  header(out, "ubatch_model_unloads_total", "counter", "times the model was unloaded to make room for another");
  for (const ModelMetrics& m : models)
    out += fmt::format("ubatch_model_unloads_total{{model=\"{}\"}} {}\n", label_value(m.name), m.unloads);
  header(out, "ubatch_model_requests_waiting", "gauge", "requests waiting for the model to load");
  for (const ModelMetrics& m : models)
    out += fmt::format("ubatch_model_requests_waiting{{model=\"{}\"}} {}\n", label_value(m.name), m.waiting);
  header(out, "ubatch_model_memory_bytes", "gauge", "estimated memory the model takes loaded (weights and KV cache)");
  for (const ModelMetrics& m : models)
    out += fmt::format("ubatch_model_memory_bytes{{model=\"{}\"}} {}\n", label_value(m.name), m.memory_bytes);
  gauge(out, "ubatch_models_memory_budget_bytes", "--models-memory: most estimated bytes loaded at once (0: no limit)",
        static_cast<double>(s.models_budget_bytes));
}

}  // namespace

std::string render_prometheus(const std::vector<ModelMetrics>& models, const ServerMetrics& s) {
  std::string out;
  gauge(out, "ubatch_ready", "1 once a model serves (loaded, or loaded on demand after start-up)", s.ready ? 1 : 0);
  header(out, "ubatch_http_responses_total", "counter", "HTTP responses sent, by status code");
  if (s.responses_by_status.empty()) out += "ubatch_http_responses_total{code=\"200\"} 0\n";
  for (const auto& [code, n] : s.responses_by_status)
    out += fmt::format("ubatch_http_responses_total{{code=\"{}\"}} {}\n", code, n);
  counter(out, "ubatch_http_disconnects_total", "requests cancelled because the client disconnected",
          s.disconnects);
  gauge(out, "ubatch_http_streams_active", "streaming (SSE) responses in progress",
        static_cast<double>(s.streams_active));
  gauge(out, "ubatch_draining", "1 while the server shuts down gracefully (health answers 503)", s.draining ? 1 : 0);
  gauge(out, "ubatch_http_connections_open", "open HTTP connections", static_cast<double>(s.connections_open));
  counter(out, "ubatch_http_connections_accepted_total", "HTTP connections accepted", s.connections_accepted);
  counter(out, "ubatch_http_connections_refused_total",
          "connections closed at once because --max-connections were open", s.connections_refused);
  labeled_counter(out, "ubatch_http_timeouts_total",
                  "connections closed by a timeout, by phase (idle: no request; header, body: 408; send: a "
                  "stalled write)", "phase",
                  {{"idle", s.timeouts_idle}, {"header", s.timeouts_header}, {"body", s.timeouts_body},
                   {"send", s.timeouts_send}});
  counter(out, "ubatch_http_slow_clients_total",
          "streams cancelled because the client read too slowly (--stream-buffer bytes queued)", s.slow_clients);
  counter(out, "ubatch_http_bad_requests_total", "malformed HTTP requests (400, connection closed)", s.bad_requests);
  render_models(out, models, s);
  EngineSeries e(out, models);
  if (e.empty()) return out;

  auto u = [](uint64_t v) { return static_cast<double>(v); };
  e.family("ubatch_requests_submitted_total", "counter", "requests accepted by the engine",
           [&](const Snapshot& m) { return u(m.requests_submitted); });
  e.family("ubatch_requests_finished_total", "counter", "requests ended, any finish reason",
           [&](const Snapshot& m) { return u(m.requests_finished); });
  e.family("ubatch_requests_cancelled_total", "counter", "requests cancelled (client gone or shutdown)",
           [&](const Snapshot& m) { return u(m.requests_cancelled); });
  e.family("ubatch_requests_failed_total", "counter", "requests that ended with an error",
           [&](const Snapshot& m) { return u(m.requests_failed); });
  e.labeled("ubatch_requests_rejected_total", "counter", "requests refused at submit or admission, by cause", "cause",
            {"queue_full", "too_long", "invalid", "deadline"}, [&](const Snapshot& m, const std::string& k) {
              return u(k == "queue_full" ? m.rejected_queue_full
                       : k == "too_long" ? m.rejected_too_long
                       : k == "invalid"  ? m.rejected_invalid
                                         : m.rejected_deadline);
            });
  e.labeled("ubatch_deadline_misses_total", "counter",
            "requests whose strict deadline passed, by where they were (queued: never scheduled)", "stage",
            {"queued", "running"}, [&](const Snapshot& m, const std::string& k) {
              return u(k == "queued" ? m.deadline_misses_queued : m.deadline_misses_running);
            });
  e.family("ubatch_prompt_tokens_total", "counter", "prompt tokens prefilled (cache hits not counted)",
           [&](const Snapshot& m) { return u(m.prompt_tokens); });
  e.family("ubatch_cached_prompt_tokens_total", "counter", "prompt tokens served from the prefix cache",
           [&](const Snapshot& m) { return u(m.cached_prompt_tokens); });
  e.family("ubatch_generated_tokens_total", "counter", "tokens generated, all samples",
           [&](const Snapshot& m) { return u(m.generated_tokens); });
  e.family("ubatch_steps_total", "counter", "engine steps run", [&](const Snapshot& m) { return u(m.steps); });
  e.family("ubatch_step_tokens_total", "counter", "tokens run in all steps",
           [&](const Snapshot& m) { return u(m.step_tokens); });
  e.family("ubatch_step_budget_tokens_total", "counter", "token budget of all steps (n_batch per step)",
           [&](const Snapshot& m) { return u(m.step_budget); });
  e.labeled("ubatch_preemptions_total", "counter",
            "sequences preempted, by cause (memory: no KV room for a decode; priority: a waiting request outranked it)",
            "cause", {"memory", "priority"}, [&](const Snapshot& m, const std::string& k) {
              return u(k == "memory" ? m.preemptions_memory : m.preemptions_priority);
            });
  e.family("ubatch_busy_seconds_total", "counter", "time spent in engine steps",
           [](const Snapshot& m) { return m.busy_ms / 1000.0; });
  e.family("ubatch_grammar_seconds_total", "counter",
           "of the step time, time on grammars (masks, masking logits, advancing) for constrained rows",
           [](const Snapshot& m) { return m.grammar_ms / 1000.0; });
  e.family("ubatch_grammar_rows_total", "counter", "rows sampled under a grammar (structured output)",
           [&](const Snapshot& m) { return u(m.grammar_rows); });
  e.family("ubatch_sampling_sequence_steps_total", "counter", "(sequence, step) pairs that sampled at least one token",
           [&](const Snapshot& m) { return u(m.sample_seq_steps); });
  e.family("ubatch_spec_steps_total", "counter", "steps that verified at least one speculative draft",
           [&](const Snapshot& m) { return u(m.spec_steps); });
  e.family("ubatch_spec_sequence_steps_total", "counter", "(sequence, step) pairs that verified a draft",
           [&](const Snapshot& m) { return u(m.spec_seq_steps); });
  e.family("ubatch_spec_draft_tokens_total", "counter", "speculative draft tokens verified",
           [&](const Snapshot& m) { return u(m.draft_tokens); });
  e.family("ubatch_spec_draft_accepted_total", "counter", "speculative draft tokens accepted",
           [&](const Snapshot& m) { return u(m.draft_accepted); });

  auto i64 = [](int64_t v) { return static_cast<double>(v); };
  e.family("ubatch_requests_queued", "gauge", "requests waiting to be scheduled",
           [&](const Snapshot& m) { return i64(m.queued); });
  e.family("ubatch_requests_running", "gauge", "requests with sequences in the running set",
           [&](const Snapshot& m) { return i64(m.running); });
  e.family("ubatch_kv_blocks_used", "gauge", "KV blocks held by live sequences",
           [&](const Snapshot& m) { return i64(m.kv_blocks_used); });
  e.family("ubatch_kv_blocks_cached", "gauge", "KV blocks kept for prefix reuse",
           [&](const Snapshot& m) { return i64(m.kv_blocks_cached); });
  e.family("ubatch_kv_blocks_total", "gauge", "KV blocks in the cache",
           [&](const Snapshot& m) { return i64(m.kv_blocks_total); });
  e.family("ubatch_kv_block_size_tokens", "gauge", "token slots per KV block",
           [&](const Snapshot& m) { return i64(m.kv_block_size); });
  e.family("ubatch_kv_peak_blocks_used", "gauge", "most KV blocks used at once",
           [&](const Snapshot& m) { return i64(m.kv_peak_blocks_used); });
  e.family("ubatch_state_bytes", "gauge", "bytes of the sequences' recurrent state (hybrid models)",
           [&](const Snapshot& m) { return i64(m.state_bytes); });
  e.family("ubatch_state_checkpoint_bytes", "gauge", "bytes of recurrent-state checkpoints held for rollback",
           [&](const Snapshot& m) { return i64(m.state_checkpoint_bytes); });
  e.family("ubatch_state_snapshot_bytes", "gauge", "bytes of recurrent-state snapshots kept for prefix reuse",
           [&](const Snapshot& m) { return i64(m.state_snapshot_bytes); });
  e.family("ubatch_state_snapshots", "gauge", "recurrent-state snapshots kept for prefix reuse",
           [&](const Snapshot& m) { return i64(m.state_snapshots); });
  e.family("ubatch_kv_usage_ratio", "gauge", "KV blocks used / total", [&](const Snapshot& m) {
    return m.kv_blocks_total ? i64(m.kv_blocks_used) / i64(m.kv_blocks_total) : 0.0;
  });
  e.family("ubatch_prefix_hit_rate", "gauge", "prompt tokens served from the prefix cache / prompt tokens requested",
           [](const Snapshot& m) { return m.prefix_hit_rate; });
  e.family("ubatch_batch_fill_ratio", "gauge", "tokens run / token budget over all steps",
           [](const Snapshot& m) { return m.batch_fill(); });
  e.family("ubatch_spec_acceptance_ratio", "gauge", "draft tokens accepted / draft tokens verified",
           [](const Snapshot& m) { return m.draft_acceptance(); });
  e.family("ubatch_tokens_per_sequence_step", "gauge",
           "tokens generated per (sequence, step) that sampled (1 without speculation)",
           [](const Snapshot& m) { return m.tokens_per_seq_step(); });
  e.labeled("ubatch_step_model_ms", "gauge",
            "the scheduler's measured step-time model: ms = base + per_token x tokens + per_row x logits rows", "term",
            {"base", "per_token", "per_row"}, [](const Snapshot& m, const std::string& k) {
              return k == "base" ? m.step_cost.a_ms : k == "per_token" ? m.step_cost.b_ms_per_token
                                                                       : m.step_cost.c_ms_per_row;
            });

  e.histogram("ubatch_ttft_seconds", "time to first token (arrival to first token)",
              [](const Snapshot& m) -> const sched::Histogram& { return m.ttft; });
  e.histogram("ubatch_tpot_seconds", "mean time per output token after the first, per request",
              [](const Snapshot& m) -> const sched::Histogram& { return m.tpot; });
  e.histogram("ubatch_queue_time_seconds", "arrival to first scheduled",
              [](const Snapshot& m) -> const sched::Histogram& { return m.queue_time; });
  e.histogram("ubatch_e2e_seconds", "arrival to done (end-to-end request latency)",
              [](const Snapshot& m) -> const sched::Histogram& { return m.e2e; });
  return out;
}

}  // namespace ubatch::server
