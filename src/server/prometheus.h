// /metrics in the Prometheus text exposition format (version 0.0.4): engine counters
// (`_total`), gauges, and latency histograms converted from sched::Histogram (per-bucket
// counts in milliseconds) to cumulative `_bucket{le="<seconds>"}` series with `+Inf`,
// `_sum` (seconds) and `_count`. Every name starts with `ubatch_`; every series of a model (its
// engine, its load state) has a `model="<id>"` label; docs/API.md lists them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sched/metrics.h"
#include "server/model_registry.h"

namespace ubatch::server {

// The HTTP layer's own numbers.
struct ServerMetrics {
  bool ready = false;                          // a model serves (model_registry.h, serving())
  std::map<int, uint64_t> responses_by_status;  // HTTP responses sent, by status code
  uint64_t disconnects = 0;                    // requests cancelled because the client went away
  int64_t streams_active = 0;                  // SSE responses in progress
  bool draining = false;                       // graceful shutdown in progress
  // Connections (http::TransportStats).
  int64_t connections_open = 0;
  uint64_t connections_accepted = 0;
  uint64_t connections_refused = 0;            // over --max-connections: accepted and closed at once
  uint64_t timeouts_idle = 0, timeouts_header = 0, timeouts_body = 0, timeouts_send = 0;
  uint64_t slow_clients = 0;                   // streams cut off: the client read too slowly
  uint64_t bad_requests = 0;                   // malformed HTTP (400, connection closed)
  uint64_t models_budget_bytes = 0;            // --models-memory (0: no limit)
};

// One model the server serves (model_registry.h): its state and, when loaded, its engine's numbers.
struct ModelMetrics {
  std::string name;
  ModelState state = ModelState::Unloaded;
  uint64_t memory_bytes = 0;  // estimate of what it takes loaded
  uint64_t loads = 0, unloads = 0;
  int64_t waiting = 0;        // requests waiting for it to load
  std::optional<sched::MetricsSnapshot> engine;  // absent unless loaded
};

// Renders everything. Every model's series carry a `model` label; engine series exist for the
// loaded models only (an engine's counters start at zero again when its model is reloaded).
std::string render_prometheus(const std::vector<ModelMetrics>& models, const ServerMetrics& server);

// One histogram family as text: `name` without suffixes, one series per (label set, h)
// (`labels` such as `model="x"`, without braces; milliseconds → seconds).
std::string render_histogram(const std::string& name, const std::string& help,
                             const std::vector<std::pair<std::string, const sched::Histogram*>>& series);

}  // namespace ubatch::server
