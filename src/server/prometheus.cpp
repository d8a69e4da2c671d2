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

void counter_f(std::string& out, const std::string& name, const std::string& help, double v) {
  header(out, name, "counter", help);
  out += fmt::format("{} {}\n", name, number(v));
}

void gauge(std::string& out, const std::string& name, const std::string& help, double v) {
  header(out, name, "gauge", help);
  out += fmt::format("{} {}\n", name, number(v));
}

}  // namespace

std::string render_histogram(const std::string& name, const std::string& help, const sched::Histogram& h) {
  std::string out;
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.buckets.size(); ++i) {
    cumulative += h.buckets[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, number(sched::Histogram::kBoundsMs[i] / 1000.0),
                       cumulative);
  }
  // Observations above the last bound are only in `count`; +Inf holds them all.
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, std::max(cumulative, h.count));
  out += fmt::format("{}_sum {}\n", name, number(h.sum_ms / 1000.0));
  out += fmt::format("{}_count {}\n", name, std::max(cumulative, h.count));
  return out;
}

std::string render_prometheus(const sched::MetricsSnapshot* m, const ServerMetrics& s) {
  std::string out;
  gauge(out, "ubatch_ready", "1 once the model is loaded and requests are served", s.ready ? 1 : 0);
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
  if (!m) return out;

  counter(out, "ubatch_requests_submitted_total", "requests accepted by the engine", m->requests_submitted);
  counter(out, "ubatch_requests_finished_total", "requests ended, any finish reason", m->requests_finished);
  counter(out, "ubatch_requests_cancelled_total", "requests cancelled (client gone or shutdown)",
          m->requests_cancelled);
  counter(out, "ubatch_requests_failed_total", "requests that ended with an error", m->requests_failed);
  labeled_counter(out, "ubatch_requests_rejected_total", "requests refused at submit or admission, by cause", "cause",
                  {{"queue_full", m->rejected_queue_full},
                   {"too_long", m->rejected_too_long},
                   {"invalid", m->rejected_invalid},
                   {"deadline", m->rejected_deadline}});
  labeled_counter(out, "ubatch_deadline_misses_total",
                  "requests whose strict deadline passed, by where they were (queued: never scheduled)", "stage",
                  {{"queued", m->deadline_misses_queued}, {"running", m->deadline_misses_running}});
  counter(out, "ubatch_prompt_tokens_total", "prompt tokens prefilled (cache hits not counted)", m->prompt_tokens);
  counter(out, "ubatch_cached_prompt_tokens_total", "prompt tokens served from the prefix cache",
          m->cached_prompt_tokens);
  counter(out, "ubatch_generated_tokens_total", "tokens generated, all samples", m->generated_tokens);
  counter(out, "ubatch_steps_total", "engine steps run", m->steps);
  counter(out, "ubatch_step_tokens_total", "tokens run in all steps", m->step_tokens);
  counter(out, "ubatch_step_budget_tokens_total", "token budget of all steps (n_batch per step)", m->step_budget);
  labeled_counter(out, "ubatch_preemptions_total", "sequences preempted, by cause (memory: no KV room for a decode; "
                  "priority: a waiting request outranked it)", "cause",
                  {{"memory", m->preemptions_memory}, {"priority", m->preemptions_priority}});
  counter_f(out, "ubatch_busy_seconds_total", "time spent in engine steps", m->busy_ms / 1000.0);
  counter_f(out, "ubatch_grammar_seconds_total",
            "of the step time, time on grammars (masks, masking logits, advancing) for constrained rows",
            m->grammar_ms / 1000.0);
  counter(out, "ubatch_grammar_rows_total", "rows sampled under a grammar (structured output)", m->grammar_rows);
  counter(out, "ubatch_sampling_sequence_steps_total", "(sequence, step) pairs that sampled at least one token",
          m->sample_seq_steps);
  counter(out, "ubatch_spec_steps_total", "steps that verified at least one speculative draft", m->spec_steps);
  counter(out, "ubatch_spec_sequence_steps_total", "(sequence, step) pairs that verified a draft", m->spec_seq_steps);
  counter(out, "ubatch_spec_draft_tokens_total", "speculative draft tokens verified", m->draft_tokens);
  counter(out, "ubatch_spec_draft_accepted_total", "speculative draft tokens accepted", m->draft_accepted);

  gauge(out, "ubatch_requests_queued", "requests waiting to be scheduled", static_cast<double>(m->queued));
  gauge(out, "ubatch_requests_running", "requests with sequences in the running set", static_cast<double>(m->running));
  gauge(out, "ubatch_kv_blocks_used", "KV blocks held by live sequences", static_cast<double>(m->kv_blocks_used));
  gauge(out, "ubatch_kv_blocks_cached", "KV blocks kept for prefix reuse", static_cast<double>(m->kv_blocks_cached));
  gauge(out, "ubatch_kv_blocks_total", "KV blocks in the cache", static_cast<double>(m->kv_blocks_total));
  gauge(out, "ubatch_kv_block_size_tokens", "token slots per KV block", static_cast<double>(m->kv_block_size));
  gauge(out, "ubatch_kv_peak_blocks_used", "most KV blocks used at once", static_cast<double>(m->kv_peak_blocks_used));
  gauge(out, "ubatch_kv_usage_ratio", "KV blocks used / total",
        m->kv_blocks_total ? static_cast<double>(m->kv_blocks_used) / static_cast<double>(m->kv_blocks_total) : 0.0);
  gauge(out, "ubatch_prefix_hit_rate", "prompt tokens served from the prefix cache / prompt tokens requested",
        m->prefix_hit_rate);
  gauge(out, "ubatch_batch_fill_ratio", "tokens run / token budget over all steps", m->batch_fill());
  gauge(out, "ubatch_spec_acceptance_ratio", "draft tokens accepted / draft tokens verified", m->draft_acceptance());
  gauge(out, "ubatch_tokens_per_sequence_step", "tokens generated per (sequence, step) that sampled (1 without "
        "speculation)", m->tokens_per_seq_step());
  header(out, "ubatch_step_model_ms", "gauge", "the scheduler's measured step-time model: ms = base + per_token x tokens "
         "+ per_row x logits rows");
  out += fmt::format("ubatch_step_model_ms{{term=\"base\"}} {}\n", number(m->step_cost.a_ms));
  out += fmt::format("ubatch_step_model_ms{{term=\"per_token\"}} {}\n", number(m->step_cost.b_ms_per_token));
  out += fmt::format("ubatch_step_model_ms{{term=\"per_row\"}} {}\n", number(m->step_cost.c_ms_per_row));

  out += render_histogram("ubatch_ttft_seconds", "time to first token (arrival to first token)", m->ttft);
  out += render_histogram("ubatch_tpot_seconds", "mean time per output token after the first, per request", m->tpot);
  out += render_histogram("ubatch_queue_time_seconds", "arrival to first scheduled", m->queue_time);
  out += render_histogram("ubatch_e2e_seconds", "arrival to done (end-to-end request latency)", m->e2e);
  return out;
}

}  // namespace ubatch::server
