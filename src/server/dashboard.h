// The live scheduler dashboard's data: one JSON snapshot of the engine — the step records
// since the previous snapshot (decode and prefill tokens against the n_batch budget), running
// and waiting sequences, KV blocks, prefix-cache hit rate, throughput, TTFT/ITL over the last
// minute, preemptions and rejections by cause, the active requests, the policy and settings —
// framed as Server-Sent Events for GET /v1/dashboard/events (docs/API.md lists every field).
//
// Independent of the HTTP transport: a route owns one DashboardFeed per subscriber and writes
// next_event() every interval() until the client goes away or the server stops.
//
// Threads: a feed is used by one thread at a time (its subscriber's); any number of feeds
// may read one engine at once. Reading the engine never holds a lock the engine thread waits
// on for longer than one copy (sched::Engine, "Live views").
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sched/step_log.h"

namespace ubatch::sched {
class Engine;
}

namespace ubatch::server {

// What the engine does not know of itself: the server's side of the snapshot.
struct DashboardServerInfo {
  std::string model;             // the model id (/v1/models)
  bool api_key_required = false;
  int64_t streams_active = 0;    // completion streams in progress
  uint64_t disconnects = 0;      // requests cancelled because their client went away
  int64_t dashboard_streams = 0; // dashboard event streams open (this one included)
  // Every model served: [{"id", "status" (loaded/loading/unloaded), "requests_active",
  // "requests_waiting" (waiting for it to load)}]; the snapshot is of the one named `model`.
  nlohmann::json models = nlohmann::json::array();
};

class DashboardFeed {
 public:
  static constexpr int kDefaultIntervalMs = 250;
  static constexpr int kMinIntervalMs = 100;
  static constexpr int kMaxIntervalMs = 10000;
  static constexpr size_t kMaxStepsPerSnapshot = 4096;  // newest kept; `steps.gap` says so
  static constexpr size_t kMaxRequestRows = 256;        // oldest first; `requests.total` counts all
  static constexpr double kRateWindowMs = 5000;         // throughput: the last 5 s of steps
  static constexpr double kHistoryMs = 60000;           // steps sent on the first snapshot; hit-rate window

  // engine must outlive the feed.
  DashboardFeed(const sched::Engine& engine, int interval_ms);

  // The next snapshot. The first one carries the step records of the last minute; each later
  // one those since the previous call.
  nlohmann::json next_snapshot(const DashboardServerInfo& server);
  // The same as one SSE event: "event: snapshot\ndata: <compact JSON>\n\n". The snapshot's
  // `feed` says how many events this feed built before and the time they took.
  std::string next_event(const DashboardServerInfo& server);
  // Sent first on a stream: the reconnection delay a browser's EventSource would use.
  static std::string preamble();

  std::chrono::milliseconds interval() const { return std::chrono::milliseconds(interval_ms_); }

  // Parses the `interval_ms` query parameter: empty → the default; an integer in
  // [kMinIntervalMs, kMaxIntervalMs]; anything else → nullopt (400).
  static std::optional<int> parse_interval(const std::string& value);

 private:
  struct CacheSample {
    double t_ms;
    uint64_t prompt_tokens, cached_tokens;
  };

  const sched::Engine& engine_;
  int interval_ms_;
  uint64_t last_step_ = 0;
  bool first_ = true;
  uint64_t n_events_ = 0;   // events built so far
  double build_ms_ = 0;     // time spent building them (snapshot + JSON text), for the cost figures
  std::vector<sched::StepRecord> steps_;         // scratch for one read
  std::deque<sched::StepRecord> recent_;         // the last kRateWindowMs of steps seen
  std::deque<CacheSample> cache_history_;        // the last kHistoryMs of prefix-cache counters
};

}  // namespace ubatch::server
