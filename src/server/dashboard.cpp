#include "server/dashboard.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "sched/engine.h"
#include "server/errors.h"

namespace ubatch::server {

namespace {

using json = nlohmann::json;

// Rounds to 0.01 so the wire carries no 17-digit noise.
double round2(double v) { return std::isfinite(v) ? std::round(v * 100.0) / 100.0 : 0.0; }

json settings_json(const sched::Engine& engine, const DashboardServerInfo& server) {
  const sched::EngineConfig& c = engine.config();
  const sched::Engine::Info info = engine.info();
  return {{"model", server.model},
          {"policy", sched::policy_name(c.policy)},
          {"n_parallel", c.n_parallel},
          {"n_batch", c.n_batch},
          {"n_ubatch", info.n_ubatch},
          {"n_ctx", engine.n_ctx()},
          {"n_ctx_seq", engine.n_ctx_seq()},
          {"threads", info.n_threads},
          {"kv_type", info.kv_type},
          {"state_type", info.state_type},
          {"kv_block_size", info.kv_block_size},
          {"kv_blocks", info.kv_blocks},
          {"max_queue", c.max_queue},
          {"batch_window_ms", c.batch_window_ms},
          {"lambda", c.lambda},
          {"mu", c.mu},
          {"aging_ms", c.aging_ms},
          {"preempt_margin", c.preempt_margin},
          {"preempt_min_run_ms", c.preempt_min_run_ms},
          {"api_key_required", server.api_key_required}};
}

json request_json(const sched::ActiveRequest& r) {
  json j = {{"id", r.id},
            {"state", sched::request_state_name(r.state)},
            {"priority", r.priority},
            {"rank", r.rank},
            {"age_ms", round2(r.age_ms)},
            {"prompt_tokens", r.n_prompt},
            {"cached_tokens", r.n_cached},
            {"computed_tokens", r.n_computed},
            {"generated_tokens", r.n_generated},
            {"max_tokens", r.max_tokens},
            {"n", r.n_samples},
            {"preempted", r.n_preempted},
            {"ttft_ms", r.ttft_ms >= 0 ? json(round2(r.ttft_ms)) : json(nullptr)}};
  if (r.deadline_ms > 0) {
    j["deadline_ms"] = r.deadline_ms;
    j["deadline_left_ms"] = round2(r.deadline_left_ms);
    j["deadline_policy"] = r.strict_deadline ? "strict" : "best_effort";
  } else {
    j["deadline_ms"] = nullptr;
  }
  return j;
}

json latency_json(const sched::LatencySummary& s) {
  return {{"p50", round2(s.p50_ms)}, {"p99", round2(s.p99_ms)}, {"count", s.count}};
}

}  // namespace

DashboardFeed::DashboardFeed(const sched::Engine& engine, int interval_ms)
    : engine_(engine), interval_ms_(std::clamp(interval_ms, kMinIntervalMs, kMaxIntervalMs)) {}

std::optional<int> DashboardFeed::parse_interval(const std::string& value) {
  if (value.empty()) return kDefaultIntervalMs;
  if (value.size() > 6 || !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  const int v = std::stoi(value);
  if (v < kMinIntervalMs || v > kMaxIntervalMs) return std::nullopt;
  return v;
}

std::string DashboardFeed::preamble() { return "retry: 2000\n\n"; }

json DashboardFeed::next_snapshot(const DashboardServerInfo& server) {
  const double now = engine_.now_ms();
  const sched::MetricsSnapshot m = engine_.metrics();
  const sched::LatencyLastMinute lat = engine_.latency_last_minute();
  const sched::ActiveRequests table = engine_.active_requests();

  // Step records: the last minute on the first snapshot, then what is new.
  steps_.clear();
  const uint64_t asked_after = last_step_;
  last_step_ = engine_.step_log().read(last_step_, kMaxStepsPerSnapshot, steps_);
  if (first_)
    steps_.erase(std::remove_if(steps_.begin(), steps_.end(),
                                [&](const sched::StepRecord& r) { return r.end_ms < now - kHistoryMs; }),
                 steps_.end());
  const bool gap = !first_ && !steps_.empty() && steps_.front().index != asked_after + 1;
  json rows = json::array();
  for (const sched::StepRecord& r : steps_) {
    rows.push_back(json::array({round2(r.end_ms), round2(r.decode_ms), r.n_decode, r.n_prefill, r.n_sampled,
                                r.n_budget, r.n_running, r.n_waiting, r.n_draft}));
    recent_.push_back(r);
  }
  while (!recent_.empty() && recent_.front().end_ms < now - kRateWindowMs) recent_.pop_front();

  // Throughput over the last kRateWindowMs of steps.
  int64_t sampled = 0, prefill = 0, tokens = 0, budget = 0;
  double decode_ms = 0;
  for (const sched::StepRecord& r : recent_) {
    sampled += r.n_sampled;
    prefill += r.n_prefill;
    tokens += r.n_decode + r.n_prefill;
    budget += r.n_budget;
    decode_ms += r.decode_ms;
  }
  const double window_s = kRateWindowMs / 1000.0;

  // Prefix-cache hit rate over the last minute, from the counters' movement.
  cache_history_.push_back({now, m.prompt_tokens, m.cached_prompt_tokens});
  while (cache_history_.size() > 1 && cache_history_.front().t_ms < now - kHistoryMs) cache_history_.pop_front();
  const uint64_t d_prompt = m.prompt_tokens - cache_history_.front().prompt_tokens;
  const uint64_t d_cached = m.cached_prompt_tokens - cache_history_.front().cached_tokens;

  int64_t n_preempted = 0;
  for (const sched::ActiveRequest& r : table.rows) n_preempted += r.state == sched::RequestState::Preempted;
  json requests = json::array();
  for (size_t i = 0; i < table.rows.size() && i < kMaxRequestRows; ++i) requests.push_back(request_json(table.rows[i]));

  const int64_t kv_free = std::max<int64_t>(0, m.kv_blocks_total - m.kv_blocks_used - m.kv_blocks_cached);
  json snap = {
      {"now_ms", round2(now)},
      {"interval_ms", interval_ms_},
      {"settings", settings_json(engine_, server)},
      {"steps",
       {{"fields", {"end_ms", "decode_ms", "decode", "prefill", "sampled", "budget", "running", "waiting", "draft"}},
        {"rows", std::move(rows)},
        {"first", steps_.empty() ? json(nullptr) : json(steps_.front().index)},
        {"last", last_step_},
        {"gap", gap}}},
      {"sequences", {{"running", m.running}, {"queued", m.queued}, {"preempted", n_preempted}}},
      {"kv",
       {{"blocks", m.kv_blocks_total},
        {"used", m.kv_blocks_used},
        {"cached", m.kv_blocks_cached},
        {"free", kv_free},
        {"block_size", m.kv_block_size},
        {"peak_used", m.kv_peak_blocks_used}}},
      {"prefix_cache",
       {{"hit_rate", round2(100.0 * m.prefix_hit_rate) / 100.0},
        {"hit_rate_1m", d_prompt + d_cached > 0 ? json(round2(100.0 * static_cast<double>(d_cached) /
                                                                static_cast<double>(d_prompt + d_cached)) /
                                                         100.0)
                                                : json(nullptr)},
        {"cached_tokens", m.cached_prompt_tokens},
        {"prompt_tokens", m.prompt_tokens}}},
      {"throughput",
       {{"window_s", window_s},
        {"output_tokens_per_s", round2(static_cast<double>(sampled) / window_s)},
        {"prefill_tokens_per_s", round2(static_cast<double>(prefill) / window_s)},
        {"steps_per_s", round2(static_cast<double>(recent_.size()) / window_s)},
        {"batch_fill", budget > 0 ? round2(100.0 * static_cast<double>(tokens) / static_cast<double>(budget)) / 100.0 : 0.0},
        {"busy", round2(std::min(1.0, decode_ms / kRateWindowMs) * 100.0) / 100.0}}},
      {"latency", {{"window_s", 60}, {"ttft_ms", latency_json(lat.ttft)}, {"itl_ms", latency_json(lat.itl)}}},
      {"requests_total",
       {{"submitted", m.requests_submitted},
        {"finished", m.requests_finished},
        {"cancelled", m.requests_cancelled},
        {"failed", m.requests_failed},
        {"rejected", m.requests_rejected}}},
      {"preemptions", {{"memory", m.preemptions_memory}, {"priority", m.preemptions_priority}}},
      {"rejections",
       {{"queue_full", m.rejected_queue_full},
        {"too_long", m.rejected_too_long},
        {"invalid", m.rejected_invalid},
        {"deadline", m.rejected_deadline}}},
      {"deadline_misses", {{"queued", m.deadline_misses_queued}, {"running", m.deadline_misses_running}}},
      {"tokens", {{"generated", m.generated_tokens}, {"steps", m.steps}, {"step_tokens", m.step_tokens},
                  {"step_budget", m.step_budget}}},
      {"requests",
       {{"rows", std::move(requests)},
        {"total", table.rows.size()},
        {"age_ms", table.published_ms >= 0 ? json(round2(now - table.published_ms)) : json(nullptr)}}},
      {"http",
       {{"streams_active", server.streams_active},
        {"disconnects", server.disconnects},
        {"dashboard_streams", server.dashboard_streams}}},
      {"engine", {{"busy_ms", round2(m.busy_ms)}, {"live_view_ms", round2(engine_.live_view_ms())}}},
      {"feed", {{"events", n_events_}, {"build_ms", round2(build_ms_)}}},
      {"models", server.models},
  };
  first_ = false;
  return snap;
}

std::string DashboardFeed::next_event(const DashboardServerInfo& server) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string out = "event: snapshot\ndata: ";
  out += dump_json(next_snapshot(server));
  out += "\n\n";
  build_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ++n_events_;
  return out;
}

}  // namespace ubatch::server
