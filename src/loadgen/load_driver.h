// The load generator behind `ubatch load`: drives an OpenAI-compatible endpoint with a
// closed loop (N users, each sending its next request when its last one completes, after an
// optional think time) or an open loop (Poisson arrivals at a fixed rate, independent of
// completions), for a duration or a number of requests, and summarizes what it measured.
//
// Stop rule: no request is started after `duration_s` (or after `n_requests` were started);
// requests in flight then run to their end (bounded by the endpoint's read timeout), and the
// run's wall time runs until the last one ends. Rates are per wall-time second:
//   request rate = completed / wall s; output tokens/s = Σ output tokens of completed / wall s.
// Latency summaries (TTFT, ITL, TPOT, e2e) are over completed requests only; ITL pools the
// gaps of all requests. Errors are counted by kind ("http_503", "connect", "stream_error", …).
//
// Threads: one per user (closed loop) or one per request in flight (open loop), plus the
// caller, which waits and drives the optional progress callback.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/load_classes.h"
#include "loadgen/load_client.h"
#include "loadgen/load_mix.h"
#include "loadgen/prompts.h"
#include "bench/stats.h"
#include "common/status.h"

namespace ubatch::loadgen {

struct LoadConfig {
  EndpointConfig endpoint;
  int32_t users = 1;          // closed loop: concurrent users (used when rate <= 0)
  double rate = 0;            // > 0: open loop, Poisson arrivals per second
  double think_ms = 0;        // closed loop: pause between a user's requests
  double duration_s = 0;      // > 0: stop starting requests after this long
  int64_t n_requests = 0;     // > 0: start at most this many requests
  uint64_t seed = 1;          // request mix and arrival times
  int32_t max_in_flight = 1024;  // open loop: arrivals beyond this many in flight are dropped (counted)
  bool open_loop() const { return rate > 0; }
};

// Errors: neither duration nor request count, bad counts/rates, a bad endpoint.
Status validate(const LoadConfig& cfg);

struct Progress {
  double elapsed_s = 0;
  double fraction = 0;       // of the duration or request count, in [0, 1]
  int64_t started = 0, completed = 0, errors = 0, in_flight = 0;
  int64_t output_tokens = 0;
};

struct LoadReport {
  std::string mode;          // "closed" or "open"
  int32_t users = 0;
  double rate = 0;
  double wall_s = 0;
  int64_t n_started = 0, n_completed = 0, n_errors = 0, n_dropped = 0;
  int64_t n_reconnects = 0;  // requests resent once after a stale kept-alive connection
  std::map<std::string, int64_t> errors;  // by kind
  std::map<std::string, std::string> error_examples;  // first message of each kind
  int64_t n_output_tokens = 0;
  int64_t n_prompt_tokens = 0;  // Σ usage.prompt_tokens (where reported)
  int64_t n_usage_reported = 0; // completed requests whose token count came from usage
  double request_rate = 0;      // completed / s
  double output_tps = 0;        // output tokens / s
  Summary ttft_ms, itl_ms, tpot_ms, e2e_ms, output_tokens;
  // The priority/deadline mix (load_classes.h): reported when the mix has an urgent class.
  bool has_classes = false;
  ClassReport urgent, normal;
  int64_t n_lost = 0;  // ended with neither a response nor a deadline outcome
  // A mix of kinds (--mix; load_mix.h): each kind's outcome, and each model's busy seconds
  // during the run as the server's /metrics counted them (empty when not read).
  std::map<std::string, ClassReport> kinds;
  std::map<std::string, double> model_busy_s;
  std::vector<RequestResult> requests;  // every finished request, in completion order
};

// Builds the report's counters and summaries from finished requests.
LoadReport summarize_requests(std::vector<RequestResult> requests, double wall_s);

// Runs the load. on_progress (may be empty) is called from the caller's thread about every
// 200 ms and once at the end.
Result<LoadReport> run_load(const LoadConfig& cfg, const RequestMix& mix,
                            const std::function<void(const Progress&)>& on_progress = {});

nlohmann::json to_json(const LoadReport& r, bool with_requests);
// A few lines for the terminal.
std::string format_text(const LoadReport& r);

}  // namespace ubatch::loadgen
