// /metrics in the Prometheus text exposition format (version 0.0.4): engine counters
// (`_total`), gauges, and latency histograms converted from sched::Histogram (per-bucket
// counts in milliseconds) to cumulative `_bucket{le="<seconds>"}` series with `+Inf`,
// `_sum` (seconds) and `_count`. Every name starts with `ubatch_`; docs/API.md lists them.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "sched/metrics.h"

namespace ubatch::server {

// The HTTP layer's own numbers.
struct ServerMetrics {
  bool ready = false;                          // model loaded
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
};

// Renders everything; `engine` is null while the model loads (engine series are then absent).
std::string render_prometheus(const sched::MetricsSnapshot* engine, const ServerMetrics& server);

// One histogram as text: `name` without suffixes, buckets from h (milliseconds → seconds).
std::string render_histogram(const std::string& name, const std::string& help, const sched::Histogram& h);

}  // namespace ubatch::server
